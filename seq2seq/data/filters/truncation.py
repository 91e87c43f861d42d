"""`truncation`: a line cut short, at a byte limit or by a bad sentence split: one side ends its
sentence and the other does not, and that other side is shorter than `clean.truncation.max_share` of
what the corpus's length ratio (`ratio.expected_ratio`) gives it."""

from __future__ import annotations

import re
from collections.abc import Sequence

from seq2seq.data.filters.base import Pair, PairFilter
from seq2seq.data.filters.ratio import expected_ratio

# Sentence-final punctuation (Latin, CJK full-width, Arabic, Devanagari danda, ellipsis), then closing
# quotes or brackets.
SENTENCE_END = re.compile(r"[.!?\u3002\uff01\uff1f\u061f\u0964\u2026][\"'\u201d\u2019\u00bb)\]\u300d\u300f]*$")


class TruncationFilter(PairFilter):
    """Reasons: `truncated_target` / `truncated_source`."""

    name = "truncation"
    reasons = ("truncated_target", "truncated_source")
    expected = 1.0

    def prepare(self, sample: Sequence[Pair]) -> dict[str, object]:
        given = self.cfg.ratio.expected
        self.expected = given if given is not None else expected_ratio(sample, self.cfg.ratio.exempt_chars)
        return {"expected_ratio": round(self.expected, 4)}

    def keep(self, src: str, tgt: str) -> str | None:
        src_ends, tgt_ends = SENTENCE_END.search(src) is not None, SENTENCE_END.search(tgt) is not None
        if src_ends == tgt_ends:
            return None
        share = self.cfg.truncation.max_share
        if src_ends and len(tgt) < share * self.expected * len(src):
            return "truncated_target"
        if tgt_ends and len(src) * self.expected < share * len(tgt):
            return "truncated_source"
        return None
