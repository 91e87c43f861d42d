"""Target prefixes: each unit's output starts with given tokens, and the search continues from there.

While a row has prefix tokens left, its only allowed token is the next one, with the model's own
log-probability (so `logprob`, `score` and `token_logprobs` include the prefix's tokens: a
hypothesis's score is the model's score of the whole output). Every other mask yields to the prefix:
it is what the user wrote. A beam holds one live row during the prefix (the others have no finite
score) and widens after it, as at the first step of an unconstrained search.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from seq2seq.inference.controls import Control, padded
from seq2seq.inference.strategies import NEG_INF


class TargetPrefix(Control):
    """prefixes[u]: unit u's forced first tokens (may be empty); `group` rows per unit."""

    def __init__(self, prefixes: Sequence[Sequence[int]], group: int, device: torch.device) -> None:
        self.group = group
        self.tokens = padded(prefixes).to(device)  # [U, P], -1 after a prefix's end
        self.longest = max(len(p) for p in prefixes)

    def reads_raw(self, step: int) -> bool:
        return step < self.longest

    def mask(self, lprobs: Tensor, tokens: Tensor, step: int, raw: Tensor | None) -> None:
        if step >= self.longest:
            return
        forced = self.tokens[:, step].repeat_interleave(self.group)  # [B], -1: free
        # (dense, without asking the device which rows are forced)
        is_forced, chosen = (forced >= 0)[:, None], forced.clamp(min=0)[:, None]  # [B, 1]
        assert raw is not None  # the loop passes it at the steps this control `reads_raw`
        keep = raw.gather(1, chosen)
        lprobs.masked_fill_(is_forced, NEG_INF)
        lprobs.scatter_(1, chosen, torch.where(is_forced, keep, lprobs.gather(1, chosen)))

    def follow(self, kept_units: Tensor | None, parents: Tensor | None, new_tokens: Tensor) -> None:
        if kept_units is not None:
            self.tokens = self.tokens.index_select(0, kept_units)
