"""`ratio`: the target/source length ratio, against the corpus's own (`clean.ratio`), so that en->de
(targets ~15% longer) and en->zh (a third as many characters) need no tuning.

    expected_ratio(sample)  -> the median target/source character ratio of the pairs it is given
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from seq2seq.data.filters.base import Pair, PairFilter


def expected_ratio(sample: Sequence[Pair], exempt_chars: int = 15) -> float:
    """The median of len(tgt) / len(src) over the pairs whose longer side has more than `exempt_chars`
    characters (the median: a third of the pairs may be noise); 1.0 without any."""
    ratios = [len(t) / len(s) for s, t in sample if s and t and max(len(s), len(t)) > exempt_chars]
    return statistics.median(ratios) if ratios else 1.0


class RatioFilter(PairFilter):
    """Reasons: `long_target` / `long_source`, a ratio more than `tolerance` times the expected one
    above / below it."""

    name = "ratio"
    reasons = ("long_target", "long_source")
    expected = 1.0

    def prepare(self, sample: Sequence[Pair]) -> dict[str, object]:
        rules = self.cfg.ratio
        self.expected = rules.expected if rules.expected is not None else expected_ratio(sample, rules.exempt_chars)
        return {"expected_ratio": round(self.expected, 4),
                "from": "clean.ratio.expected" if rules.expected is not None else f"the first {len(sample):,} pairs"}

    def keep(self, src: str, tgt: str) -> str | None:
        rules = self.cfg.ratio
        if max(len(src), len(tgt)) <= rules.exempt_chars or not src or not tgt:
            return None
        relative = len(tgt) / (len(src) * self.expected)
        if relative > rules.tolerance:
            return "long_target"
        if relative * rules.tolerance < 1.0:
            return "long_source"
        return None
