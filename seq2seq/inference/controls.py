"""Decoding controls: what a search must or must not produce for one source, as target token ids.

A `SourceControls` holds one source's controls (built from text by `seq2seq.inference.steering`):

* `prefix`: the output starts with these tokens (`seq2seq.inference.lexical_controls.TargetPrefix`);
* `constraints`: token sequences that must each appear, in any order, each as consecutive tokens
  (lexically constrained beam search with dynamic beam allocation, `seq2seq.inference.constraints`);
* `avoid`: token sequences that must not appear (`seq2seq.inference.lexical_controls.BannedPhrases`);
* `preferred`: annotated terms the search pushes toward without forcing them (`decoding.term_bias`,
  `seq2seq.inference.lexical_controls.TermBias`).

In the search loop (`seq2seq.inference.search`) each kind of control is a `Control` over the live
units and rows: it masks the next-token log-probabilities of every step (`mask`) and follows the
rows as the loop keeps, reorders and extends them (`follow`). The search (`seq2seq.inference.lexical_controls.build_controls`) makes the controls a batch
needs: none at all when no source of the batch has any, so an uncontrolled search runs no control
code (no mask, no follow) and its outputs cannot depend on them.

Shapes: U active units, g rows per unit, B = U * g decoder rows, V vocabulary, t tokens so far.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
from torch import Tensor

from seq2seq.config.diagnostics import Seq2SeqError
from seq2seq.text.lines import InputError


@dataclass
class SourceControls:
    """One source's controls as target token ids (no BOS/EOS); empty lists: no control."""

    prefix: list[int] = field(default_factory=list)
    constraints: list[list[int]] = field(default_factory=list)
    avoid: list[list[int]] = field(default_factory=list)
    sentence_ends: int | None = None  # how many sentences the source ends (the constraints' sentence-end rule)
    forms: list[int] | None = None  # constraints[i] is a form of constraint forms[i] (None: each its own)
    preferred: list[list[int]] = field(default_factory=list)  # terms given a bonus, not forced (term_bias)
    preferred_forms: list[int] | None = None  # preferred[i] is a form of term preferred_forms[i]

    def __bool__(self) -> bool:
        return bool(self.prefix or self.constraints or self.avoid or self.preferred)


class SteeringError(InputError):
    """A prefix, constraint, banned phrase or glossary that cannot be used; the message names the input."""


class ControlError(Seq2SeqError, ValueError):
    """Controls a search cannot honour (e.g. a prefix longer than the sentence's length limit).
    `index`: the source, within the searched batch, they belong to; `field` and `code` as a
    `Diagnostic`'s, which the caller keeps when it names the input."""

    def __init__(self, index: int, message: str, *, field: str | None = None, code: str | None = None) -> None:
        super().__init__(message, field=field, code=code)
        self.index = index


def prefix_too_long(tokens: int, limit: int) -> str:
    """The message for a target prefix of `tokens` tokens over its sentence's length limit (the torch
    search and the CTranslate2 engine alike)."""
    return (f"the target prefix has {tokens} tokens, more than this sentence's length limit of {limit} "
            "(see --max-len-a, --max-len-b, --max-len)")


class Control:
    """One kind of control over a search's live units (see the module docstring)."""

    def reads_raw(self, step: int) -> bool:
        """Does `mask` read `raw` at this step? (The loop copies the log-probabilities only then.)"""
        return False

    def mask(self, lprobs: Tensor, tokens: Tensor, step: int, raw: Tensor | None) -> None:
        """Constrain (in place) the next-token log-probabilities lprobs [B, V] of rows whose tokens so
        far are tokens [B, 1 + t] (BOS first); raw [B, V]: the model's own, before any constraint
        (None unless some control `reads_raw` at this step)."""

    def follow(self, kept_units: Tensor | None, parents: Tensor | None, new_tokens: Tensor) -> None:
        """After a step: only the units kept_units [U'] remain (None: all), each new row continues the
        row parents [B'] (indices before the step; None: each row its own), extended by new_tokens [B']."""

    def bonus(self, rows: Tensor) -> tuple[Tensor, Tensor] | None:
        """For a control that adds to log-probabilities (`TermBias`): of the rows [N], the
        bonus each has taken so far and the most it can take at one step, ([N], [N]); a hypothesis's score
        adds its bonus after the length penalty. None (the default): this control gives none."""
        return None


def padded(seqs: Sequence[Sequence[int]], width: int | None = None, fill: int = -1) -> Tensor:
    """Token sequences -> [len(seqs), width] long tensor, `fill` after each sequence's end."""
    width = max([len(s) for s in seqs] + [width or 0, 1])
    out = torch.full((len(seqs), width), fill, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(list(s), dtype=torch.long)
    return out


class RowPhrases:
    """Each unit's phrases, expanded to the unit's `group` rows once (not at every step):
    phrases [B, P, L] (padded with -1) and lengths [B, P] (0 for padding), B = units * group."""

    def __init__(self, per_unit: Sequence[Sequence[Sequence[int]]], group: int, device: torch.device) -> None:
        self.group = group
        n_phrases = max([len(p) for p in per_unit] + [1])
        width = max([len(s) for p in per_unit for s in p] + [1])
        phrases = torch.full((len(per_unit), n_phrases, width), -1, dtype=torch.long)
        lengths = torch.zeros(len(per_unit), n_phrases, dtype=torch.long)
        for u, unit in enumerate(per_unit):
            if unit:
                phrases[u, : len(unit)] = padded(unit, width)
                lengths[u, : len(unit)] = torch.tensor([len(s) for s in unit])
        self.phrases = phrases.repeat_interleave(group, 0).to(device)
        self.lengths = lengths.repeat_interleave(group, 0).to(device)

    def unit_rows(self, kept_units: Tensor) -> Tensor:
        """The rows [U' * group] of the units kept_units [U']."""
        offsets = torch.arange(self.group, device=kept_units.device)
        return (kept_units[:, None] * self.group + offsets).flatten()

    def keep(self, kept_units: Tensor) -> None:
        """Only the rows of the units kept_units [U'] remain."""
        rows = self.unit_rows(kept_units)
        self.phrases, self.lengths = self.phrases.index_select(0, rows), self.lengths.index_select(0, rows)
