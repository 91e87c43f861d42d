"""What masks a search step's log-probabilities besides the length rules: the n-gram block
(`block_repeated_ngrams`) and a batch's decoding controls (`build_controls`: a target prefix,
constraints, banned phrases, soft terms; `seq2seq.inference.controls`).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from seq2seq.inference.avoid import BannedPhrases
from seq2seq.inference.constraints import ConstraintTracker
from seq2seq.inference.controls import Control, ControlError, SourceControls, prefix_too_long
from seq2seq.inference.prefix import TargetPrefix
from seq2seq.inference.strategies import NEG_INF
from seq2seq.inference.term_bias import TermBias


def build_controls(per_unit: Sequence[SourceControls | None], group: int, max_lengths: Sequence[int],
                   sources: Sequence[int], eos_id: int, device: torch.device,
                   continuation: Tensor | None = None, sentence_end: Tensor | None = None,
                   term_bias: float = 0.0) -> tuple[list[Control], ConstraintTracker | None]:
    """The controls of a batch's units (`per_unit[u]`: unit u's, None for none; `sources[u]`: its source
    in the batch; `max_lengths[u]`: its length limit; continuation: see `ConstraintTracker`; term_bias: the
    bonus of the preferred terms, `TermBias`). Returns the masking controls, and the constraint tracker
    (None without constraints) that the constrained beam strategy reads.

    ControlError naming the source for a prefix that does not fit the length limit."""
    controls = [c or SourceControls() for c in per_unit]
    for c, limit, source in zip(controls, max_lengths, sources):
        if len(c.prefix) > limit:
            raise ControlError(source, prefix_too_long(len(c.prefix), limit), field="prefix", code="prefix_too_long")
    out: list[Control] = []
    if term_bias > 0 and any(c.preferred for c in controls):  # first: every mask after it wins over a bonus
        out.append(TermBias([c.preferred for c in controls], group, term_bias, eos_id, device, continuation,
                            [c.preferred_forms for c in controls]))
    if any(c.avoid for c in controls):
        out.append(BannedPhrases([c.avoid for c in controls], group, device))
    tracker = None
    if any(c.constraints for c in controls):
        tracker = ConstraintTracker([c.constraints for c in controls], group, eos_id, device, continuation,
                                    sentence_end, [c.sentence_ends for c in controls], [c.forms for c in controls])
        out.append(tracker)
    if any(c.prefix for c in controls):  # last: the user's prefix wins over every other mask
        out.append(TargetPrefix([c.prefix for c in controls], group, device))
    return out, tracker


def block_repeated_ngrams(lprobs: Tensor, generated: Tensor, n: int) -> None:
    """Set to -inf (in place) every token that would complete an n-gram already in the row.

    lprobs [B, V]; generated [B, t] tokens so far (t >= n).
    """
    windows = generated.unfold(1, n, 1)  # [B, t - n + 1, n]: every n-gram so far
    suffix = generated[:, generated.size(1) - n + 1 :]  # [B, n - 1]: what a new n-gram starts with
    match = (windows[:, :, :-1] == suffix[:, None, :]).all(dim=-1)  # [B, t - n + 1]
    hits = torch.zeros_like(lprobs).scatter_add_(1, windows[:, :, -1], match.to(lprobs.dtype))
    lprobs.masked_fill_(hits > 0, NEG_INF)
