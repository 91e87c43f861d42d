"""Subword regularization: a new segmentation of each training pair every time it is batched.

A sentence has many segmentations into the vocabulary's pieces. Training on one of them, sampled
anew each time the pair is seen, is a regularizer and a data augmentation at no cost in data
(Kudo, 2018, "Subword Regularization"; for BPE models, Provilkov et al., 2020, "BPE-Dropout"):
the model sees words split in several ways and leans less on one segmentation's quirks. Only
training batches are sampled; validation, `translate` and scoring keep the one best segmentation.

    sampler = SubwordSampler(tokenizers, src_texts, tgt_texts, alpha=0.3, nbest=-1, max_len=128)
    src_ids, tgt_ids = sampler.sample(indices, seed)   # src_ids end in EOS, as `cleaning.tokenize`

SentencePiece draws from one global random generator. `sample` seeds it with `seed` and encodes
the batch's texts one by one in this thread, so the same (indices, seed) always gives the same
ids: the trainer passes a seed drawn from Python's `random`, whose state the resume state saves,
so a resumed run samples exactly what the uninterrupted run would have.
"""

from __future__ import annotations

from typing import Sequence

import sentencepiece as spm

from seq2seq.tokenizer import EOS_ID, TokenizerPair


class SubwordSampler:
    """Sampled segmentations of the training texts (see the module docstring).

    A sampled side longer than `max_len` pieces (the cleaning limit) is replaced by its best
    segmentation, which cleaning has already checked.
    """

    def __init__(self, tokenizers: TokenizerPair, src_texts: Sequence[str], tgt_texts: Sequence[str],
                 best_src_ids: Sequence[list[int]], best_tgt_ids: Sequence[list[int]],
                 alpha: float, nbest: int = -1, max_len: int = 256) -> None:
        self.src_tok, self.tgt_tok = tokenizers.src, tokenizers.tgt
        self.src_texts, self.tgt_texts = src_texts, tgt_texts
        self.best_src_ids, self.best_tgt_ids = best_src_ids, best_tgt_ids
        self.alpha, self.nbest, self.max_len = alpha, nbest, max_len

    def sample(self, indices: Sequence[int], seed: int) -> tuple[list[list[int]], list[list[int]]]:
        """(src_ids ending in EOS, tgt_ids) of the rows `indices`, one sampled segmentation each."""
        spm.set_random_generator_seed(seed)
        src_ids, tgt_ids = [], []
        for i in indices:
            src = self.src_tok.sample(self.src_texts[i], self.alpha, self.nbest)
            tgt = self.tgt_tok.sample(self.tgt_texts[i], self.alpha, self.nbest)
            src_ids.append(src + [EOS_ID] if len(src) <= self.max_len else self.best_src_ids[i])
            tgt_ids.append(tgt if len(tgt) <= self.max_len else self.best_tgt_ids[i])
        return src_ids, tgt_ids
