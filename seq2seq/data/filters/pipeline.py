"""Chunks of pairs judged by the filters, in worker processes, in input order, with bounded memory.

    judge(filters, pairs)                       -> [(filter index, reason) or None] per pair: the first
                                                   filter that rejects it
    verdicts(chunks, filters, workers)          -> (chunk, its verdicts), chunk after chunk, in order

The filters that run `in_workers` judge each chunk in a pool of `workers` processes (forked, each
holding its own copy of the filters: py3langid's model, the regexes, the lexicon), at most 2 x workers chunks in
flight, so memory stays bounded however long the input; the others (dedup, model-based filters) then
judge the pairs still kept, in the main process and in input order. The pairs given are stripped; the
verdicts refer to them by position.
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from multiprocessing.pool import AsyncResult

from seq2seq.data.filters.base import Pair, PairFilter

Verdict = tuple[int, str] | None  # (index of the filter in the run's list, its reason), None: kept


def judge(filters: Sequence[tuple[int, PairFilter]], pairs: Sequence[Pair],
          verdicts: list[Verdict] | None = None) -> list[Verdict]:
    """Each pair's verdict by `filters` ((index, filter), in order): the first that rejects it. With
    `verdicts` (one per pair), only the pairs still kept there are judged, and that list is filled in."""
    out: list[Verdict] = verdicts if verdicts is not None else [None] * len(pairs)
    alive = [i for i, v in enumerate(out) if v is None]
    for index, rule in filters:
        if not alive:
            break
        reasons = rule.keep_batch([pairs[i] for i in alive])
        still = []
        for i, reason in zip(alive, reasons):
            if reason is None:
                still.append(i)
            else:
                out[i] = (index, reason)
        alive = still
    return out


_WORKER_FILTERS: list[tuple[int, PairFilter]] = []


def _start_worker(filters: list[tuple[int, PairFilter]]) -> None:
    global _WORKER_FILTERS
    _WORKER_FILTERS = filters


def _judge_in_worker(pairs: list[Pair]) -> list[Verdict]:
    return judge(_WORKER_FILTERS, pairs)


def verdicts(chunks: Iterable[list[Pair]], filters: Sequence[PairFilter],
             workers: int = 1) -> Iterator[tuple[list[Pair], list[Verdict]]]:
    """Each chunk (stripped pairs) with its verdicts, in input order: the `in_workers` filters in a pool
    of `workers` processes (1: this process), then the others here. A filter's error in a worker is
    raised here."""
    indexed = list(enumerate(filters))
    in_workers = [(i, f) for i, f in indexed if f.in_workers]
    in_main = [(i, f) for i, f in indexed if not f.in_workers]
    if workers <= 1:
        for chunk in chunks:
            yield chunk, judge(in_main, chunk, judge(in_workers, chunk))
        return
    # fork where there is one (as seq2seq.data.shards does): a worker starts at once with the filters as
    # built and prepared here (spawn would import the command line, torch and all, into each); they run
    # only regexes and py3langid's numpy
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    with context.Pool(workers, initializer=_start_worker, initargs=(in_workers,)) as pool:
        pending: deque[tuple[list[Pair], AsyncResult[list[Verdict]]]] = deque()
        for chunk in chunks:
            pending.append((chunk, pool.apply_async(_judge_in_worker, (chunk,))))
            if len(pending) >= 2 * workers:
                done, result = pending.popleft()
                yield done, judge(in_main, done, result.get())
        while pending:
            done, result = pending.popleft()
            yield done, judge(in_main, done, result.get())
