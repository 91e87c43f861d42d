"""Negative constraints: phrases (token sequences) that must never appear in an output.

At every step, a row whose last n - 1 tokens are the first n - 1 tokens of a banned phrase of n
tokens may not produce the phrase's last token (a one-token phrase is never produced). A phrase is
banned as the target tokenizer writes it inside a sentence; the same word segmented differently by
the model is another token sequence (see docs/decoding-controls.md).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from seq2seq.inference.controls import Control, RowPhrases
from seq2seq.inference.strategies import NEG_INF


class BannedPhrases(Control):
    """banned[u]: unit u's banned phrases; `group` rows per unit."""

    def __init__(self, banned: Sequence[Sequence[Sequence[int]]], group: int, device: torch.device) -> None:
        self.table = RowPhrases(banned, group, device)  # phrases [B, A, L], lengths [B, A]

    def mask(self, lprobs: Tensor, tokens: Tensor, step: int, raw: Tensor | None) -> None:
        generated = tokens[:, 1:]  # [B, t]
        for n in self.table.lengths.unique().tolist():
            if n == 0 or n - 1 > step:
                continue
            phrases = self.table.phrases[:, :, :n]  # [B, A, n]
            of_length = self.table.lengths == n  # [B, A]
            if n > 1:
                suffix = generated[:, step - (n - 1):]  # [B, n - 1]
                of_length = of_length & (phrases[:, :, :-1] == suffix[:, None, :]).all(dim=-1)
            rows, which = of_length.nonzero(as_tuple=True)
            lprobs[rows, phrases[rows, which, -1]] = NEG_INF

    def follow(self, kept_units: Tensor | None, parents: Tensor | None, new_tokens: Tensor) -> None:
        if kept_units is not None:
            self.table.keep(kept_units)
