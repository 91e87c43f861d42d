"""What the search loop holds and returns: `Units` (per unit) and `Rows` (per decoder row), the state
between steps, each narrowed by one `select`; `Hypothesis`, one output sequence. The vocabulary (units,
rows, lengths and scores) is that of `seq2seq.inference.search`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class Hypothesis:
    """One output sequence.

    tokens: generated ids without BOS and EOS. token_logprobs: the log-probability of each token
    and of the final EOS (len(tokens) + 1 values). logprob: their sum. score: logprob with the
    length penalty (see `seq2seq.inference.search`), or with decoding.ctc_weight w the mix
    ((1 - w) * logprob + w * ctc_logprob) with it (seq2seq.inference.ctc). attention:
    [len(tokens) + 1, S_real] cross-attention weights over the real source positions, when
    `attention_layer` is set.
    """

    tokens: list[int]
    score: float
    logprob: float
    token_logprobs: list[float]
    attention: Tensor | None = None
    ctc_logprob: float | None = None  # log P_CTC(tokens | source), with decoding.ctc_weight > 0
    constraints_met: bool = True  # False: ended at the length limit before meeting its constraints


@dataclass
class Units:
    """Per-unit state of the active units [U]: what a unit is and how far it may go.

    source: the source index of each unit. max_host / max: its length limit (on the host, and as a
    tensor for the per-step masks). n_finished: hypotheses ended so far (early stopping).
    best_finished [U, g] and max_penalty [U]: only for exact beam search (early_stopping=False),
    the best finished scores and the length penalty at max_len.
    """

    source: list[int]
    max_host: list[int]
    max: Tensor
    n_finished: Tensor
    best_finished: Tensor | None = None
    max_penalty: Tensor | None = None

    def select(self, index: Tensor, host: list[int]) -> Units:
        """The units at positions `index` (the same positions as `host`, on the host)."""
        return Units(
            source=[self.source[i] for i in host],
            max_host=[self.max_host[i] for i in host],
            max=self.max.index_select(0, index),
            n_finished=self.n_finished.index_select(0, index),
            best_finished=None if self.best_finished is None else self.best_finished.index_select(0, index),
            max_penalty=None if self.max_penalty is None else self.max_penalty.index_select(0, index),
        )


@dataclass
class Rows:
    """Per-row state of the B live decoder rows: tokens [B, 1 + t] (BOS first), the log-probability of
    each generated token logprobs [B, t], and the cross-attention of each step attention [B, t, S]
    (None unless `attention_layer` is set)."""

    tokens: Tensor
    logprobs: Tensor
    attention: Tensor | None = None

    def select(self, index: Tensor) -> Rows:
        """The rows `index` [B'] (a row may be taken twice: beam search moves rows to their parents)."""
        return Rows(
            self.tokens.index_select(0, index),
            self.logprobs.index_select(0, index),
            None if self.attention is None else self.attention.index_select(0, index),
        )

    def append(self, tokens: Tensor, logprob: Tensor, attention: Tensor | None) -> Rows:
        """Each row extended by one token [B] with its log-probability [B] and cross-attention [B, S] (given
        whenever the rows keep attention)."""
        kept = None
        if self.attention is not None:
            assert attention is not None  # rows that keep attention (attention_layer set) get each step's
            kept = torch.cat([self.attention, attention[:, None]], dim=1)
        return Rows(
            torch.cat([self.tokens, tokens.view(-1, 1)], dim=1),
            torch.cat([self.logprobs, logprob.view(-1, 1)], dim=1),
            kept,
        )
