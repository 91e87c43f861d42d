"""`lexicon`: misaligned pairs, by a translation lexicon learnt from the corpus itself (`clean.lexicon`),
as the lexical scores of bicleaner and Zipporah do with dictionaries trained beforehand.

From the first `sample_size` pairs (noise and all: the strongest associations survive it), each pair's
folded words (`normalise.fold`) are counted: in how many pairs a source word s, a target word t, and
the two together occur. t is a translation of s when they co-occur in at least `min_count` pairs with
Dice(s, t) = 2 c(s, t) / (c(s) + c(t)) >= `min_dice`, and t is among the `max_translations` best of s
(chance co-occurrences of a frequent word rank below its translations). Words in more than `max_df`
of the pairs (articles, prepositions: they co-occur with everything) are left out. A pair is then
judged by coverage: the
share of the known words (those with a translation) of both sides that have one on the other side;
a pair of another pair's target shares almost none. Words are what whitespace separates: a language
written without spaces (zh, ja, th) has few known words a line, and its pairs are mostly not judged."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from seq2seq.config.clean_section import CleanConfig
from seq2seq.data.filters.base import Pair, PairFilter
from seq2seq.data.filters.normalise import fold
from seq2seq.text.lexicon import Cooccurrence

Lexicon = dict[str, frozenset[str]]
IDENTICAL_CHARS = 4  # a word this long on both sides as it is: a name or a cognate, translated


def learn_lexicon(sample: Sequence[Pair], min_dice: float, min_count: int, max_df: float,
                  max_translations: int = 3) -> tuple[Lexicon, Lexicon]:
    """(source word -> its translations, target word -> its translations) from the pairs `sample`: each
    word's `max_translations` best by Dice."""
    sides = [(set(fold(s).split()), set(fold(t).split())) for s, t in sample]
    most = max_df * len(sides)
    src_ok = {w for w, c in Counter(w for a, _ in sides for w in a).items() if min_count <= c <= most}
    tgt_ok = {w for w, c in Counter(w for _, b in sides for w in b).items() if min_count <= c <= most}
    # only the words that can be known are counted (a frequent word co-occurs with everything)
    counts = Cooccurrence.count(((a & src_ok, b & tgt_ok) for a, b in sides), min_count)
    forward: dict[str, list[tuple[float, str]]] = {}
    backward: dict[str, list[tuple[float, str]]] = {}
    for (s, t), c in counts.both.items():
        if (dice := counts.dice(s, t, c)) >= min_dice:
            forward.setdefault(s, []).append((dice, t))
            backward.setdefault(t, []).append((dice, s))

    def best(found: dict[str, list[tuple[float, str]]]) -> Lexicon:
        return {w: frozenset(x for _, x in sorted(v, reverse=True)[:max_translations]) for w, v in found.items()}

    return best(forward), best(backward)


def translated(words: set[str], other: set[str], lexicon: Lexicon) -> tuple[int, int]:
    """(how many of `words`' known words have a translation in `other`, how many are known). A word of
    `IDENTICAL_CHARS` or more characters that `other` holds as it is (a name, a cognate) counts as
    known and translated, whether the lexicon knows it or not."""
    found = known = 0
    for w in words:
        if w in lexicon:
            known += 1
            found += not lexicon[w].isdisjoint(other) or w in other
        elif len(w) >= IDENTICAL_CHARS and w in other:
            known += 1
            found += 1
    return found, known


class LexiconFilter(PairFilter):
    """Reason: `misaligned` (the sides' known words mostly without their translations on the other side)."""

    name = "lexicon"
    reasons = ("misaligned",)

    def __init__(self, cfg: CleanConfig) -> None:
        super().__init__(cfg)
        self.forward: Lexicon = {}
        self.backward: Lexicon = {}

    def prepare(self, sample: Sequence[Pair]) -> dict[str, object]:
        rules = self.cfg.lexicon
        self.forward, self.backward = learn_lexicon(sample, rules.min_dice, rules.min_count, rules.max_df,
                                                    rules.max_translations)
        return {"source_words": len(self.forward), "target_words": len(self.backward),
                "from": f"the first {len(sample):,} pairs"}

    def keep(self, src: str, tgt: str) -> str | None:
        rules = self.cfg.lexicon
        a, b = set(fold(src).split()), set(fold(tgt).split())
        found_a, known_a = translated(a, b, self.forward)
        found_b, known_b = translated(b, a, self.backward)
        known = known_a + known_b  # (both directions pooled: short sides vary less so)
        return "misaligned" if known >= rules.min_known and found_a + found_b < rules.min_coverage * known else None
