"""Corpus-level metrics: BLEU, chrF and TER with sacreBLEU (each with its signature), WER and CER.

Scores are sacreBLEU's defaults for comparability with published numbers: BLEU with the 13a
tokenizer, cased, exponential smoothing; chrF2 (character 6-grams, beta 2), cased; TER with the
tercom tokenizer, made case-sensitive like the other two (sacreBLEU's TER lowercases by default).
The signature string (e.g. `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`) records
exactly these choices and belongs next to every reported number.

References come in two layouts. sacreBLEU's `score(hyps, refs)` takes reference *streams*: refs[k]
holds the k-th reference of every segment. Data with a varying number of references per segment
(several captions per image) is a list of references *per row*; `reference_streams` turns it into
streams, padding short rows with None, which sacreBLEU drops per segment (an empty string would
count as a real, empty reference and change BLEU's brevity penalty).

`wer` and `cer` are the word and character error rates of speech recognition: the Levenshtein
distance (substitutions + insertions + deletions) summed over the corpus, divided by the summed
reference length (at least 1), in percent (above 100 when the hypotheses are much longer). Words
are the whitespace-separated tokens; characters are those of the text with whitespace runs
collapsed to one space. Both are case- and punctuation-sensitive, like the scores above, and use the first
reference of a row that has several.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypedDict

from sacrebleu.metrics import BLEU, CHRF, TER

METRICS = ("bleu", "chrf", "ter")


class MetricScore(TypedDict):
    """One metric's result in `score`: the corpus score, sacreBLEU's signature and its one-line summary."""

    score: float
    signature: str
    text: str


def _metric(name: str) -> BLEU | CHRF | TER:
    if name == "bleu":
        return BLEU(tokenize="13a", lowercase=False)
    if name == "chrf":
        return CHRF(lowercase=False)
    if name == "ter":
        return TER(case_sensitive=True)
    raise ValueError(f"unknown metric {name!r}; choose from {', '.join(METRICS)}")


def score(
    hyps: Sequence[str], refs: Sequence[Sequence[str | None]], metrics: Sequence[str] = METRICS
) -> dict[str, MetricScore]:
    """Score hypotheses against one or more reference sets.

    hyps: one string per segment. refs: one list per reference set, each with one string per
    segment (`[refs_a]` for a single reference, `[refs_a, refs_b]` for two); None where a segment
    has fewer references (`reference_streams`).
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
    result: dict[str, MetricScore] = {}
    for name in metrics:
        metric = _metric(name)
        # sacreBLEU skips a None reference of a segment (Metric._extract_corpus_statistics); its annotation says str
        corpus = metric.corpus_score(hyps, refs)  # type: ignore[arg-type]
        result[name] = {"score": float(corpus.score), "signature": str(metric.get_signature()), "text": str(corpus)}
    return result


def format_scores(result: dict[str, MetricScore]) -> str:
    """One line per metric: sacreBLEU's summary then its signature, e.g.

    BLEU = 37.70 68.1/44.2/30.9/21.8 (BP = 1.000 ratio = 1.012 hyp_len = 6104 ref_len = 6032)
      signature: nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0
    """
    lines = []
    for entry in result.values():
        lines.append(entry["text"])
        lines.append(f"  signature: {entry['signature']}")
    return "\n".join(lines)


def reference_streams(rows: Sequence[Sequence[str]]) -> list[list[str | None]]:
    """References per row (each row: one or more strings) -> sacreBLEU reference streams.

    [["a1", "a2"], ["b1"]] -> [["a1", "b1"], ["a2", None]]: as many streams as the longest row has
    references; a shorter row is padded with None, which sacreBLEU leaves out for that segment.
    """
    rows = [[r] if isinstance(r, str) else list(r) for r in rows]
    if any(not r for r in rows):
        raise ValueError("every row needs at least one reference")
    n = max((len(r) for r in rows), default=1)
    return [[r[k] if k < len(r) else None for r in rows] for k in range(n)]


def edit_distance(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """Levenshtein distance between two sequences (of words, characters, ids).

    Myers' bit-parallel algorithm (Hyyro's formulation): column j of the dynamic-programming table
    D[i][j] (i over a, j over b) is held as two bit vectors of +1/-1 vertical differences, and one
    step over b[j] is a few integer operations, for any len(a) (Python integers grow). D[len(a)][j]
    is tracked through the horizontal differences of the last row.
    """
    if not a:
        return len(b)
    m = len(a)
    full, last = (1 << m) - 1, 1 << (m - 1)
    peq: dict[Hashable, int] = {}  # symbol -> bit i set where a[i] is that symbol
    for i, symbol in enumerate(a):
        peq[symbol] = peq.get(symbol, 0) | (1 << i)
    pv, mv, distance = full, 0, m  # D[i][0] = i: every vertical difference is +1
    for symbol in b:
        eq = peq.get(symbol, 0)
        xv = eq | mv
        xh = (((eq & pv) + pv) ^ pv) | eq
        ph = mv | ~(xh | pv)
        mh = pv & xh
        if ph & last:
            distance += 1
        elif mh & last:
            distance -= 1
        ph = (ph << 1) | 1  # D[0][j] = j: the horizontal difference of row 0 is +1
        mh <<= 1
        pv = (mh | ~(xv | ph)) & full
        mv = ph & xv & full
    return distance


def _first(ref: str | Sequence[str]) -> str:
    return ref if isinstance(ref, str) else ref[0]


def _error_rate(pairs: list[tuple[Sequence[Hashable], Sequence[Hashable]]]) -> float:
    errors = sum(edit_distance(ref, hyp) for hyp, ref in pairs)
    return 100.0 * errors / max(sum(len(ref) for _, ref in pairs), 1)


def _check_lengths(hyps: Sequence[str], refs: Sequence[object]) -> None:
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references: one reference (or list) per hypothesis")


def wer(hyps: Sequence[str], refs: Sequence[str | Sequence[str]]) -> float:
    """Word error rate in %: word edit distance summed over the corpus / reference words.

    refs: one per hypothesis, a string or a list of strings (the first is used).
    """
    _check_lengths(hyps, refs)
    return _error_rate([(h.split(), _first(r).split()) for h, r in zip(hyps, refs)])


def cer(hyps: Sequence[str], refs: Sequence[str | Sequence[str]]) -> float:
    """Character error rate in %: character edit distance summed over the corpus / reference
    characters (whitespace runs count as one space). refs as for `wer`."""
    _check_lengths(hyps, refs)
    return _error_rate([(" ".join(h.split()), " ".join(_first(r).split())) for h, r in zip(hyps, refs)])
