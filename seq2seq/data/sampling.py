"""Subword regularization: a new segmentation of every training pair in every epoch.

A sentence has many segmentations into the vocabulary's pieces. Training on one of them, sampled
anew each time the pair is seen, is a regularizer and a data augmentation at no cost in data
(Kudo, 2018, "Subword Regularization"; for BPE models, Provilkov et al., 2020, "BPE-Dropout"):
the model sees words split in several ways and leans less on one segmentation's quirks. Only
training batches are sampled; validation, `translate` and scoring keep the one best segmentation.

    segmenter = SubwordSampler(tokenizers, src_texts, tgt_texts, best_src_ids, best_tgt_ids, alpha=0.3)
    sampler = ResegmentedBatches(segmenter, max_tokens=3200, seed=1)   # a TokenBatchSampler
    for indices in sampler:
        src_ids, tgt_ids = sampler.rows(indices)      # this epoch's segmentation of those rows

Each epoch is segmented as a whole before it is batched, so the batches are bucketed by the
sampled lengths and carry no more padding than without sampling (batching by the best
segmentation's lengths instead padded the Multi30K batches by ~35% more at alpha 0.3).

The same pass draws a model's training terms anew each epoch where `data.terminology.resample` asks
for it (`terms`, a `seq2seq.data.terminology.TermSampler`): a new share of the pairs is annotated, with
new terms and substitutes, each such pair at its best segmentation; with `alpha` None nothing is sampled
but the terms.

Reproducibility: the samples come from SentencePiece's own generator, which is seeded with
(seed, epoch) before each epoch. Within one process that repeats an epoch's segmentation exactly,
but SentencePiece mixes a per-process value into its generator, so another process (a new run,
or a resumed one) draws other samples from the same distribution: a run with subword
regularization is not bit-reproducible, and `--resume` continues it with a new segmentation of
the current epoch (its remaining batches may repeat or skip a few rows). Everything else about
the resume (weights, optimizer, schedule, position) is exact. The terms come from numpy's generator
seeded alike, so they repeat exactly in every process.

Training-time modifiers (`data.modifiers`, `seq2seq.data.modifiers`) are applied in the same pass: a share
of the pairs upper-cased, Title Cased, given typos or merged, drawn from numpy generators seeded by
(seed, epoch) and the row, and encoded anew (at the best segmentation, or sampled with `alpha`). Without
`alpha` nothing else is sampled, so such a run repeats exactly in every process and on `--resume`.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Sequence

import numpy as np
import sentencepiece as spm

from seq2seq.config.data_section import MODIFIERS
from seq2seq.data.batching import TokenBatchSampler
from seq2seq.data.modifiers import Modified, PairModifier
from seq2seq.data.terminology import TermSampler
from seq2seq.text.terminology import TERM
from seq2seq.text.tokenizer import EOS_ID, UNK_ID, TokenizerPair

log = logging.getLogger(__name__)


class SubwordSampler:
    """Sampled segmentations of the training texts, one per epoch (see the module docstring).

    best_src_ids (ending in EOS) / best_tgt_ids: the best segmentation, which cleaning checked; a
    sampled side longer than `max_len` pieces (the cleaning limit) falls back to it, and a pair whose
    source is annotated with terms (`data.terminology`, after the reserved piece <term>) keeps it: the
    model learns to copy a term piece for piece, as the term and the output are segmented at inference
    (sampled apart, a term's two sides seldom had the same pieces, and the model used far fewer of the
    terms: docs/terminology.md).
    prefixes: per row, the tag ids its source starts with (`seq2seq.text.languages`; as in its
    best_src_ids), kept before every sampled segmentation and not counted towards max_len; None: no tags.
    tgt_prefixes: likewise the tag ids its target starts with (a language tag on the decoder).
    alpha: None samples no segmentation (every pair at its best one): the sampler then only annotates.
    terms: with `data.terminology.resample`, the `TermSampler` that annotates a new draw of pairs with
        terms in every epoch (seeded by (seed, epoch)); the texts are then the plain pairs, and an annotated
        pair is encoded at its best segmentation (the plain pair where that exceeds `max_len`).
    modifier: with `data.modifiers`, the `PairModifier` that changes a share of the pairs in every epoch
        (seeded by (seed, epoch) and the row): a modified pair is encoded anew, at its best segmentation or,
        with `alpha`, a sampled one (the pair as it was where a side then exceeds `max_len`, or holds an <unk>
        piece its cached ids lack: a character the vocabulary never saw, such as a capital); a pair annotated
        with terms this epoch is not modified. Every other row is as without it (its cached ids, bit for
        bit, where `alpha` is None).
    """

    def __init__(self, tokenizers: TokenizerPair, src_texts: Sequence[str], tgt_texts: Sequence[str],
                 best_src_ids: Sequence[list[int]], best_tgt_ids: Sequence[list[int]],
                 alpha: float | None, nbest: int = -1, max_len: int = 256, seed: int = 0,
                 prefixes: Sequence[Sequence[int]] | None = None,
                 tgt_prefixes: Sequence[Sequence[int]] | None = None, terms: TermSampler | None = None,
                 modifier: PairModifier | None = None) -> None:
        self.tokenizers = tokenizers
        self.src_texts, self.tgt_texts = src_texts, tgt_texts
        self.best_src_ids, self.best_tgt_ids = best_src_ids, best_tgt_ids
        self.alpha, self.nbest, self.max_len, self.seed = alpha, nbest, max_len, seed
        self.prefixes, self.tgt_prefixes = prefixes, tgt_prefixes
        self.terms = terms
        self.modifier = modifier
        self._cache: tuple[int, list[list[int]], list[list[int]]] | None = None

    def epoch(self, epoch: int) -> tuple[list[list[int]], list[list[int]]]:
        """(src_ids ending in EOS, tgt_ids) of every row in `epoch`'s segmentation."""
        if self._cache is None or self._cache[0] != epoch:
            spm.set_random_generator_seed(int(np.random.SeedSequence([self.seed, epoch]).generate_state(1)[0]))
            src_tok, tgt_tok = self.tokenizers.src, self.tokenizers.tgt
            rng = np.random.default_rng([self.seed, epoch])
            src_ids, tgt_ids = [], []
            applied: Counter[str] = Counter()
            modified = too_long = unspelt = 0
            changes = self._modified(epoch)
            for i, (src_text, tgt_text) in enumerate(zip(self.src_texts, self.tgt_texts)):
                prefix = list(self.prefixes[i]) if self.prefixes is not None else []
                tgt_prefix = list(self.tgt_prefixes[i]) if self.tgt_prefixes is not None else []
                if self.terms is not None:  # this epoch's terms, at the pair's best segmentation
                    annotated, target = self.terms.pair(src_text, tgt_text, rng)
                    if annotated != src_text:
                        src, tgt = src_tok.encode([annotated])[0], tgt_tok.encode([target])[0]
                        if len(src) <= self.max_len and len(tgt) <= self.max_len:
                            src_ids.append(prefix + src + [EOS_ID])
                            tgt_ids.append(tgt_prefix + tgt)
                            continue
                if i in changes:  # this epoch's modifiers, the pair encoded anew
                    changed, src, tgt = changes[i]
                    if self.alpha is not None:  # (in row order, as SentencePiece's generator draws)
                        src = src_tok.sample(changed.src, self.alpha, self.nbest)
                        tgt = tgt_tok.sample(changed.tgt, self.alpha, self.nbest)
                    if (UNK_ID in src and UNK_ID not in self.best_src_ids[i]) or \
                            (UNK_ID in tgt and UNK_ID not in self.best_tgt_ids[i]):
                        unspelt += 1  # a character the vocabulary lacks (a capital it never saw)
                    elif len(src) <= self.max_len and len(tgt) <= self.max_len:
                        src_ids.append(prefix + src + [EOS_ID])
                        tgt_ids.append(tgt_prefix + tgt)
                        modified += 1
                        applied.update(changed.applied)
                        continue
                    else:
                        too_long += 1
                if TERM in src_text or self.alpha is None:  # annotated when prepared (copied piece for piece)
                    src_ids.append(self.best_src_ids[i])
                    tgt_ids.append(self.best_tgt_ids[i])
                    continue
                src = src_tok.sample(src_text, self.alpha, self.nbest)
                tgt = tgt_tok.sample(tgt_text, self.alpha, self.nbest)
                src_ids.append(prefix + src + [EOS_ID] if len(src) <= self.max_len else self.best_src_ids[i])
                tgt_ids.append(tgt_prefix + tgt if len(tgt) <= self.max_len else self.best_tgt_ids[i])
            if self.modifier is not None:
                kept = [f"{too_long:,} then over data.max_len"] if too_long else []
                kept += [f"{unspelt:,} then with a character the vocabulary lacks"] if unspelt else []
                log.info("epoch %d: data.modifiers changed %s of %s training pairs (%s)%s", epoch, f"{modified:,}",
                         f"{len(src_ids):,}", ", ".join(f"{name} {applied[name]:,}" for name in MODIFIERS),
                         f"; kept as they were: {', '.join(kept)}" if kept else "")
            self._cache = (epoch, src_ids, tgt_ids)
        return self._cache[1], self._cache[2]

    def _modified(self, epoch: int) -> dict[int, tuple[Modified, list[int], list[int]]]:
        """The rows `epoch`'s modifiers change: the pair, and its pieces at the best segmentation (encoded
        together, ~20x faster than one by one; [] where `alpha` samples them in the loop instead)."""
        if self.modifier is None:
            return {}
        found = self.modifier.epoch(epoch)
        if self.alpha is not None:
            return {i: (changed, [], []) for i, changed in found.items()}
        src = self.tokenizers.src.encode([changed.src for changed in found.values()])
        tgt = self.tokenizers.tgt.encode([changed.tgt for changed in found.values()])
        return {i: (changed, s, t) for (i, changed), s, t in zip(found.items(), src, tgt)}


class ResegmentedBatches(TokenBatchSampler):
    """A `TokenBatchSampler` whose rows are segmented anew each epoch by a `SubwordSampler`:
    batches are bucketed by the epoch's sampled lengths, and `rows` gives their ids."""

    def __init__(self, segmenter: SubwordSampler, max_tokens: int, shuffle: bool = True, seed: int = 0,
                 multiple: int = 1) -> None:
        super().__init__([len(s) for s in segmenter.best_src_ids], [len(t) + 1 for t in segmenter.best_tgt_ids],
                         max_tokens=max_tokens, shuffle=shuffle, seed=seed, multiple=multiple)
        self.segmenter = segmenter

    def lengths(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        src_ids, tgt_ids = self.segmenter.epoch(epoch)
        return np.array([len(s) for s in src_ids]), np.array([len(t) + 1 for t in tgt_ids])

    def rows(self, indices: Sequence[int]) -> tuple[list[list[int]], list[list[int]]]:
        """(src_ids, tgt_ids) of rows `indices` in the current epoch's segmentation."""
        src_ids, tgt_ids = self.segmenter.epoch(self.epoch)
        return [src_ids[i] for i in indices], [tgt_ids[i] for i in indices]
