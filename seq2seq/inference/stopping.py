"""Stopping a search between two decoding steps, for a caller that may stop wanting its result.

A server request past its time budget, or whose client went away, should free the model at once, not
after minutes of beam search. Its caller runs the model call inside `stop_when(check)`: every
`seq2seq.inference.search.search` started inside it calls `check()` once before each decoding step and
raises `SearchStopped` when it returns True, so the call ends within one step (the encoder, and a
CTranslate2 engine's own search, run to their end). Outside such a block a search reads one context
variable per call and nothing per step, and its results are the same, bit for bit.

The check is a context variable (`contextvars`): it belongs to the thread (or asyncio task) that set it,
so the server's batching worker sets it around its model call and nothing in between (the Translator,
the text pipeline, an ensemble) carries it.

    with stop_when(lambda: time.monotonic() > deadline):
        translator.translate_nbest(texts)   # SearchStopped past the deadline
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Callable, Iterator

from seq2seq.config.diagnostics import Seq2SeqError

__all__ = ["SearchStopped", "stop_check", "stop_when"]

StopCheck = Callable[[], bool]  # True: stop the search before its next decoding step

_CHECK: ContextVar[StopCheck | None] = ContextVar("seq2seq_search_stop_check", default=None)


class SearchStopped(Seq2SeqError, RuntimeError):
    """A search stopped between two decoding steps because the check of `stop_when` said so: its caller
    no longer wants the result (not a failure of the model or of the input)."""

    code = "search_stopped"


@contextlib.contextmanager
def stop_when(check: StopCheck) -> Iterator[None]:
    """Searches started inside this block (in this thread or task) stop, raising `SearchStopped`, before
    the first decoding step at which `check()` is True. `check` should be cheap: it runs once a step."""
    token = _CHECK.set(check)
    try:
        yield
    finally:
        _CHECK.reset(token)


def stop_check() -> StopCheck | None:
    """The check of the innermost `stop_when` block around the caller, or None outside one."""
    return _CHECK.get()
