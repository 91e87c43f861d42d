"""Corpus-level translation metrics with sacreBLEU: BLEU, chrF and TER, each with its signature.

Scores are sacreBLEU's defaults for comparability with published numbers: BLEU with the 13a
tokenizer, cased, exponential smoothing; chrF2 (character 6-grams, beta 2), cased; TER with the
tercom tokenizer, made case-sensitive like the other two (sacreBLEU's TER lowercases by default).
The signature string (e.g. `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`) records
exactly these choices and belongs next to every reported number.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sacrebleu.metrics import BLEU, CHRF, TER

METRICS = ("bleu", "chrf", "ter")


def _metric(name: str) -> BLEU | CHRF | TER:
    if name == "bleu":
        return BLEU(tokenize="13a", lowercase=False)
    if name == "chrf":
        return CHRF(lowercase=False)
    if name == "ter":
        return TER(case_sensitive=True)
    raise ValueError(f"unknown metric {name!r}; choose from {', '.join(METRICS)}")


def score(
    hyps: Sequence[str], refs: Sequence[Sequence[str]], metrics: Sequence[str] = METRICS
) -> dict[str, dict[str, Any]]:
    """Score hypotheses against one or more reference sets.

    hyps: one string per segment. refs: one list per reference set, each with one string per
    segment (`[refs_a]` for a single reference, `[refs_a, refs_b]` for two).
    Returns {metric: {"score": float, "signature": str, "text": sacreBLEU's one-line summary}}
    for each requested metric, e.g. result["bleu"]["score"] == 37.7.
    """
    hyps = list(hyps)
    refs = [list(r) for r in refs]
    if not refs:
        raise ValueError("no reference set given: refs must hold one list of references per reference set")
    for i, ref_set in enumerate(refs):
        if len(ref_set) != len(hyps):
            raise ValueError(
                f"reference set {i + 1} of {len(refs)} has {len(ref_set)} segments but there are "
                f"{len(hyps)} hypotheses; every reference set needs one reference per hypothesis"
            )
    result: dict[str, dict[str, Any]] = {}
    for name in metrics:
        metric = _metric(name)
        corpus = metric.corpus_score(hyps, refs)
        result[name] = {"score": float(corpus.score), "signature": str(metric.get_signature()), "text": str(corpus)}
    return result


def format_scores(result: dict[str, dict[str, Any]]) -> str:
    """One line per metric: sacreBLEU's summary then its signature, e.g.

    BLEU = 37.70 68.1/44.2/30.9/21.8 (BP = 1.000 ratio = 1.012 hyp_len = 6104 ref_len = 6032)
      signature: nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0
    """
    lines = []
    for entry in result.values():
        lines.append(entry["text"])
        lines.append(f"  signature: {entry['signature']}")
    return "\n".join(lines)
