"""Soft terms: a bonus on the next piece of each term an output has not met yet (`decoding.term_bias`).

The annotation (`--terms annotate`) tells a model trained with `data.terminology` which words its output
should hold; it places most of them, and where it writes its own word instead ("Oberteil" where the term
says "Bluse") nothing makes it change its mind. `TermBias` adds `bias` (a log-probability bonus, in nats)
to the token that continues each term a row has not met: the term's first piece, or its next piece once
the row has begun it. A met term gets nothing more: a term is pushed until the output holds it, and not
written twice for the bonus. It is a push, not a guarantee (the constrained beam is that): the model
still writes another word where its own is stronger by more than the bonus, and greedy search and
sampling take it as well as the beam. Progress through a term, and met as a whole word, follow the
constrained beam's rules (`seq2seq.inference.constraints.ConstraintTracker`, without its end-of-sentence
rules).

A hypothesis's log-probabilities include the bonuses it took, and its score is its log-probability less
them divided by the length penalty, plus them: a bonus inside the length penalty would be worth more to a
short hypothesis than to a long one, and made the outputs shorter (docs/terminology.md). Rows without
terms get none: their log-probabilities and scores are unchanged, bit for bit.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from seq2seq.inference.constraints import ConstraintTracker
from seq2seq.inference.controls import Control


class TermBias(Control):
    """terms[u]: unit u's terms as token ids (forms[u][i]: the term phrase i is a form of, None: each its
    own); `group` rows per unit; bias: the bonus (> 0). continuation [V]: the pieces that continue a word
    (`ConstraintTracker`)."""

    def __init__(self, terms: Sequence[Sequence[Sequence[int]]], group: int, bias: float, eos_id: int,
                 device: torch.device, continuation: Tensor | None = None,
                 forms: Sequence[Sequence[int] | None] | None = None) -> None:
        self.bias = bias
        self.progress = ConstraintTracker(terms, group, eos_id, device, continuation, forms=forms)
        self.taken = torch.zeros(self.progress.met.size(0), device=device)  # [B]: the bonus each row took
        self.wanted: Tensor | None = None  # [B, C]: what this step's `mask` gave a bonus to

    def mask(self, lprobs: Tensor, tokens: Tensor, step: int, raw: Tensor | None) -> None:
        self.wanted = wanted = self.progress.next_tokens()  # [B, C]: each unmet term's next token, -1 for the others
        bonus = torch.full(wanted.shape, self.bias, dtype=lprobs.dtype, device=lprobs.device)
        lprobs.scatter_add_(1, wanted.clamp(min=0), bonus.masked_fill_(wanted < 0, 0.0))

    def follow(self, kept_units: Tensor | None, parents: Tensor | None, new_tokens: Tensor) -> None:
        rows = parents if parents is not None else torch.arange(new_tokens.numel(), device=new_tokens.device)
        wanted = self.wanted if self.wanted is not None else self.progress.next_tokens()  # (this step's `mask`)
        hits = (wanted.index_select(0, rows) == new_tokens[:, None]).sum(dim=1)
        self.taken = self.taken.index_select(0, rows) + self.bias * hits
        self.wanted = None
        self.progress.follow(kept_units, parents, new_tokens)

    def bonus(self, rows: Tensor) -> tuple[Tensor, Tensor]:
        unmet = (~self.progress.met.index_select(0, rows)).sum(dim=1)  # a token may continue each of them
        return self.taken.index_select(0, rows), self.bias * unmet
