"""`copy`: the source copied into the target, as is or nearly (`clean.copy`): identical once folded
(`normalise.fold`), or sharing most of their words."""

from __future__ import annotations

from seq2seq.data.filters.base import PairFilter
from seq2seq.data.filters.normalise import fold


class CopyFilter(PairFilter):
    """Reasons: `identical`, `near_identical` (word-set Jaccard overlap >= max_overlap)."""

    name = "copy"
    reasons = ("identical", "near_identical")

    def keep(self, src: str, tgt: str) -> str | None:
        a, b = fold(src), fold(tgt)
        if a == b:
            return "identical" if a or src == tgt else None
        rules = self.cfg.copy
        src_words, tgt_words = set(a.split()), set(b.split())
        if len(src_words) < rules.min_words or len(tgt_words) < rules.min_words:
            return None
        overlap = len(src_words & tgt_words) / len(src_words | tgt_words)
        return "near_identical" if overlap >= rules.max_overlap else None
