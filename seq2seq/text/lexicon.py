"""A word lexicon of a language pair: how strongly a source word and a target word go together in the
training pairs, by the Dice coefficient of their co-occurrence,

    dice(s, t) = 2 * pairs holding both / (pairs holding s + pairs holding t)

over words lowercased and stripped of the punctuation around them (`lexicon_word`). It is what the
word alignment of a translation adds to the model's cross-attention (`seq2seq.documents.alignment`):
attention alone puts a tag on the wrong word where the decoder looks at the context it needs rather
than at the word it translates, and the lexicon knows, from the corpus, which of the candidates
translate each other (docs/documents.md, "Where a tag goes", measures both).

    lexicon = Lexicon.build(pairs)          # (source text, target text) pairs
    lexicon.tsv(); Lexicon.load(path)       # a TSV file: source word, target word, dice
    lexicon.matrix(src_words, tgt_words)    # [target words][source words] dice

The counts behind it (`Cooccurrence`: pairs holding each word, and each pair of words) are also what
the cleaning filter's lexicon is learnt from (`seq2seq.data.filters.lexicon`).

Only pairs seen at least `MIN_PAIRS` times, and a source word's `TOP` best targets, are kept: the file
stays small (2 MB, 101,000 word pairs, for Multi30K's 29,000 pairs) and a rare pair's Dice is noise.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

MIN_PAIRS = 2  # pairs of sentences a word pair must share to be kept
TOP = 50  # target words kept per source word, best first (a frequent source word has many partners)
LEXICON_HEADER = "# seq2seq lexicon 1: source word, target word, dice"
_PUNCTUATION = "\"'.,;:!?()[]{}«»„“”‚‘’¿¡…-–—"


def lexicon_word(word: str) -> str:
    """A whitespace word as the lexicon holds it: lowercased, without the punctuation around it."""
    return word.strip(_PUNCTUATION).lower()


@dataclass(frozen=True)
class Cooccurrence:
    """How many pairs of a corpus hold each source word, each target word, and each (source, target) pair
    of words: what a Dice coefficient of word translation is computed from (this lexicon, and the
    cleaning filter's in `seq2seq.data.filters.lexicon`)."""

    src: Counter[str]
    tgt: Counter[str]
    both: dict[tuple[str, str], int]  # only the word pairs held by at least `min_pairs` pairs

    @classmethod
    def count(cls, sides: Iterable[tuple[set[str], set[str]]], min_pairs: int = 1) -> Cooccurrence:
        """The counts of the pairs `sides` (each pair's source words and target words, as sets); word pairs
        that fewer than `min_pairs` of them hold are left out of `both` (most word pairs meet once: their
        Python objects would cost gigabytes for a large corpus)."""
        src_ids: dict[str, int] = {}
        tgt_ids: dict[str, int] = {}
        src_count: Counter[str] = Counter()
        tgt_count: Counter[str] = Counter()
        keys = []
        for src_words, tgt_words in sides:
            src_count.update(src_words)
            tgt_count.update(tgt_words)
            if src_words and tgt_words:  # every (source, target) word pair as one int64: the source in the high 32 bits
                s = np.fromiter((src_ids.setdefault(w, len(src_ids)) for w in src_words), np.int64, len(src_words))
                t = np.fromiter((tgt_ids.setdefault(w, len(tgt_ids)) for w in tgt_words), np.int64, len(tgt_words))
                keys.append((s[:, None] << 32 | t[None, :]).ravel())
        if not keys:
            return cls(src_count, tgt_count, {})
        pair_keys, both = np.unique(np.concatenate(keys), return_counts=True)
        kept = both >= min_pairs
        pair_keys, both = pair_keys[kept], both[kept]
        src_words_of, tgt_words_of = list(src_ids), list(tgt_ids)
        return cls(src_count, tgt_count, {(src_words_of[s], tgt_words_of[t]): n for s, t, n in
                                          zip((pair_keys >> 32).tolist(), (pair_keys & 0xFFFFFFFF).tolist(), both.tolist())})

    def dice(self, s: str, t: str, both: int) -> float:
        """2 * both / (pairs holding s + pairs holding t)."""
        return 2 * both / (self.src[s] + self.tgt[t])


@dataclass(frozen=True)
class Lexicon:
    """Dice scores of (source word, target word) pairs (see the module docstring)."""

    scores: Mapping[tuple[str, str], float]

    @classmethod
    def build(cls, pairs: Iterable[tuple[str, str]], top: int = TOP, min_pairs: int = MIN_PAIRS) -> Lexicon:
        """The lexicon of (source text, target text) pairs, each side split at whitespace."""
        counts = Cooccurrence.count(
            (({w for w in map(lexicon_word, src.split()) if w}, {w for w in map(lexicon_word, tgt.split()) if w})
             for src, tgt in pairs), min_pairs)
        best: dict[str, list[tuple[float, str]]] = {}
        for (s, t), both in counts.both.items():
            best.setdefault(s, []).append((counts.dice(s, t, both), t))
        return cls({(s, t): round(d, 4) for s, found in best.items()
                    for d, t in sorted(found, key=lambda x: -x[0])[:top]})

    def matrix(self, src_words: Sequence[str], tgt_words: Sequence[str]) -> list[list[float]]:
        """[len(tgt_words)][len(src_words)]: the Dice score of each (source word, target word) pair."""
        src = [lexicon_word(w) for w in src_words]
        return [[self.scores.get((s, t), 0.0) for s in src] for t in map(lexicon_word, tgt_words)]

    def tsv(self) -> str:
        """The lexicon as the file `load` reads: a header line, then source word, target word, dice."""
        lines = [LEXICON_HEADER] + [f"{s}\t{t}\t{d}" for (s, t), d in sorted(self.scores.items())]
        return "\n".join(lines) + "\n"

    @classmethod
    def load(cls, path: str | Path) -> Lexicon:
        """The lexicon saved at `path`; ValueError naming the file and line of a malformed one."""
        scores = {}
        with open(path, encoding="utf-8") as f:
            if f.readline().rstrip("\n") != LEXICON_HEADER:
                raise ValueError(f"{path}: not a seq2seq lexicon (its first line is not {LEXICON_HEADER!r})")
            for number, line in enumerate(f, 2):
                fields = line.rstrip("\n").split("\t")
                try:
                    s, t, d = fields
                    scores[s, t] = float(d)
                except ValueError:
                    raise ValueError(f"{path}, line {number}: expected source word, target word and dice "
                                     f"separated by tabs, got {line.strip()[:80]!r}") from None
        return cls(scores)
