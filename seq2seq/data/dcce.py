"""Dual conditional cross-entropy filtering (Junczys-Dowmunt 2018, "Dual Conditional Cross-Entropy
Filtering of Noisy Parallel Corpora"): two models judge each pair, and the pairs they both find likely,
and equally likely, are kept.

A forward model (source -> target) and a backward model (target -> source), trained on clean data,
give each pair its per-token cross-entropies (nats, EOS counted: `PairScore.cross_entropy`)

    H_f = H_forward(y | x)        H_b = H_backward(x | y)

and the pair its score and adequacy

    dcce = |H_f - H_b| + (H_f + H_b) / 2        adequacy = exp(-dcce), in (0, 1]

The first term punishes a pair that one direction finds far likelier than the other (a target
that says less than its source is easy to predict from it, the source hard to predict from the
target), the second a pair both find unlikely (a misalignment, the wrong language). Lower dcce,
higher adequacy: better. A pair one model could not score (an empty side) has dcce inf and adequacy 0.

`DualCrossEntropyFilter` keeps the pairs whose adequacy reaches a threshold, or the best share of the
pairs it is given (a share needs all the scores at once: `threshold_for_share` turns a share of a
sample's scores into a threshold a streaming pipeline can apply pair by pair). It is a standalone piece
for a cleaning pipeline to register: `select(srcs, tgts)` scores a block of pairs with both models and
says which stay, `decide(scores)` does the same from scores computed before, and `prepare` /
`keep_batch` are a pipeline filter's (`seq2seq.data.filters.base.PairFilter`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, Sequence

from seq2seq.config.diagnostics import Seq2SeqError, Warn

__all__ = ["DcceScore", "DualCrossEntropyFilter", "DualScorer", "DcceError", "dcce", "threshold_for_share"]


class DcceError(Seq2SeqError, ValueError):
    """A dual cross-entropy filter set up wrongly (no threshold or share, both, or one out of range)."""

    code = "dcce"


class Scored(Protocol):
    """A pair's score by one model: what `DcceScore.of` reads (`seq2seq.inference.scoring.PairScore`)."""

    @property
    def cross_entropy(self) -> float: ...


class DualScorer(Protocol):
    """Scores pairs with a forward and a backward model: (srcs, tgts, first_line, warn) -> one `DcceScore`
    a pair (`seq2seq.inference.scoring.DualScorer` does it by forced decoding)."""

    def __call__(self, srcs: Sequence[str], tgts: Sequence[str], first_line: int = 1,
                 warn: Warn | None = None) -> list[DcceScore]: ...


def dcce(h_forward: float, h_backward: float) -> float:
    """|H_f - H_b| + (H_f + H_b) / 2 of two per-token cross-entropies (inf when either is)."""
    if math.isinf(h_forward) or math.isinf(h_backward):
        return math.inf
    return abs(h_forward - h_backward) + 0.5 * (h_forward + h_backward)


@dataclass(frozen=True)
class DcceScore:
    """One pair's dual conditional cross-entropy: h_forward H(y | x) and h_backward H(x | y), per-token
    cross-entropies in nats (inf: not scored), and the score made of them (see the module docstring)."""

    h_forward: float
    h_backward: float

    @property
    def score(self) -> float:
        """dcce: lower is better; inf for a pair either model did not score."""
        return dcce(self.h_forward, self.h_backward)

    @property
    def adequacy(self) -> float:
        """exp(-dcce), in (0, 1] (0 for a pair not scored): higher is better; what thresholds compare."""
        return math.exp(-self.score)

    @classmethod
    def of(cls, forward: Scored, backward: Scored) -> DcceScore:
        """From the forward model's score of (x, y) and the backward model's of (y, x) (`PairScore`s)."""
        return cls(forward.cross_entropy, backward.cross_entropy)

    def to_json(self) -> dict[str, float | None]:
        """adequacy (6 significant digits), dcce, h_forward, h_backward (4 decimals; null where inf)."""

        def value(x: float) -> float | None:
            return None if math.isinf(x) else round(x, 4)

        return {"adequacy": float(f"{self.adequacy:.6g}"), "dcce": value(self.score),
                "h_forward": value(self.h_forward), "h_backward": value(self.h_backward)}


def threshold_for_share(adequacies: Sequence[float], share: float) -> float:
    """The adequacy that `round(share * n)` of these n scores reach (the lowest kept one): a threshold
    for later pairs from a sample's scores; 1.0 (above all but perfect pairs) when none would be kept."""
    _check_share(share)
    ranked = sorted(adequacies, reverse=True)
    n = round(share * len(ranked))
    return ranked[n - 1] if n else 1.0


