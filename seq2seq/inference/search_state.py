"""What the search loop holds and returns: `Units` (per unit) and `Rows` (per decoder row), the state
between steps, each narrowed by one `select`; `EndedHypotheses`, those a step ended, until the host reads
them; `Hypothesis`, one output sequence. The vocabulary (units,
rows, lengths and scores) is that of `seq2seq.inference.search`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from seq2seq.config.search import SearchConfig


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
class EndedHypotheses:
    """Hypotheses that ended at `step`, waiting for the host read that brings their values:
    values [n, 2 * step + 4] = tokens (step), token log-probabilities (step + 1), the total, met (0/1), the
    bonus taken (`Control.bonus`; 0 without); sources: each one's source; attention [n, step + 1, S] on the
    host (or None)."""

    values: Tensor
    sources: list[int]
    step: int
    attention: Tensor | None

    def complete(self, flat: list[float], cfg: SearchConfig, finished: list[list[Hypothesis]],
                 real_positions: Callable[[int], Tensor]) -> None:
        """Append the hypotheses to `finished` (one list per source), from their values as read (`flat`);
        real_positions(source): the source's real positions, which its attention keeps."""
        t, width = self.step, 2 * self.step + 4
        for i, source in enumerate(self.sources):
            row = flat[i * width: (i + 1) * width]
            total, met, taken = row[2 * t + 1: 2 * t + 4]
            finished[source].append(Hypothesis(
                tokens=[int(x) for x in row[:t]],
                score=cfg.score(total, t + 1, taken or None),
                logprob=total,
                token_logprobs=row[t: 2 * t + 1],
                attention=None if self.attention is None else self.attention[i][:, real_positions(source)],
                constraints_met=met != 0,
            ))


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
