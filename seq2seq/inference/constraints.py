"""Lexically constrained beam search: dynamic beam allocation over constraint-progress banks.

Each source may carry constraints: token sequences (words or phrases, as the target tokenizer writes
them inside a sentence) that must each appear in the output, in any order, each as consecutive
tokens. The search is Post & Vilar (2018)'s dynamic beam allocation in the vectorised form of Hu et
al. (2019), as fairseq's: at every step a sentence's candidates are

* the best 2 * beam extensions of its beam (the unconstrained beam search's candidates),
* each row's single best token, and
* for each row, the next token of each constraint it has not met (continuing a phrase in progress,
  or starting one), and, where it has just produced a phrase's last token, the best token that ends
  the word (so that the phrase is met as a whole word),

each scored by the model. A candidate's *bank* is the number of constraint tokens its hypothesis has
met (met phrases in full, plus the longest phrase in progress). The beam is then filled bank by bank
in turns: the best candidate of the highest bank, the best of the next bank, ..., then the second
best of each, ... ("stripes"), so hypotheses that met more constraints survive beside better-scored
ones that met fewer. A hypothesis may end (EOS) only once it has met every constraint, except at
the sentence's length limit, where every row ends; such a hypothesis is marked
`constraints_met=False` (the caller falls back to the unconstrained search, with a warning). Nor may it
end its source's last sentence before (the sentence-end rule, where the caller gives the pieces that end
a sentence and how many sentences each source ends), so that a constraint the model would not place is
not met by appending it after the translation's full stop ("... Restaurant. Nudeln.").

Progress per row and constraint is how many of the phrase's first tokens end the row's output (after
a mismatch it restarts from the phrase's first token, so a phrase that repeats its own beginning,
such as "a a b", may need a second try after "a a a"): a phrase is met only by its tokens produced
consecutively. Sources without constraints in a
batch that has some keep the plain beam's choices (their candidates all sit in bank 0, ordered by
score), so outputs do not depend on the batch.

Shapes: U units (sentences), k rows per unit (the beam), B = U * k rows, C constraints per unit
(padded), L tokens per constraint (padded), V vocabulary, M candidates per unit.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from seq2seq.inference.controls import Control, RowPhrases
from seq2seq.inference.strategies import NEG_INF, Candidates, Strategy

LOTS = 1 << 30  # sentence ends left to a unit without the sentence-end rule


class ConstraintTracker(Control):
    """Each row's progress through its unit's constraints, and the EOS rule (no EOS before all are met).

    constraints[u]: unit u's phrases; `group` (k) rows per unit. continuation [V] (optional): True for
    the pieces that continue a word (SentencePiece pieces without the leading "▁" that start with a
    letter, a digit, a hyphen or an apostrophe: `seq2seq.inference.steering.continuation_pieces`);
    given, a phrase is met only as whole words: its last token must not be followed by such a piece
    ("Hund" is not met by "Hunde"), so a phrase whose tokens have all been produced is *complete* but
    met only once the next token (or EOS) ends the word. State: progress [B, C]
    (tokens of each phrase matched by the end of the row), met [B, C] (padding counts as met).
    """

    def __init__(self, constraints: Sequence[Sequence[Sequence[int]]], group: int, eos_id: int,
                 device: torch.device, continuation: Tensor | None = None, sentence_end: Tensor | None = None,
                 sentence_ends: Sequence[int | None] | None = None,
                 forms: Sequence[Sequence[int] | None] | None = None) -> None:
        self.eos_id = eos_id
        self.continuation = None if continuation is None else continuation.to(device)
        self.table = RowPhrases(constraints, group, device)  # phrases [B, C, L], lengths [B, C]
        self.progress = torch.zeros_like(self.table.lengths)
        self.met = self.table.lengths == 0  # [B, C]
        # Alternative forms: forms[u][i] is the constraint of unit u that its phrase i is a form of (None: each
        # phrase a constraint of its own), met by any one of its forms. members [B, C, K]: phrase c is a form of
        # constraint k (K constraints; a unit's padding constraints have no form and count as met).
        per_unit = [list(f) if f is not None else list(range(len(c))) for c, f in zip(constraints, forms or
                                                                                        [None] * len(constraints))]
        k = max([max(f) + 1 for f in per_unit if f] + [1])
        members = torch.zeros(len(constraints), self.table.lengths.size(1), k, dtype=torch.bool)
        for u, f in enumerate(per_unit):
            for i, c in enumerate(f):
                members[u, i, c] = True
        self.members = members.repeat_interleave(group, 0).to(device)
        # The sentence-end rule: sentence_end [V] marks the pieces that end a sentence, sentence_ends[u] how many
        # sentences unit u's source ends (None: no rule). A row may end no more than all but the last of them
        # before it has met every constraint, so a term goes into the translation, not after its last full stop.
        self.sentence_end, self.ends_left = None, None
        if sentence_end is not None and sentence_ends is not None and any(n is not None for n in sentence_ends):
            self.sentence_end = sentence_end.to(device)
            left = [LOTS if n is None else max(n, 1) - 1 for n in sentence_ends]
            self.ends_left = torch.tensor(left, device=device).repeat_interleave(group)  # [B]

    # ---- what the search reads --------------------------------------------------------------

    def _complete(self, progress: Tensor, met: Tensor, lengths: Tensor) -> Tensor:
        """[N, C]: met, or all its tokens produced (met once the word ends)."""
        return met | ((progress == lengths) & (lengths > 0))

    def _row_lengths(self, rows: Tensor | None = None) -> Tensor:
        return self.table.lengths if rows is None else self.table.lengths.index_select(0, rows)

    def _members(self, rows: Tensor | None = None) -> Tensor:
        return self.members if rows is None else self.members.index_select(0, rows)

    @staticmethod
    def _done(complete: Tensor, members: Tensor) -> Tensor:
        """[N, K]: is each constraint done (one of its forms complete; one without forms: padding)?"""
        return (complete[:, :, None] & members).any(dim=1) | ~members.any(dim=1)

    def all_met(self, rows: Tensor | None = None) -> Tensor:
        """[B] (or [len(rows)]): would the row meet every constraint if it ended now?"""
        progress, met = (self.progress, self.met) if rows is None else (
            self.progress.index_select(0, rows), self.met.index_select(0, rows))
        return self._done(self._complete(progress, met, self._row_lengths(rows)), self._members(rows)).all(dim=1)

    def next_tokens(self) -> Tensor:
        """[B, C]: the token that advances each phrase of each row whose constraint is not done (-1 for the
        others)."""
        phrases = self.table.phrases  # [B, C, L]
        position = self.progress.clamp(max=phrases.size(2) - 1)
        want = phrases.gather(2, position[..., None]).squeeze(2)
        complete = self._complete(self.progress, self.met, self._row_lengths())
        settled = (self._done(complete, self.members)[:, None, :] & self.members).any(dim=2)  # [B, C]
        return want.masked_fill(complete | settled, -1)

    def word_ends(self, lprobs: Tensor) -> Tensor | None:
        """[B]: for a row that has produced all the tokens of a phrase not yet met (it is met once its
        word ends), the best token that ends the word (EOS where allowed, or a word-initial piece);
        -1 for the other rows. None without word pieces (phrases are then met by their tokens)."""
        if self.continuation is None:
            return None
        pending = (self._complete(self.progress, self.met, self._row_lengths()) & ~self.met).any(dim=1)
        best = lprobs.masked_fill(self.continuation[None, :], NEG_INF).argmax(dim=1)
        return torch.where(pending, best, -1)

    def banks(self, rows: Tensor, tokens: Tensor) -> Tensor:
        """The bank of each candidate: row `rows` [N] (global row index) extended by `tokens` [N] -> [N]: the
        tokens of its done constraints (each one's longest complete form) and of the longest phrase under way
        of a constraint not done."""
        progress, met = self._advanced(rows, tokens)
        lengths, members = self._row_lengths(rows), self._members(rows)
        complete = self._complete(progress, met, lengths)
        done = ((lengths * complete)[:, :, None] * members).amax(dim=1).sum(dim=1)
        settled = (self._done(complete, members)[:, None, :] & members).any(dim=2)
        return done + progress.masked_fill(complete | settled, 0).amax(dim=1)

    # ---- Control ------------------------------------------------------------------------------

    def mask(self, lprobs: Tensor, tokens: Tensor, step: int, raw: Tensor | None) -> None:
        eos = self.eos_id
        met = self.all_met()
        lprobs[:, eos] = torch.where(met, lprobs[:, eos], NEG_INF)
        if self.ends_left is not None and self.sentence_end is not None:  # (both or neither: the sentence-end rule)
            stop = ~met & (self.ends_left <= 0)  # no last full stop before every constraint is met
            lprobs.masked_fill_(stop[:, None] & self.sentence_end[None, :], NEG_INF)

    def follow(self, kept_units: Tensor | None, parents: Tensor | None, new_tokens: Tensor) -> None:
        rows = parents if parents is not None else torch.arange(new_tokens.numel(), device=new_tokens.device)
        self.progress, self.met = self._advanced(rows, new_tokens)  # (rows number the units before the step)
        if self.ends_left is not None and self.sentence_end is not None:  # (both or neither)
            self.ends_left = self.ends_left.index_select(0, rows) - self.sentence_end[new_tokens].long()
        if kept_units is not None:
            self.table.keep(kept_units)
            self.members = self.members.index_select(0, self.table.unit_rows(kept_units))

    # ---- the progress rule ----------------------------------------------------------------------

    def _advanced(self, rows: Tensor, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """(progress, met) [N, C] of rows [N] extended by tokens [N] (rows index the current state)."""
        phrases = self.table.phrases.index_select(0, rows)  # [N, C, L]
        lengths = self._row_lengths(rows)  # [N, C]
        progress, met = self.progress.index_select(0, rows), self.met.index_select(0, rows)
        token = tokens.view(-1, 1)
        if self.continuation is not None:  # a complete phrase is met when the token ends its word
            ends_word = ~self.continuation[tokens].view(-1, 1)
            met = met | (self._complete(progress, met, lengths) & ends_word)
        want = phrases.gather(2, progress.clamp(max=phrases.size(2) - 1)[..., None]).squeeze(2)
        advance = (want == token) & (progress < lengths)
        restart = phrases[:, :, 0] == token
        progress = torch.where(advance, progress + 1, restart.long())
        if self.continuation is None:
            met = met | ((progress == lengths) & (lengths > 0))
        return progress.masked_fill(met, 0), met


class ConstrainedBeam(Strategy):
    """Beam search with dynamic beam allocation over the tracker's banks (see the module docstring).

    Candidates come out in allocation order (stripes over banks), not score order: the loop keeps the
    first `beam` that do not end, and finishes those among the first `beam` that do.
    """

    def __init__(self, beam: int, tracker: ConstraintTracker) -> None:
        self.group = beam
        self.candidates = 2 * beam
        self.tracker = tracker

    def initial_scores(self, units: int, device: torch.device) -> Tensor:
        scores = torch.full((units, self.group), NEG_INF, device=device)
        scores[:, 0] = 0.0
        return scores.view(-1)

    def select(self, lprobs: Tensor, scores: Tensor) -> Candidates:
        k, (b, v) = self.group, lprobs.shape
        u = b // k
        flat = (lprobs + scores[:, None]).view(u, k * v)  # [U, k V]
        top = flat.topk(min(2 * k, k * v), dim=1).indices  # the plain beam's candidates
        in_unit = torch.arange(k, device=lprobs.device).repeat(u).view(u, k)  # row within its unit
        row_best = in_unit * v + lprobs.argmax(dim=1).view(u, k)  # [U, k]
        wanted = self.tracker.next_tokens()  # [B, C]
        ends = self.tracker.word_ends(lprobs)
        if ends is not None:  # a phrase's last token produced: also the best way to end its word
            wanted = torch.cat([wanted, ends[:, None]], dim=1)
        forced = (in_unit.view(b, 1) * v + wanted.clamp(min=0)).view(u, -1)  # [U, k C]
        index = torch.cat([top, row_best, forced], dim=1)  # [U, M]
        valid = torch.cat([torch.ones_like(top, dtype=torch.bool), torch.ones_like(row_best, dtype=torch.bool),
                           (wanted >= 0).view(u, -1)], dim=1)
        cand_scores = flat.gather(1, index).masked_fill(~valid | _duplicates(index), NEG_INF)
        rows = torch.div(index, v, rounding_mode="floor")
        tokens = index - rows * v
        global_rows = (torch.arange(u, device=lprobs.device)[:, None] * k + rows).view(-1)
        banks = self.tracker.banks(global_rows, tokens.view(-1)).view(u, -1)
        order = _stripes(cand_scores, banks)[:, : 2 * k]
        rows, tokens, cand_scores = rows.gather(1, order), tokens.gather(1, order), cand_scores.gather(1, order)
        logprob = lprobs.view(u, k * v).gather(1, rows * v + tokens)
        return Candidates(rows, tokens, logprob, cand_scores)


def _duplicates(index: Tensor) -> Tensor:
    """[U, M] bool: is this (row, token) candidate a repeat of one earlier in its unit?"""
    ordered, order = index.sort(dim=1, stable=True)
    repeat = torch.zeros_like(index, dtype=torch.bool)
    repeat[:, 1:] = ordered[:, 1:] == ordered[:, :-1]
    return torch.zeros_like(repeat).scatter(1, order, repeat)


def _stripes(scores: Tensor, banks: Tensor) -> Tensor:
    """The allocation order of each unit's candidates [U, M] (indices): by rank within the bank (best
    first), then from the highest bank down; candidates with no finite score last."""
    by_score = scores.argsort(dim=1, descending=True, stable=True)
    banks_sorted = banks.gather(1, by_score)
    n_banks = int(banks.max()) + 1
    one_hot = torch.nn.functional.one_hot(banks_sorted, n_banks)  # [U, M, n_banks]
    rank = one_hot.cumsum(dim=1).gather(2, banks_sorted[..., None]).squeeze(2) - 1
    key = rank * n_banks + (n_banks - 1 - banks_sorted)
    dead = scores.gather(1, by_score) == NEG_INF
    key = key.masked_fill(dead, key.numel() * n_banks + 1)
    return by_score.gather(1, key.argsort(dim=1, stable=True))
