"""What a filter is: a small object with a name that looks at one text pair and says why it should go.

    class Shouting(PairFilter):
        name = "shouting"
        reasons = ("upper_case",)

        def keep(self, src, tgt):
            return "upper_case" if src.isupper() or tgt.isupper() else None

`keep(src, tgt)` gets both sides stripped of surrounding whitespace and returns None to keep the pair,
else one of `reasons` (the report counts and shows removed pairs by filter and reason). `keep_batch`
is the batch form (a model-based filter scores a batch at once); by default it calls `keep` per pair.
`prepare(sample)` lets a filter learn from the corpus's first pairs before any is judged (the ratio
filter's expected length ratio) and returns what it learnt, for the report. A filter is built from
the `CleanConfig` (`__init__(cfg)`) in the main process, then pickled to the worker processes; one
that must see every pair in order (dedup's hash set) or holds a model sets `in_workers = False` and
judges in the main process, after the worker filters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from seq2seq.config.clean_section import CleanConfig
from seq2seq.config.diagnostics import Seq2SeqError

Pair = tuple[str, str]


class FilterError(Seq2SeqError, ValueError):
    """A filter that cannot be built or run as configured (an unknown name, a language it does not
    know) or a corpus it cannot read; the message names the key, file or line."""


class PairFilter:
    """One rule over text pairs (see the module docstring): `name`, the `reasons` it gives, `keep`."""

    name: ClassVar[str] = ""
    reasons: ClassVar[tuple[str, ...]] = ()
    in_workers: ClassVar[bool] = True  # False: judged in the main process, in input order

    def __init__(self, cfg: CleanConfig) -> None:
        self.cfg = cfg

    def prepare(self, sample: Sequence[Pair]) -> dict[str, object]:
        """Learn from the corpus's first pairs (stripped); what was learnt, for the report ({}: nothing)."""
        return {}

    def keep(self, src: str, tgt: str) -> str | None:
        """None to keep the pair, else the reason (one of `reasons`) to remove it."""
        raise NotImplementedError

    def keep_batch(self, pairs: Sequence[Pair]) -> list[str | None]:
        """`keep` of each pair, in order."""
        return [self.keep(src, tgt) for src, tgt in pairs]
