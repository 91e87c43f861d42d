"""The server's batching worker: one thread runs the model, on batches gathered from concurrent requests.

It takes the first waiting job, gathers whatever else arrives within `window_s` (or until
`max_batch` items), and makes one call per set of equal options (jobs with equal keys), so
concurrent requests share model calls. When a merged call raises, its jobs run again one by one:
the job that caused it gets the exception, the others their results.

A job is wanted until its deadline or until its request abandons it (`abandoned`, set when the client
went away or the request stopped waiting). A job no longer wanted is dropped if it is still queued, and
a model call whose jobs are all unwanted is stopped before its next decoding step
(`seq2seq.inference.search.stop_when`): the worker is free within one step, whatever the call asked for.
"""

from __future__ import annotations

import concurrent.futures
import copy
import json
import logging
import math
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Generic, TypeVar

from seq2seq.config.diagnostics import Seq2SeqError
from seq2seq.inference.search import SearchStopped, stop_when
from seq2seq.serve.requests import RequestError

log = logging.getLogger("seq2seq.serve.batcher")

ItemT = TypeVar("ItemT")  # what a job holds one of per source (the server's: a text or path and its steering)
OptionsT = TypeVar("OptionsT")  # what a job's items share (the server's: the call they are decoded with)
ResultT = TypeVar("ResultT")  # what the model call gives each item


@dataclass
class _Job(Generic[ItemT, OptionsT, ResultT]):
    items: list[ItemT]
    options: OptionsT
    key: object  # jobs with equal keys may share a model call
    future: concurrent.futures.Future[list[ResultT]] = field(default_factory=concurrent.futures.Future)
    deadline: float = math.inf  # time.monotonic() past which its result is not wanted
    abandoned: threading.Event = field(default_factory=threading.Event)  # set: its request no longer waits

    def wanted(self) -> bool:
        """Does a request still wait for this job's result?"""
        return not self.abandoned.is_set() and time.monotonic() < self.deadline


class Abandoned(Seq2SeqError, RuntimeError):
    """A job's model call was stopped (running: True), or the job dropped from the queue, because no
    request wanted its result any more (past the deadline, or abandoned)."""

    code = "abandoned"

    def __init__(self, message: str, running: bool) -> None:
        super().__init__(message)
        self.running = running


RECENT_CALLS = 1000  # model calls whose batch sizes a Batcher keeps (for tests and monitoring)


