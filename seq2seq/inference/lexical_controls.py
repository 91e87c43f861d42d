"""The decoding controls besides the constraints (`seq2seq.inference.constraints`), and the builder of a
batch's controls (`build_controls`); each a `seq2seq.inference.controls.Control`.

`TargetPrefix`: each unit's output starts with given tokens. While a row has prefix tokens left, its only allowed token is the next one, with the model's own
log-probability (so `logprob`, `score` and `token_logprobs` include the prefix's tokens: a
hypothesis's score is the model's score of the whole output). Every other mask yields to the prefix:
it is what the user wrote. A beam holds one live row during the prefix (the others have no finite
score) and widens after it, as at the first step of an unconstrained search.

`BannedPhrases`: phrases (token sequences) that must never appear in an output. At every step, a row whose last n - 1 tokens are the first n - 1 tokens of a banned phrase of n
tokens may not produce the phrase's last token (a one-token phrase is never produced). A phrase is
banned as the target tokenizer writes it inside a sentence; the same word segmented differently by
the model is another token sequence (see docs/decoding-controls.md).

`TermBias`: soft terms, a bonus on the next piece of each term an output has not met yet
(`decoding.term_bias`). The annotation (`--terms annotate`) tells a model trained with `data.terminology` which words its output
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
from seq2seq.inference.controls import Control, ControlError, RowPhrases, SourceControls, padded, prefix_too_long
from seq2seq.inference.strategies import NEG_INF


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
