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
        self.sizes = sorted({len(phrase) for unit in banned for phrase in unit} - {0})  # on the host

    def mask(self, lprobs: Tensor, tokens: Tensor, step: int, raw: Tensor | None) -> None:
        generated = tokens[:, 1:]  # [B, t]
        for n in self.sizes:
            if n - 1 > step:
                continue
            phrases = self.table.phrases[:, :, :n]  # [B, A, n]
            hit = self.table.lengths == n  # [B, A]
            if n > 1:
                suffix = generated[:, step - (n - 1):]  # [B, n - 1]
                hit = hit & (phrases[:, :, :-1] == suffix[:, None, :]).all(dim=-1)
            # each hit bans its phrase's last token (the least of the row's value and NEG_INF), without asking
            # the device which rows hit; a miss takes the least with +inf, which changes nothing
            bans = torch.full(hit.shape, NEG_INF, dtype=lprobs.dtype, device=lprobs.device)
            bans.masked_fill_(~hit, float("inf"))
            lprobs.scatter_reduce_(1, phrases[:, :, -1].clamp(min=0), bans, reduce="amin")

    def follow(self, kept_units: Tensor | None, parents: Tensor | None, new_tokens: Tensor) -> None:
        if kept_units is not None:
            self.table.keep(kept_units)
