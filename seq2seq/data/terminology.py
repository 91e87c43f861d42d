"""Training sources annotated with target terms (`data.terminology`; docs/terminology.md).

    sampler = TermSampler(cfg.terminology, word_counts(targets))
    for chunk in sampler.annotated(chunks):    # (sources, targets) chunks, a share of sources annotated
        ...

A pair is annotated with words of its own target, as the user of a termbase would give them: 1 to
`max_terms` of them, drawn among the words that are not one of the target side's `skip_frequent`
most frequent words (function words are not terms), at random or the rarest first (`pick`), appended to the source by
`seq2seq.text.terminology.annotate` (as their base forms with `base_forms`). Which pairs and which
words follow a generator seeded by (`seed`, chunk), so the same corpus is annotated the same way every
time (the cache key holds the settings). Only training pairs are annotated: validation measures the
translation of plain sources, which is what the best checkpoint is chosen for.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

import numpy as np

from seq2seq.config.terminology import TerminologyConfig
from seq2seq.text.terminology import annotate, base_forms, words

Chunk = tuple[list[str], list[str]]


class TermSampler:
    """Which training pairs are annotated, and with which words (see the module docstring).

    counts: occurrences of each target word in the training corpus (`seq2seq.text.terminology.word_counts`).
    """

    def __init__(self, cfg: TerminologyConfig, counts: Counter[str]) -> None:
        self.cfg = cfg
        lowered: Counter[str] = Counter()
        for word, n in counts.items():
            lowered[word.lower()] += n
        self.frequent = {w for w, _ in lowered.most_common(cfg.skip_frequent)}
        self.counts = lowered
        self.bases = base_forms(counts) if cfg.base_forms else None

    def candidates(self, target: str) -> list[str]:
        """The words of `target` that may be terms: each once, in order, none of the most frequent."""
        return [w for w in dict.fromkeys(words(target)) if w.lower() not in self.frequent and not w.isdigit()]

    def terms(self, target: str, rng: np.random.Generator) -> list[str]:
        """This pair's terms ([] for a pair left plain), drawn with `rng`."""
        if rng.random() >= self.cfg.share:
            return []
        found = self.candidates(target)
        if not found:
            return []
        k = min(len(found), int(rng.integers(1, self.cfg.max_terms + 1)))
        if self.cfg.pick == "rare":  # the rarest first (ties: in the target's order)
            chosen = sorted(found, key=lambda w: self.counts[w.lower()])[:k]
        else:
            chosen = [found[i] for i in rng.permutation(len(found))[:k]]
        return [self.bases.get(w, w) for w in chosen] if self.bases is not None else chosen

    def annotated(self, chunks: Iterable[Chunk], seed: int = 0) -> Iterator[Chunk]:
        """`chunks` with the chosen sources annotated (targets unchanged)."""
        for i, (sources, targets) in enumerate(chunks):
            rng = np.random.default_rng([seed, i])
            yield [annotate(s, self.terms(t, rng)) for s, t in zip(sources, targets)], targets
