"""`length`: empty sides, and sides outside `clean.length`'s character and word bounds."""

from __future__ import annotations

from seq2seq.data.filters.base import PairFilter


class LengthFilter(PairFilter):
    """Reasons: `empty` (a side with no text), `too_short` / `too_long` (a side's characters or words
    outside [min, max])."""

    name = "length"
    reasons = ("empty", "too_short", "too_long")

    def keep(self, src: str, tgt: str) -> str | None:
        if not src or not tgt:
            return "empty"
        rules = self.cfg.length
        for side in (src, tgt):
            chars = len(side)
            if chars > rules.max_chars:
                return "too_long"
            if chars < rules.min_chars:
                return "too_short"
            words = len(side.split())
            if words > rules.max_words:
                return "too_long"
            if words < rules.min_words:
                return "too_short"
        return None