def _check_share(share: float) -> None:
    if not 0 < share <= 1:
        raise DcceError(f"keep_share must be in (0, 1], got {share}")


class DualCrossEntropyFilter:
    """Keeps the pairs whose adequacy (exp(-dcce)) is at least `threshold`, or the best `keep_share` of
    those judged together (ties in input order); exactly one of the two. scorer: what scores pairs with the
    forward and the backward model (`seq2seq.inference.scoring.DualScorer`; needed to score, while
    `decide` takes scores made before). A pair not scored (adequacy 0) is never kept.

    It has what a cleaning pipeline's filter has (`seq2seq.data.filters.base.PairFilter`, by duck typing:
    this module imports no pipeline): `name`, `reasons`, `in_workers` False (it holds models and judges
    in the main process, in batches), `prepare(sample)` and `keep_batch(pairs)` / `keep(src, tgt)`
    giving a reason or None. With `keep_share`, `prepare` turns the share of the sample's pairs into a
    threshold (`threshold_for_share`) that every later pair is held to, so a stream is judged pair by
    pair; without a `prepare`, the share is of each batch.
    """

    name = "dcce"  # what a cleaning report calls the pairs it removes
    reasons = ("low_adequacy", "not_scored")
    in_workers = False

    def __init__(self, scorer: DualScorer | None = None, *, threshold: float | None = None,
                 keep_share: float | None = None) -> None:
        if (threshold is None) == (keep_share is None):
            raise DcceError("a dual cross-entropy filter needs a threshold or a keep_share (one of them)")
        if threshold is not None and not 0 < threshold <= 1:
            raise DcceError(f"threshold is an adequacy exp(-dcce), in (0, 1]; got {threshold}")
        if keep_share is not None:
            _check_share(keep_share)
        self.scorer = scorer
        self.threshold, self.keep_share = threshold, keep_share
        self.learnt: float | None = None  # the threshold `prepare` found for keep_share

    def prepare(self, sample: Sequence[tuple[str, str]]) -> dict[str, float | int]:
        """With keep_share: the adequacy the best share of the sample's pairs reach becomes the threshold of
        every pair judged after (returned, for a report, with the sample's size); with a threshold: {}."""
        if self.keep_share is None or not sample:
            return {}
        scores = self.scores([s for s, _ in sample], [t for _, t in sample])
        self.learnt = threshold_for_share([x.adequacy for x in scores], self.keep_share)
        return {"threshold": self.learnt, "sample_pairs": len(sample)}

    def decide(self, scores: Sequence[DcceScore]) -> list[bool]:
        """Which pairs stay, one bool per score, in order."""
        adequacy = [s.adequacy for s in scores]
        threshold = self.threshold if self.threshold is not None else self.learnt
        if threshold is not None:
            return [a >= threshold and a > 0 for a in adequacy]
        assert self.keep_share is not None  # (`__init__`: one of the two)
        n = round(self.keep_share * len(adequacy))
        best = sorted(range(len(adequacy)), key=lambda i: -adequacy[i])[:n]  # stable: ties in input order
        kept = set(i for i in best if adequacy[i] > 0)
        return [i in kept for i in range(len(adequacy))]

    def scores(self, srcs: Sequence[str], tgts: Sequence[str], first_line: int = 1,
               warn: Warn | None = None) -> list[DcceScore]:
        """Each pair's `DcceScore` from the two models (the scorer)."""
        if self.scorer is None:
            raise DcceError("this dual cross-entropy filter has no models to score with: give it a scorer, "
                            "or call decide")
        return self.scorer(srcs, tgts, first_line, warn)

    def select(self, srcs: Sequence[str], tgts: Sequence[str], first_line: int = 1,
               warn: Warn | None = None) -> list[bool]:
        """Which of these pairs stay (scored with both models, then `decide`)."""
        return self.decide(self.scores(srcs, tgts, first_line, warn))

    def keep_batch(self, pairs: Sequence[tuple[str, str]]) -> list[str | None]:
        """Each pair's reason to go ("not_scored": an empty side; "low_adequacy"), None for one that stays."""
        scores = self.scores([s for s, _ in pairs], [t for _, t in pairs], warn=_quiet) if pairs else []
        return [None if kept else "not_scored" if s.adequacy == 0 else "low_adequacy"
                for s, kept in zip(scores, self.decide(scores))]

    def keep(self, src: str, tgt: str) -> str | None:
        """`keep_batch` of one pair (slow: a batch of one; with keep_share, only after `prepare`)."""
        return self.keep_batch([(src, tgt)])[0]


def _quiet(diagnostic: object) -> None:
    """A pipeline's warnings about an empty side: its report counts the pair as "not_scored" instead."""