class Batcher(Generic[ItemT, OptionsT, ResultT]):
    """Runs `run(items, options) -> results` (one result per item) on one worker thread, merging the
    items of jobs that arrive within `window_s` of each other and have the same key into one call of
    at most `max_batch` items (the options of the call: its first job's).

    `calls` counts the model calls, `batch_sizes` records the items of each of the last `RECENT_CALLS`.
    """

    def __init__(self, run: Callable[[list[ItemT], OptionsT], list[ResultT]], max_batch: int, window_s: float,
                 max_queue: int) -> None:
        self.run, self.max_batch, self.window_s, self.max_queue = run, max_batch, window_s, max_queue
        self._queue: queue.Queue[_Job[ItemT, OptionsT, ResultT] | None] = queue.Queue()  # None: stop
        self._lock = threading.Lock()
        self._pending = 0  # items submitted and not yet finished
        self._closed = False
        self.calls = 0
        self.batch_sizes: list[int] = []
        self._thread = threading.Thread(target=self._work, name="seq2seq-serve-worker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def pending(self) -> int:
        """Items submitted and not finished (waiting or being run)."""
        with self._lock:
            return self._pending

    @property
    def alive(self) -> bool:
        """Is the worker thread running?"""
        return self._thread.is_alive()

    @property
    def waiting_jobs(self) -> int:
        """Jobs in the queue, not yet taken by the worker."""
        return self._queue.qsize()

    def submit(self, items: list[ItemT], options: OptionsT, mergeable: bool = True, deadline: float = math.inf,
               abandoned: threading.Event | None = None, key: str | None = None) -> concurrent.futures.Future[list[ResultT]]:
        """Queue a job; its future gets the list of results (or the model's exception, or `Abandoned` when
        it was no longer wanted: past `deadline`, a time.monotonic(), or once `abandoned` is set).
        A mergeable job shares a model call with the jobs of equal `key` (None: the options as JSON).
        RequestError 503 when the queue is full or the batcher is closed."""
        with self._lock:
            if self._closed:
                raise RequestError(503, "the server is shutting down")
            if self._pending + len(items) > self.max_queue:
                raise RequestError(503, f"the server is busy ({self._pending} texts waiting); try again shortly")
            self._pending += len(items)
        merge_key: object = (json.dumps(options, sort_keys=True) if key is None else key) if mergeable else object()
        job = _Job[ItemT, OptionsT, ResultT](list(items), copy.copy(options), merge_key, deadline=deadline,
                                              abandoned=abandoned or threading.Event())
        self._queue.put(job)
        return job.future

    def refuse_new(self) -> None:
        """Refuse new jobs (503) from now on; the queued ones still run."""
        with self._lock:
            self._closed = True

    def close(self, timeout: float | None = None) -> None:
        """Refuse new jobs, finish the queued ones (those still wanted), stop the worker; wait for it at
        most `timeout` seconds (None: until it stops)."""
        self.refuse_new()
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout)

    def _work(self) -> None:
        stop = False
        while not stop:
            first = self._queue.get()
            if first is None:
                break
            jobs, n = [first], len(first.items)
            deadline = time.monotonic() + self.window_s
            while n < self.max_batch:
                try:
                    job = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if job is None:
                    stop = True  # run what was gathered, then stop (jobs are never queued after the stop)
                    break
                jobs.append(job)
                n += len(job.items)
            self._run_jobs(jobs)

    def _run_jobs(self, jobs: list[_Job[ItemT, OptionsT, ResultT]]) -> None:
        groups: dict[object, list[_Job[ItemT, OptionsT, ResultT]]] = {}
        for job in jobs:
            if not job.future.set_running_or_notify_cancel():  # False: its request cancelled it
                self._done(len(job.items))
            elif not job.wanted():  # past its deadline, or abandoned, while it waited
                job.future.set_exception(Abandoned("dropped from the queue: no request waits for it", running=False))
                self._done(len(job.items))
            else:
                groups.setdefault(job.key, []).append(job)
        for group in groups.values():
            chunk: list[_Job[ItemT, OptionsT, ResultT]] = []
            for job in group:
                if chunk and sum(len(j.items) for j in chunk) + len(job.items) > self.max_batch:
                    self._call(chunk)
                    chunk = []
                chunk.append(job)
            if chunk:
                self._call(chunk)

    def _call(self, jobs: list[_Job[ItemT, OptionsT, ResultT]]) -> None:
        """One model call for `jobs`; if a merged call (several jobs) raises, each job is run again on
        its own, so one bad request fails alone and its neighbours still get their results."""
        items = [item for job in jobs for item in job.items]
        try:
            self.calls += 1
            self.batch_sizes.append(len(items))
            del self.batch_sizes[:-RECENT_CALLS]  # a long-running server keeps the recent ones only
            # the search stops before its next step once no job of the call is wanted (a few us a step)
            with stop_when(lambda: not any(job.wanted() for job in jobs)):
                results = self.run(items, jobs[0].options) if items else []
        except SearchStopped:
            log.info("a model call of %d texts was stopped: no request waits for it any more", len(items))
            for job in jobs:
                job.future.set_exception(Abandoned("stopped: no request waits for it", running=True))
        except BaseException as e:  # noqa: BLE001 - handed to the requests, which answer 500
            if len(jobs) > 1 and isinstance(e, Exception):
                log.warning("a batch of %d requests failed (%s: %s); running them one by one",
                            len(jobs), type(e).__name__, str(e).split("\n")[0])
                for job in jobs:
                    self._call([job])  # each counts its own items done
                return
            for job in jobs:
                job.future.set_exception(e)
        else:
            start = 0
            for job in jobs:
                job.future.set_result(results[start: start + len(job.items)])
                start += len(job.items)
        self._done(len(items))

    def _done(self, n: int) -> None:
        with self._lock:
            self._pending -= n
