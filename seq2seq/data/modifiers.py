"""Training-time text modifiers: a share of the training pairs upper-cased, Title Cased, given typos or
merged with other pairs, drawn anew every epoch (`data.modifiers`; docs/documents.md).

Models are trained on clean, sentence-cased single sentences; people type headings in capitals, make
typos and paste paragraphs. Showing the model a share of such pairs at training time (OpusTrainer's
UpperCase, TitleCase, Typos and Merge modifiers are the model for these) teaches it to translate them.
Each modifier is a pure function of one (src, tgt) text pair and a numpy Generator:

    upper(src, tgt, rng)        both sides upper-cased (the target's ß as ẞ, as inference casing writes it,
                                where the target vocabulary has ẞ; else SS, as str.upper writes it)
    title(src, tgt, rng)        both sides Title Cased word by word
    typos(src, tgt, rng)        the source with 1 or 2 words misspelt by one character-level edit each
    merge((src, tgt), others)   the pair joined with other pairs, " " between the sentences on both sides

Reserved pieces written in the text (`<term>`, `<BLANK>`: anything `<NAME>`) are never changed, and a
source annotated with terms when the data was prepared (it holds `<term>`) is never modified.

`PairModifier` decides which pairs of an epoch get which modifiers and applies them: each modifier's
choice of rows comes from a numpy Generator seeded by (seed, epoch) (a row's draw is the row index's
entry), and what a chosen row becomes (its typos, its merge partners) from one seeded by (seed, epoch,
row index). An epoch's modified pairs are therefore the same in every process and on `--resume`.

    modifier = PairModifier(cfg.data.modifiers, src_texts, tgt_texts, seed=1)
    modifier.pair(epoch=3, index=17)      # None (left as it is), or Modified(src, tgt, applied=("upper",))
    modifier.epoch(3)                     # {index: Modified} of every row epoch 3 changes

`seq2seq.data.sampling.SubwordSampler` calls it as it builds each epoch and encodes the modified pairs
anew; every other row keeps its cached ids.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from seq2seq.config.data_section import MODIFIERS, ModifierConfig
from seq2seq.text.terminology import TERM

SALT = 0x6D6F6469  # "modi": keeps these generators apart from the others seeded by (seed, epoch[, row])
MAX_TYPO_WORDS = 2  # words misspelt in a source given typos (one edit each)
MAX_MERGED = 2  # other pairs joined to a merged one

PIECE = re.compile(r"(<[^\s<>]+>)")  # a reserved piece written in the text: kept as it is
SPACE = re.compile(r"(\s+)")
# A word typos may change: letters only (2 or more), with at most some quotes, brackets and punctuation
# around them; so never a number, a URL, an e-mail address, an @handle, a {variable} or a hyphenated word.
TYPO_WORD = re.compile(r"""^(["'(\[¿¡«„“‘]*)([^\W\d_]{2,})([.,;:!?)\]"'»“”’]*)$""")

# QWERTY keys by row, each row shifted right of the one above by the key's stagger
_ROWS = (("qwertyuiop", 0.0), ("asdfghjkl", 0.25), ("zxcvbnm", 0.75))
_KEYS = {c: (r, i + shift) for r, (row, shift) in enumerate(_ROWS) for i, c in enumerate(row)}
# a key's neighbours: the keys beside it on its row, and those that overlap it on the rows above and below
NEIGHBOURS = {c: "".join(d for d, (r2, x2) in _KEYS.items()
                         if d != c and (abs(x2 - x) <= 1.0 if r2 == r else abs(r2 - r) == 1 and abs(x2 - x) < 1.0))
              for c, (r, x) in _KEYS.items()}
EDITS = ("swap", "drop", "repeat", "neighbour")


def _outside_pieces(text: str, change: Callable[[str], str]) -> str:
    """`text` with `change` applied to what lies between its reserved pieces."""
    return "".join(part if i % 2 else change(part) for i, part in enumerate(PIECE.split(text)))


def upper(src: str, tgt: str, rng: np.random.Generator | None = None, sharp_s: str = "ẞ") -> tuple[str, str]:
    """Both sides upper-cased; the target's ß as `sharp_s`: the capital ẞ (which lower-cases back to ß, as
    `seq2seq.documents.casing` writes an UPPER source's output) or "SS" (`str.upper`'s, for a vocabulary
    without ẞ: German training text hardly ever holds it). Draws nothing from `rng`."""
    return (_outside_pieces(src, str.upper),
            _outside_pieces(tgt, lambda part: part.replace("ß", sharp_s).upper()))


def _title_word(word: str) -> str:
    """The word's first letter a capital (where it is one letter), the rest as written; a word that
    starts with a digit ("3rd") as it is."""
    for j, c in enumerate(word):
        if c.isdigit():
            return word
        if c.isalpha():
            cap = c.upper()
            return word[:j] + (cap if len(cap) == 1 else c) + word[j + 1:]
    return word


def _title_text(text: str) -> str:
    return "".join(part if i % 2 else _title_word(part) for i, part in enumerate(SPACE.split(text)))


def title(src: str, tgt: str, rng: np.random.Generator | None = None) -> tuple[str, str]:
    """Both sides Title Cased, word by word: every word's first letter a capital, the rest as written (an
    acronym stays one). Draws nothing from `rng`."""
    return _outside_pieces(src, _title_text), _outside_pieces(tgt, _title_text)


def _recased(c: str, like: str) -> str:
    """The letter `c` in the case of `like` (as it is where that case is not one letter: ß)."""
    out = c.upper() if like.isupper() else c.lower() if like.islower() else c
    return out if len(out) == 1 else c


def typo(word: str, rng: np.random.Generator) -> str:
    """`word` (letters only, 2 or more) with one edit drawn from EDITS: two adjacent different letters
    swapped (each position keeping its case), a letter dropped (words of 3+ letters), repeated, or replaced
    by a QWERTY neighbour (keeping its case). An edit the word does not allow repeats a letter instead.
    Levenshtein distance 1, or 2 for a swap."""
    kind = EDITS[int(rng.integers(len(EDITS)))]
    if kind == "swap":
        places = [j for j in range(len(word) - 1) if word[j].lower() != word[j + 1].lower()]
        if places:
            j = places[int(rng.integers(len(places)))]
            a, b = word[j], word[j + 1]
            return word[:j] + _recased(b, a) + _recased(a, b) + word[j + 2:]
    elif kind == "drop" and len(word) >= 3:
        j = int(rng.integers(len(word)))
        return word[:j] + word[j + 1:]
    elif kind == "neighbour":
        places = [j for j, c in enumerate(word) if c.lower() in NEIGHBOURS]
        if places:
            j = places[int(rng.integers(len(places)))]
            keys = NEIGHBOURS[word[j].lower()]
            return word[:j] + _recased(keys[int(rng.integers(len(keys)))], word[j]) + word[j + 1:]
    j = int(rng.integers(len(word)))
    return word[:j + 1] + word[j] + word[j + 1:]


def typos(src: str, tgt: str, rng: np.random.Generator) -> tuple[str, str]:
    """The source with 1 to MAX_TYPO_WORDS of its words (of letters only: `TYPO_WORD`) misspelt by one
    `typo` each, its spacing kept; the target as it is. A source without such a word is returned as it is."""
    parts = SPACE.split(src)  # words at the even places, the spaces between them at the odd ones
    places = [k for k in range(0, len(parts), 2) if TYPO_WORD.match(parts[k])]
    if not places:
        return src, tgt
    n = int(rng.integers(1, min(MAX_TYPO_WORDS, len(places)) + 1))
    for k in sorted(int(places[j]) for j in rng.choice(len(places), size=n, replace=False)):
        found = TYPO_WORD.match(parts[k])
        assert found is not None
        parts[k] = found[1] + typo(found[2], rng) + found[3]
    return "".join(parts), tgt


def merge(pair: tuple[str, str], others: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """`pair` followed by `others`, each side's sentences joined with one space (each stripped first)."""
    pairs = [pair, *others]
    return " ".join(s.strip() for s, _ in pairs), " ".join(t.strip() for _, t in pairs)


class Modified(NamedTuple):
    """A training pair as an epoch trains on it: its texts, and the modifiers that changed them (in the
    order they applied: merge, upper or title, typos)."""

    src: str
    tgt: str
    applied: tuple[str, ...]


class PairModifier:
    """Which training pairs each epoch modifies, and how (see the module docstring).

    src_texts / tgt_texts: the training pairs' texts, row by row (the rows the cached ids are of).
    sizes: the rows of each corpus of `data.corpora`, in their order: a pair is merged only with pairs of
    its own corpus (the same language tags); None: one corpus.
    sharp_s: what `upper` writes for a target's ß: "ẞ", or "SS" where the target vocabulary lacks ẞ.
    """

    def __init__(self, cfg: ModifierConfig, src_texts: Sequence[str], tgt_texts: Sequence[str], seed: int = 0,
                 sizes: Sequence[int] | None = None, sharp_s: str = "ẞ") -> None:
        if len(src_texts) != len(tgt_texts):
            raise ValueError(f"{len(src_texts)} sources but {len(tgt_texts)} targets")
        self.cfg, self.src_texts, self.tgt_texts = cfg, src_texts, tgt_texts
        self.seed = seed % 2**63
        self.sharp_s = sharp_s
        n = len(src_texts)
        sizes = [n] if sizes is None else list(sizes)
        if sum(sizes) != n:
            raise ValueError(f"the corpora have {sum(sizes)} rows but {n} texts were given")
        self.ends = np.cumsum(sizes)
        self.starts = self.ends - np.asarray(sizes)
        self.shares = np.array([getattr(cfg, name) for name in MODIFIERS])
        self._cache: tuple[int, np.ndarray] | None = None

    def chosen(self, epoch: int) -> np.ndarray:
        """bool [rows, len(MODIFIERS)]: which modifiers each row is drawn for in `epoch` (a modifier's
        column drawn on its own, so that one share changing leaves the others' rows as they were)."""
        if self._cache is None or self._cache[0] != epoch:
            rng = np.random.default_rng([self.seed, epoch, SALT])
            n = len(self.src_texts)
            drawn = np.zeros((n, len(MODIFIERS)), dtype=bool)
            for j, share in enumerate(self.shares):
                drawn[:, j] = rng.random(n) < share
            self._cache = (epoch, drawn)
        return self._cache[1]

    def row_rng(self, epoch: int, index: int) -> np.random.Generator:
        """The generator of what row `index` becomes in `epoch`: a function of the seed, epoch and index alone."""
        return np.random.default_rng([self.seed, epoch, index, SALT])

    def partners(self, index: int, rng: np.random.Generator) -> list[int]:
        """1 to MAX_MERGED other rows of the corpus of row `index` (distinct, none annotated with terms)."""
        corpus = int(np.searchsorted(self.ends, index, side="right"))
        start, end = int(self.starts[corpus]), int(self.ends[corpus])
        if end - start < 2:
            return []
        k = int(rng.integers(1, MAX_MERGED + 1))
        drawn = rng.integers(start, end - 1, size=k)  # among the corpus's rows but this one
        rows = dict.fromkeys(int(j) + (j >= index) for j in drawn)
        return [j for j in rows if TERM not in self.src_texts[j]]

    def epoch(self, epoch: int) -> dict[int, Modified]:
        """Every row `epoch` modifies, by index, in row order (`pair` of each row drawn for a modifier)."""
        found = {}
        for i in np.flatnonzero(self.chosen(epoch).any(axis=1)).tolist():
            changed = self.pair(epoch, i)
            if changed is not None:
                found[i] = changed
        return found

    def pair(self, epoch: int, index: int) -> Modified | None:
        """Row `index` as `epoch` modifies it; None where no modifier is drawn for it, none changes its
        texts, or its source is annotated with terms."""
        drawn = self.chosen(epoch)[index]
        if not drawn.any():
            return None
        src, tgt = self.src_texts[index], self.tgt_texts[index]
        if TERM in src:  # annotated when prepared: the terms stay the last words of the source
            return None
        rng = self.row_rng(epoch, index)
        use = dict(zip(MODIFIERS, drawn.tolist()))
        applied = []
        if use["merge"]:
            others = self.partners(index, rng)
            if others:
                src, tgt = merge((src, tgt), [(self.src_texts[j], self.tgt_texts[j]) for j in others])
                applied.append("merge")
        if use["upper"] or use["title"]:  # both drawn: upper, which title-casing would not change
            case = "upper" if use["upper"] else "title"
            cased = upper(src, tgt, rng, self.sharp_s) if case == "upper" else title(src, tgt, rng)
            if cased != (src, tgt):
                src, tgt = cased
                applied.append(case)
        if use["typos"]:
            changed = typos(src, tgt, rng)
            if changed != (src, tgt):
                src, tgt = changed
                applied.append("typos")
        return Modified(src, tgt, tuple(applied)) if applied else None
