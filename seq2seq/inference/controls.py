"""Decoding controls: what a search must, must not or should produce for one source, as target token ids, and
each control as the search loop runs it.

A `SourceControls` holds one source's controls (built from text by `seq2seq.inference.steering`):

* `prefix`: the output starts with these tokens (`TargetPrefix`);
* `constraints`: token sequences that must each appear, in any order, each as consecutive tokens
  (lexically constrained beam search with dynamic beam allocation: `ConstraintTracker`, `ConstrainedBeam`);
* `avoid`: token sequences that must not appear (`BannedPhrases`);
* `preferred`: annotated terms the search pushes toward without forcing them (`decoding.term_bias`,
  `TermBias`).

In the search loop (`seq2seq.inference.search`) each kind of control is a `Control` over the live units and
rows: it masks the next-token log-probabilities of every step (`mask`) and follows the rows as the loop keeps,
reorders and extends them (`follow`). The search makes the controls a batch needs (`build_controls`): none at
all when no source of the batch has any, so an uncontrolled search runs no control code (no mask, no follow)
and its outputs cannot depend on them.

Shapes: U active units, g rows per unit, B = U * g decoder rows, V vocabulary, t tokens so far.

`TargetPrefix`: each unit's output starts with given tokens. While a row has prefix tokens left, its only
allowed token is the next one, with the model's own log-probability (so `logprob`, `score` and
`token_logprobs` include the prefix's tokens: a hypothesis's score is the model's score of the whole output).
Every other mask yields to the prefix: it is what the user wrote. A beam holds one live row during the prefix
(the others have no finite score) and widens after it, as at the first step of an unconstrained search.

`BannedPhrases`: phrases (token sequences) that must never appear in an output. At every step, a row whose
last n - 1 tokens are the first n - 1 tokens of a banned phrase of n tokens may not produce the phrase's last
token (a one-token phrase is never produced). A phrase is banned as the target tokenizer writes it inside a
sentence; the same word segmented differently by the model is another token sequence (see
docs/decoding-controls.md).

`TermBias`: soft terms, a bonus on the next piece of each term an output has not met yet
(`decoding.term_bias`). The annotation (`--terms annotate`) tells a model trained with `data.terminology`
which words its output should hold; it places most of them, and where it writes its own word instead
("Oberteil" where the term says "Bluse") nothing makes it change its mind. `TermBias` adds `bias` (a
log-probability bonus, in nats) to the token that continues each term a row has not met: the term's first
piece, or its next piece once the row has begun it. A met term gets nothing more: a term is pushed until the
output holds it, and not written twice for the bonus. It is a push, not a guarantee (the constrained beam is
that): the model still writes another word where its own is stronger by more than the bonus, and greedy search
and sampling take it as well as the beam. Progress through a term, and met as a whole word, follow the
constrained beam's rules (`ConstraintTracker`, without its end-of-sentence rules).

A hypothesis's log-probabilities include the bonuses it took, and its score is its log-probability less them
divided by the length penalty, plus them: a bonus inside the length penalty would be worth more to a short
hypothesis than to a long one, and made the outputs shorter (docs/terminology.md). Rows without terms get
none: their log-probabilities and scores are unchanged, bit for bit.

Constraints (`ConstraintTracker`, `ConstrainedBeam`): lexically constrained beam search, dynamic beam
allocation over constraint-progress banks. Each source may carry constraints: token sequences (words or
phrases, as the target tokenizer writes them inside a sentence) that must each appear in the output, in any
order, each as consecutive tokens. The search is Post & Vilar (2018)'s dynamic beam allocation in the
vectorised form of Hu et al. (2019), as fairseq's: at every step a sentence's candidates are

* the best 2 * beam extensions of its beam (the unconstrained beam search's candidates),
* each row's single best token, and
* for each row, the next token of each constraint it has not met (continuing a phrase in progress,
  or starting one), and, where it has just produced a phrase's last token, the best token that ends
  the word (so that the phrase is met as a whole word),

each scored by the model. A candidate's *bank* is the number of constraint tokens its hypothesis has met (met
phrases in full, plus the longest phrase in progress). The beam is then filled bank by bank in turns: the best
candidate of the highest bank, the best of the next bank, ..., then the second best of each, ... ("stripes"),
so hypotheses that met more constraints survive beside better-scored ones that met fewer. A hypothesis may end
(EOS) only once it has met every constraint, except at the sentence's length limit, where every row ends; such
a hypothesis is marked `constraints_met=False` (the caller falls back to the unconstrained search, with a
warning). Nor may it end its source's last sentence before (the sentence-end rule, where the caller gives the
pieces that end a sentence and how many sentences each source ends), so that a constraint the model would not
place is not met by appending it after the translation's full stop ("... Restaurant. Nudeln.").

Progress per row and constraint is how many of the phrase's first tokens end the row's output (after a
mismatch it restarts from the phrase's first token, so a phrase that repeats its own beginning, such as "a a
b", may need a second try after "a a a"): a phrase is met only by its tokens produced consecutively. Sources
without constraints in a batch that has some keep the plain beam's choices (their candidates all sit in bank
0, ordered by score), so outputs do not depend on the batch.

Shapes of the constraints: k rows per unit (the beam), B = U * k rows, C constraints per unit (padded), L
tokens per constraint (padded), M candidates per unit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch
from torch import Tensor

from seq2seq.config.diagnostics import Seq2SeqError
from seq2seq.inference.strategies import NEG_INF, Candidates, Strategy
from seq2seq.text.lines import InputError

LOTS = 1 << 30  # sentence ends left to a unit without the sentence-end rule


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
