"""`CleanReport`: what a cleaning run removed, per filter and reason (counts, the first examples with
their input line), and what each filter learnt from the corpus; written as JSON (`as_json`) and shown
as a few readable lines (`summary`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict


class RemovedPair(TypedDict):
    """A removed pair as the report shows it: its 1-based input line, its source and target."""

    line: int
    src: str
    tgt: str


@dataclass
class ReasonCount:
    """The pairs one filter removed for one reason: how many, and the first `examples` of them
    ({"line": 1-based input line, "src", "tgt"})."""

    removed: int = 0
    examples: list[RemovedPair] = field(default_factory=list)


@dataclass
class CleanReport:
    """A cleaning run's counts. `filters`: filter name -> reason -> `ReasonCount`, in the filters' order
    (every reason listed, removed 0 included); `learnt`: filter name -> what `prepare` returned."""

    filters: dict[str, dict[str, ReasonCount]]
    max_examples: int = 5
    pairs: int = 0
    kept: int = 0
    learnt: dict[str, dict[str, object]] = field(default_factory=dict)
    seconds: float = 0.0

    @classmethod
    def for_filters(cls, reasons: dict[str, tuple[str, ...]], max_examples: int) -> CleanReport:
        return cls({name: {r: ReasonCount() for r in rs} for name, rs in reasons.items()}, max_examples)

    @property
    def removed(self) -> int:
        return self.pairs - self.kept

    def record(self, line: int, filter_name: str, reason: str, src: str, tgt: str) -> None:
        """Count one removed pair (keeping it as an example while its reason has fewer than max)."""
        count = self.filters[filter_name].setdefault(reason, ReasonCount())
        count.removed += 1
        if len(count.examples) < self.max_examples:
            count.examples.append({"line": line, "src": src, "tgt": tgt})

    def removed_by(self, filter_name: str) -> int:
        return sum(c.removed for c in self.filters[filter_name].values())

    def as_json(self) -> dict[str, object]:
        return {
            "pairs": self.pairs, "kept": self.kept, "removed": self.removed,
            "seconds": round(self.seconds, 3),
            "pairs_per_second": round(self.pairs / self.seconds) if self.seconds > 0 else None,
            "filters": [{"name": name, "removed": self.removed_by(name), "learnt": self.learnt.get(name, {}),
                         "reasons": {r: {"removed": c.removed, "examples": c.examples} for r, c in reasons.items()}}
                        for name, reasons in self.filters.items()],
        }

    def summary(self) -> str:
        """A few lines: the totals, then each filter's removed pairs by reason."""
        share = lambda n: f"{100 * n / self.pairs:.2f}%" if self.pairs else "0%"  # noqa: E731
        lines = [f"kept {self.kept:,} of {self.pairs:,} pairs, removed {self.removed:,} ({share(self.removed)})"
                 + (f" in {self.seconds:.1f} s" if self.seconds else "")]
        for name, reasons in self.filters.items():
            n = self.removed_by(name)
            detail = ", ".join(f"{r} {c.removed:,}" for r, c in reasons.items() if c.removed)
            lines.append(f"  {name:<12} {n:>10,} {share(n):>7}" + (f"  ({detail})" if detail else ""))
        return "\n".join(lines)
