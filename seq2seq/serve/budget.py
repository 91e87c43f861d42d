"""What one request may cost the server: the work it may ask for, refused up front (`check_work`), and
the time it may hold the model, after which it is answered and its model call stopped
(`wait_for_result`).

Work: a search computes, for each source, at most one decoder position per output token and decoder
row, so a request's work is the sum over its sources of its length limit (`SearchConfig.max_length`)
times its rows (`SearchConfig.rows_per_source`: the beam, the number of samples, or 1 for greedy
search). Over `Limits.max_work` the request is refused with 413 before it is queued, naming the limit
and the largest beam (or number of samples) that fits. The length limit is each text's, from its
source tokens; a file's (image, audio) is the model's cap, its source length being unknown before it
is decoded.

Time: a request's answer is due `Limits.request_timeout_s` after it reached the model's queue. Past
it, or once its client has closed the connection, the request stops waiting: it is answered 504 (the
client gone: 499, which nobody reads), its job is abandoned, and the batching worker stops the model
call before its next decoding step when no other request waits for it (`seq2seq.serve.batcher`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from typing import TYPE_CHECKING, Sequence, TypeVar

from seq2seq.config.search import SearchConfig
from seq2seq.serve.batcher import Abandoned
from seq2seq.serve.requests import Limits, RequestError

if TYPE_CHECKING:
    from fastapi import Request

CLIENT_GONE = 499  # the status logged for a request whose client closed the connection (nginx's)


def request_work(cfg: SearchConfig, source_lengths: Sequence[int | None], max_positions: int) -> tuple[int, int]:
    """(the decoder positions a search of these sources may compute, the output tokens that is per row):
    each source's length limit (`cfg.max_length` of its source positions; None: unknown, the model's cap)
    summed, times `cfg.rows_per_source`."""
    tokens = sum(cfg.length_cap(max_positions) if n is None else cfg.max_length(n, max_positions)
                 for n in source_lengths)
    return tokens * cfg.rows_per_source, tokens


def check_work(cfg: SearchConfig, source_lengths: Sequence[int | None], max_positions: int, limits: Limits) -> None:
    """413 when the sources' work (`request_work`) is over `limits.max_work`, saying how to get under it."""
    work, tokens = request_work(cfg, source_lengths, max_positions)
    if work <= limits.max_work:
        return
    rows = {"beam": "beam", "sample": "nbest"}.get(cfg.strategy)
    fits = limits.max_work // max(tokens, 1)
    if rows is not None and fits >= 1:
        smaller = f"a smaller {rows} ({fits} fits), "
    else:
        smaller = ""
    raise RequestError(413, f"this request may take up to {work:,} decoder steps ({len(source_lengths)} sources, "
                            f"{tokens:,} output tokens at most, x {cfg.rows_per_source} rows each); this server's "
                            f"limit is {limits.max_work:,} (--max-work): send fewer or shorter texts, {smaller}"
                            "or a lower max_len_a / max_len_b")


async def client_gone(request: Request) -> None:
    """Returns when the client has closed the connection (the server's `http.disconnect`). Call it only
    once the request's body has been read: it reads what the connection brings next."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


ResultT = TypeVar("ResultT")


async def wait_for_result(future: concurrent.futures.Future[ResultT], abandoned: threading.Event, deadline: float,
                          request: Request | None, limits: Limits) -> ResultT:
    """The result of a batcher job (`future`; its exception re-raised), awaited until `deadline` (a
    time.monotonic()) and while the client of `request` (None: not watched) is connected. Otherwise the
    job is abandoned (`abandoned` set, the future cancelled) and RequestError: 504 past the deadline,
    `CLIENT_GONE` when the client went away. Cancelled itself (the server stopping), it abandons the job."""
    result = asyncio.wrap_future(future)
    watch = asyncio.ensure_future(client_gone(request)) if request is not None else None
    waiting: set[asyncio.Future[ResultT] | asyncio.Future[None]] = {result} if watch is None else {result, watch}
    try:
        done, _ = await asyncio.wait(waiting, timeout=max(0.0, deadline - time.monotonic()),
                                     return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        abandoned.set()
        result.cancel()
        raise
    finally:
        if watch is not None:
            watch.cancel()
    running = future.running()
    if result in done:
        try:
            return result.result()
        except Abandoned as e:  # the worker saw its deadline pass a moment before this wait did
            running = e.running
    abandoned.set()
    result.cancel()  # (and the job's future, if the worker has not taken it yet)
    if watch is not None and watch in done:
        raise RequestError(CLIENT_GONE, "the client closed the connection before its answer was ready")
    where = "its model call was stopped" if running else "it was still waiting behind earlier requests"
    raise RequestError(504, f"the request was not done within this server's time budget of "
                            f"{limits.request_timeout_s:g} s (--request-timeout; {where}): ask for less work (fewer "
                            "or shorter texts, a smaller beam or nbest, a lower max_len_a / max_len_b / min_len) "
                            "or try again later")
