"""Training sources annotated with target terms (`data.terminology`; docs/terminology.md).

    sampler = TermSampler(cfg.terminology, word_counts(targets))
    for chunk in sampler.annotated(chunks):    # (sources, targets) chunks, a share of sources annotated
        ...

A pair is annotated with words of its own target, as the user of a termbase would give them: 1 to `max_terms`
of them, drawn among the words that are not one of the target side's `skip_frequent` most frequent words
(function words are not terms), at random or the rarest first (`pick`), appended to the source by
`seq2seq.text.terminology.annotate` (as their base forms with `base_forms`). Which pairs and which words
follow a generator seeded by (`seed`, chunk), so the same corpus is annotated the same way every time (the
cache key holds the settings); with `resample`, each epoch draws anew, seeded by (seed, epoch), as it is
batched (`seq2seq.data.sampling.SubwordSampler`). With `substitute`, a share of the terms is replaced, in the
annotation and in the target, by another word of the corpus: a term the source cannot predict, which the model
can only take from the annotation (with `substitute_with: compounds`, two corpus words joined, a word no
training target holds, as a fifth of a termbase's terms are). Only training pairs are annotated: validation
measures the translation of plain sources, which is what the best checkpoint is chosen for.

With `loss_weight`, `term_token_weights` gives each batch's target tokens their loss weights: the pieces of a
term, where the target holds it as the annotation has it, weigh `loss_weight`, every other token 1.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

from seq2seq.config.terminology import TerminologyConfig
from seq2seq.text.terminology import annotate, base_forms, words
from seq2seq.text.tokenizer import EOS_ID

Chunk = tuple[list[str], list[str]]
SHORT_NOUN = 8  # letters, at most, of a compound substitute's second half


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
        candidates = sorted(w for w in counts if w.lower() not in self.frequent and not w.isdigit())
        self.pool = {upper: [w for w in candidates if w[:1].isupper() == upper] for upper in (False, True)}
        # the second halves of compound substitutes: the short nouns ("Hütte", "Shirt"), else any candidate
        self.heads = [w for w in self.pool[True] if len(w) <= SHORT_NOUN] or candidates

    def candidates(self, target: str) -> list[str]:
        """The words of `target` that may be terms: each once, in order, none of the most frequent."""
        return [w for w in dict.fromkeys(words(target)) if w.lower() not in self.frequent and not w.isdigit()]

    def terms(self, target: str, rng: np.random.Generator) -> list[str]:
        """This pair's terms ([] for a pair left plain), drawn with `rng`, as the target has them."""
        if rng.random() >= self.cfg.share:
            return []
        found = self.candidates(target)
        if not found:
            return []
        k = min(len(found), int(rng.integers(1, self.cfg.max_terms + 1)))
        if self.cfg.pick == "rare":  # the rarest first (ties: in the target's order)
            return sorted(found, key=lambda w: self.counts[w.lower()])[:k]
        return [found[i] for i in rng.permutation(len(found))[:k]]

    def substituted(self, target: str, terms: list[str], rng: np.random.Generator) -> tuple[str, list[str]]:
        """`target` and `terms` with a `substitute` share of the terms replaced, in both, by other
        candidate words of the corpus, capitalised alike (every occurrence of the word in `target`)."""
        out = []
        for term in terms:
            pool = self.pool[term[:1].isupper()]
            if rng.random() < self.cfg.substitute and len(pool) > 1:
                i = int(rng.integers(len(pool)))
                other = pool[i] if pool[i] != term else pool[(i + 1) % len(pool)]
                if self.cfg.substitute_with == "compounds":
                    other += self.heads[int(rng.integers(len(self.heads)))].lower()
                if other not in words(target):
                    target = re.sub(rf"(?<![\w'’-]){re.escape(term)}(?![\w'’-])", other, target)
                    term = other
            out.append(term)
        return target, out

    def pair(self, source: str, target: str, rng: np.random.Generator) -> tuple[str, str]:
        """The pair as trained on: its source annotated with its terms (none for most pairs), its target
        with the substituted terms in place."""
        terms = self.terms(target, rng)
        if terms and self.cfg.substitute > 0:
            target, terms = self.substituted(target, terms, rng)
        if self.bases is not None:
            terms = [self.bases.get(w, w) for w in terms]
        return annotate(source, terms), target

    def annotated(self, chunks: Iterable[Chunk], seed: int = 0) -> Iterator[Chunk]:
        """`chunks` with the chosen sources annotated (and, with `substitute`, their targets changed)."""
        for i, (sources, targets) in enumerate(chunks):
            rng = np.random.default_rng([seed, i])
            pairs = [self.pair(s, t, rng) for s, t in zip(sources, targets)]
            yield [s for s, _ in pairs], [t for _, t in pairs]


def term_token_weights(src_ids: Sequence[Sequence[int]], tgt_out: torch.Tensor, positions: torch.Tensor,
                       term_id: int, weight: float, to_target: Callable[[int], int | None] | None = None
                       ) -> torch.Tensor:
    """The loss weights [K] of a batch's scored target tokens (`positions` [K], flat indices in tgt_out.view(-1),
    tgt_out [B, T]): `weight` where the token is part of one of its row's terms, else 1. A row's terms are
    the piece runs its source holds after each reserved piece <term> (`term_id`); each place where the
    target holds such a run, piece for piece, weighs `weight`. src_ids: the B rows' source ids (a source
    without <term> weighs all its target's tokens 1); to_target: a source id -> the target vocabulary's id
    of the same piece (None where it has none), for separate vocabularies (None: one joint vocabulary)."""
    marked = torch.zeros(tgt_out.shape, dtype=torch.bool)
    for row, ids in enumerate(src_ids):
        ids = [i for i in ids if i != EOS_ID]
        if term_id not in ids:
            continue
        target = tgt_out[row].tolist()
        terms: list[list[int | None]] = [[]]  # the runs after each <term>
        for i in ids[ids.index(term_id) + 1:]:
            if i == term_id:
                terms.append([])
            else:
                terms[-1].append(to_target(i) if to_target is not None else i)
        for term in terms:
            n = len(term)
            if n == 0 or None in term:  # an empty run, or a piece the target vocabulary lacks
                continue
            for start in range(len(target) - n + 1):
                if target[start : start + n] == term:
                    marked[row, start : start + n] = True
    return torch.where(marked.view(-1).index_select(0, positions), weight, 1.0).to(torch.float32)
