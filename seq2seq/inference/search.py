"""Decoding: greedy, beam and sampling search over an encoder-decoder model.

One loop (`_Search`) owns everything the strategies share: incremental decoding with the model's
key/value cache, the length limits, the n-gram block, finishing hypotheses, length-penalised
scoring and removing finished sentences from the batch. A strategy (seq2seq.inference.strategies)
only decides which (row, token) pairs continue:

* `Greedy`: each row takes its most likely token;
* `Beam`: the top 2*beam of the beam*V extensions of a sentence (as in fairseq), so that `beam`
  live hypotheses remain even when up to `beam` of the candidates end with EOS;
* `Sample`: each row draws its token after temperature, top-k and top-p (nucleus) filtering,
  from a `torch.Generator` seeded with `SearchConfig.seed`.

Vocabulary of the loop. A *unit* is one decoding problem with `group` decoder rows: a sentence's
beam (group = beam), a sentence under greedy search (group = 1) or one of a sentence's `nbest`
independent samples (group = 1). The cache is created with `group`, so the rows of a unit share
their source's cross-attention keys/values. Units finish independently; a finished unit leaves
the batch (`DecoderCache.reorder`) and stops costing compute.

Lengths and scores. A hypothesis's tokens exclude BOS and EOS; its length L counts the EOS, i.e.
L = len(tokens) + 1 = len(token_logprobs), the number of scored predictions. Every strategy
reports the same quantities:

* `logprob`: the model's total log-probability (fp32 log-softmax at temperature 1, whatever the
  sampling filters were), the sum of `token_logprobs`;
* `score = logprob / ((5 + L) / 6) ** lenpen` (GNMT length penalty, `hypothesis_score`); beam
  search ranks finished hypotheses by it, and the n-best lists of every strategy are sorted by it.
  A control that adds a bonus to log-probabilities (`decoding.term_bias`) has it in `logprob`, and
  the score takes it out before the length penalty and adds it after (`Control.bonus`).

Length limits, per sentence: max_len = `SearchConfig.max_length(src_len, model.cfg.max_positions)`,
min(floor(max_len_a * src_len + max_len_b), cfg.max_len, max_positions - 1), src_len from
`model.encoder.source_lengths(src)` (the model: a `seq2seq.inference.protocol.SearchableModel`),
else the memory's real positions. EOS is forbidden
while fewer than `min_len` tokens have been generated and forced once `max_len` tokens have been
(so at most max_len tokens; max_len wins over min_len when they conflict). PAD and BOS are never
generated.

Controls (`seq2seq.inference.controls`), per source: a target prefix the output starts with, phrases
it must contain (the constrained beam, `ConstrainedBeam`, replaces `Beam`) and phrases
it must not. Each masks the step's log-probabilities after the rules above and follows the rows as
they are kept, reordered and extended; a batch without controls runs none of their code.

Batch invariance: every decision (lengths, finishing, early stopping) is made per unit from that
unit's rows alone, so a sentence's greedy or beam result does not depend on the other sentences of
the batch or on their padding (up to floating-point noise of batched matmuls). Sampling is
reproducible for a given batch and seed, but its random draws depend on the batch composition.

Shapes: N sources, U active units, g rows per unit, B = U * g decoder rows, V vocabulary,
S padded source length, t tokens generated so far.

Here too, the loop's state and result: `Units` (per unit) and `Rows` (per decoder row), the state
between steps, each narrowed by one `select`; `EndedHypotheses`, those a step ended, until the host
reads them; `Hypothesis`, one output sequence; and the n-gram block (`block_repeated_ngrams`). The
making of a batch's controls is `seq2seq.inference.controls.build_controls`.

Stopping a search between two decoding steps, for a caller that may stop wanting its result: a server
request past its time budget, or whose client went away, should free the model at once, not after
minutes of beam search. Its caller runs the model call inside `stop_when(check)`: every `search`
started inside it calls `check()` once before each decoding step and raises `SearchStopped` when it
returns True, so the call ends within one step (the encoder, and a CTranslate2 engine's own search, run
to their end). Outside such a block a search reads one context variable per call and nothing per step,
and its results are the same, bit for bit. The check is a context variable (`contextvars`): it belongs
to the thread (or asyncio task) that set it, so the server's batching worker sets it around its model
call and nothing in between (the Translator, the text pipeline, an ensemble) carries it.

    with stop_when(lambda: time.monotonic() > deadline):
        translator.translate_nbest(texts)   # SearchStopped past the deadline
"""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable, Generic, Iterator, Sequence, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor

from seq2seq.config.diagnostics import Seq2SeqError
from seq2seq.config.search import SearchConfig
from seq2seq.inference.controls import ConstrainedBeam, Control, SourceControls, build_controls
from seq2seq.inference.ctc import best_paths, ctc_scorer, joint_logprob
from seq2seq.inference.protocol import DecodingCache, SearchableModel, reorder_memory
from seq2seq.inference.strategies import NEG_INF, Candidates, make_strategy, top_p_filter  # noqa: F401 (re-exported)


# --------------------------------------------------------------------------------------------
# The score of a hypothesis
# --------------------------------------------------------------------------------------------

ScoreT = TypeVar("ScoreT", float, Tensor)  # a score: of one hypothesis (a float), or of many (a tensor)


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's ((5 + length) / 6) ** alpha (alpha: `SearchConfig.lenpen`); length counts the EOS."""
    return ((5.0 + length) / 6.0) ** alpha


def hypothesis_score(logprob: ScoreT, length: int, lenpen: float, bonus: ScoreT | None = None) -> ScoreT:
    """The search score of a hypothesis of `length` predictions (its tokens and the EOS) and total
    log-probability `logprob` (a float, or a tensor of them): logprob / length_penalty(length, lenpen).
    bonus (the same kind, None: none): what a control added to `logprob` (`decoding.term_bias`), which
    counts after the length penalty: (logprob - bonus) / length_penalty(length, lenpen) + bonus."""
    if bonus is None:
        return logprob / length_penalty(length, lenpen)
    return (logprob - bonus) / length_penalty(length, lenpen) + bonus


# --------------------------------------------------------------------------------------------
# What the loop holds and returns
# --------------------------------------------------------------------------------------------


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
                score=hypothesis_score(total, t + 1, cfg.lenpen, taken or None),
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


# --------------------------------------------------------------------------------------------
# Stopping a search between two steps
# --------------------------------------------------------------------------------------------

StopCheck = Callable[[], bool]  # True: stop the search before its next decoding step

_CHECK: ContextVar[StopCheck | None] = ContextVar("seq2seq_search_stop_check", default=None)


class SearchStopped(Seq2SeqError, RuntimeError):
    """A search stopped between two decoding steps because the check of `stop_when` said so: its caller
    no longer wants the result (not a failure of the model or of the input)."""

    code = "search_stopped"


@contextlib.contextmanager
def stop_when(check: StopCheck) -> Iterator[None]:
    """Searches started inside this block (in this thread or task) stop, raising `SearchStopped`, before
    the first decoding step at which `check()` is True. `check` should be cheap: it runs once a step."""
    token = _CHECK.set(check)
    try:
        yield
    finally:
        _CHECK.reset(token)


def stop_check() -> StopCheck | None:
    """The check of the innermost `stop_when` block around the caller, or None outside one."""
    return _CHECK.get()


# --------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------


S = TypeVar("S")  # a batch of sources, as the model's encoder takes it (`SearchableModel`)
M = TypeVar("M")  # the encoder's output the decoder reads (`SearchableModel`)
C = TypeVar("C", bound=DecodingCache)  # the decoder's key/value cache (`SearchableModel`)


def search(model: SearchableModel[S, M, C], src: S, cfg: SearchConfig, *,
           controls: Sequence[SourceControls | None] | None = None, continuation: Tensor | None = None,
           sentence_end: Tensor | None = None, use_cache: bool = True) -> list[list[Hypothesis]]:
    """Decode a batch: src (whatever `model.encode` takes, N sources) -> N n-best lists.

    Each list holds up to `cfg.nbest` hypotheses sorted by score, best first: distinct ones for beam
    search (fewer only when constraints or a tiny vocabulary leave fewer finite-probability
    sequences), `nbest` samples for sampling, two of which may coincide. controls: each source's decoding controls (target prefix, constraints, banned
    phrases; `seq2seq.inference.controls`), None for none; constraints need beam search, and a
    hypothesis that could not meet them ends at the length limit with `constraints_met=False`,
    ranked after those that did; continuation [V] (bool, optional): the target pieces that continue a
    word, so that constraints are met only as whole words (`ConstraintTracker`); sentence_end [V] (bool,
    optional): the pieces that end a sentence, for the sentence-end rule of sources whose controls say how
    many sentences they end (`SourceControls.sentence_ends`). `use_cache=False`
    recomputes the whole prefix at every step instead of using the key/value cache (slow; for
    testing). The model is run in eval mode and restored. ControlError (a ValueError) naming the
    source for controls that cannot be honoured. Inside `stop_when(check)`,
    SearchStopped before the first decoding step at which check() is True.
    """
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            return _Search(model, cfg, use_cache, controls, continuation, sentence_end).run(src)
    finally:
        model.train(was_training)


class _Search(Generic[S, M, C]):
    """State of one `search` call; see the module docstring for the vocabulary.

    Between steps: `units` and `rows` (the live units and decoder rows), `scores` [B] (the rows'
    cumulative log-probabilities), `cache` (None without the key/value cache), `memory` [U, S, D] and
    `pad_mask` [U, S], the encoder output per unit (with the cache the decoder reads them at the first
    step only; without it at every step, narrowed as units finish), and `finished`, each source's
    finished hypotheses.
    """

    def __init__(self, model: SearchableModel[S, M, C], cfg: SearchConfig, use_cache: bool,
                 controls: Sequence[SourceControls | None] | None = None, continuation: Tensor | None = None,
                 sentence_end: Tensor | None = None) -> None:
        self.model, self.cfg, self.use_cache = model, cfg, use_cache
        self.source_controls, self.continuation, self.sentence_end = controls, continuation, sentence_end
        self.exact = cfg.strategy == "beam" and not cfg.early_stopping

    def run(self, src: S) -> list[list[Hypothesis]]:
        memory, pad_mask = self.model.encode(src)  # [N, S, D] (or the model's own: `reorder_memory`), [N, S]
        if pad_mask.size(0) == 0:
            return []
        self._start(src, memory, pad_mask)
        stop = stop_check()  # a caller that may stop wanting the result (`stop_when`)
        for step in range(max(self.units.max_host) + 1):
            if stop is not None and stop():
                raise SearchStopped(f"the search was stopped before decoding step {step}")
            lprobs, step_attn = self._next_log_probs(step)
            cand = self.strategy.select(lprobs, self.scores)  # the strategy proposes
            cont, done, regroup = self._finish(cand, step, step_attn)  # the loop ends hypotheses and units
            if all(done):
                break
            self._advance(cont, done, step_attn, regroup)
        self._read()  # the values of the hypotheses the last step finished
        if self.cfg.ctc_weight > 0:
            self._rescore_with_ctc(memory, pad_mask)
        return [self._nbest(hyps) for hyps in self.finished]

    # ---- the steps of `run` ------------------------------------------------------------------

    def _start(self, src: S, memory: M, pad_mask: Tensor) -> None:
        """The state before the first step: every unit live, each row holding BOS."""
        cfg, device = self.cfg, pad_mask.device
        self.device = device
        self._aranges: dict[int, Tensor] = {}
        self.pad_mask_host = pad_mask.cpu() if cfg.attention_layer is not None else None  # (read for alignments only)
        self.strategy = strategy = make_strategy(cfg, device)
        g = self.group = strategy.group
        per = strategy.units_per_source
        max_lens = self._max_lengths(src, pad_mask)  # [N], before the samples are made units
        if per > 1:  # independent samples: one unit (and cross-attention entry) each
            memory, pad_mask = self._repeated(memory, pad_mask, per)
        self.memory, self.pad_mask = memory, pad_mask
        self.units = self._init_units([m for m in max_lens for _ in range(per)], per)
        self._start_controls(g)
        self.blocked = torch.tensor(sorted({cfg.pad_id, cfg.bos_id} - {cfg.eos_id}), device=device)
        self.finished: list[list[Hypothesis]] = [[] for _ in max_lens]
        self.pending: EndedHypotheses | None = None  # hypotheses ended, whose values the next host read brings
        b = len(self.units.source) * g
        self.rows = Rows(
            tokens=torch.full((b, 1), cfg.bos_id, dtype=torch.long, device=device),
            logprobs=torch.zeros(b, 0, device=device),
            attention=None if cfg.attention_layer is None else torch.zeros(b, 0, pad_mask.size(1), device=device),
        )
        self.scores = strategy.initial_scores(len(self.units.source), device)  # [B]
        self.cache = self.model.new_cache(group=g) if self.use_cache else None

    def _start_controls(self, group: int) -> None:
        """The batch's decoding controls (none when no source has any); with constraints, the
        constrained beam strategy."""
        self.controls: list[Control] = []
        self.tracker = None
        if self.source_controls is None or not any(self.source_controls):
            return
        units = self.units
        per_unit = [self.source_controls[s] for s in units.source]
        self.controls, self.tracker = build_controls(per_unit, group, units.max_host, units.source, self.cfg.eos_id,
                                                     self.device, self.continuation, self.sentence_end,
                                                     self.cfg.term_bias)
        if self.tracker is not None:
            if self.cfg.strategy != "beam":
                raise ValueError(f"constraints need beam search, not {self.cfg.strategy} search")
            self.strategy = ConstrainedBeam(group, self.tracker)

    def _max_lengths(self, src: S, pad_mask: Tensor) -> list[int]:
        """Each source's length limit (`SearchConfig.max_length`); pad_mask [N, S]."""
        lengths = self.model.encoder.source_lengths(src)
        if lengths is None:
            lengths = (~pad_mask).sum(dim=1)
        positions = self.model.cfg.max_positions
        return [self.cfg.max_length(n, positions) for n in lengths.tolist()]

    def _next_log_probs(self, step: int) -> tuple[Tensor, Tensor | None]:
        """The constrained next-token log-probabilities of every row [B, V], and its cross-attention
        [B, S] (None unless `attention_layer` is set)."""
        rows, g = self.rows, self.group
        layer = self.cfg.attention_layer
        if self.cache is not None:  # only the new token; memory is read on the first step only
            first = step == 0
            logits, step_attn = self.model.decode(rows.tokens[:, -1:], self.memory if first else None,
                                                  self.pad_mask if first else None, self.cache, attention_layer=layer)
        else:  # the whole prefix, memory repeated per row
            memory, pad_mask = self._repeated(self.memory, self.pad_mask, g)
            logits, step_attn = self.model.decode(rows.tokens, memory, pad_mask, None, attention_layer=layer)
        lprobs = F.log_softmax(logits[:, -1].float(), dim=-1)  # [B, V]
        if step_attn is not None:
            step_attn = step_attn[:, -1].float()
        self._constrain(lprobs, rows.tokens, step)
        return lprobs, step_attn

    def _finish(self, cand: Candidates, step: int, step_attn: Tensor | None) -> tuple[Candidates, list[bool], bool]:
        """Finish the hypotheses that end at `step` and decide which units are done.

        Returns the candidates that continue [U, g], whether each unit is done (on the host: the
        step's one host read, which also brings which candidates ended, and the values of those the
        previous step ended), and whether the rows move to their parents (beam search)."""
        g = self.group
        eos = cand.tokens == self.cfg.eos_id  # [U, C]
        final = eos[:, :g] & (cand.scores[:, :g] > NEG_INF)  # ended among the top g
        n_cand = cand.tokens.size(1)
        if n_cand > g:  # beam: the first g candidates that did not end continue
            rank = eos.long() * n_cand + self._arange(n_cand)
            keep = rank.topk(g, dim=1, largest=False).indices  # ascending = in score order
            cont = Candidates(*(x.gather(1, keep) for x in cand))
            done = self._beam_done(final, cand, cont, step)
        else:  # one candidate per row (g == 1): the unit ends when its row does
            cont = cand
            done = eos[:, 0] | (self.units.max <= step)
        done_host, final_host = self._read(done, final)
        if any(final_host):
            self._finalize(cand, final_host, step, self.rows, step_attn)
        return cont, done_host, n_cand > g

    def _advance(self, cont: Candidates, done: list[bool], step_attn: Tensor | None, regroup: bool) -> None:
        """Drop the finished units, move the rows to their parents (regroup) and append the new tokens."""
        g, index, kept = self.group, None, None
        if any(done):
            keep_host = [i for i, d in enumerate(done) if not d]
            kept = torch.tensor(keep_host, device=self.device)  # (a copy to the device: no read)
            cont = Candidates(*(x.index_select(0, kept) for x in cont))
            self.units = self.units.select(kept, keep_host)
            if self.cache is None:
                self.memory = reorder_memory(self.model, self.memory, kept)
                self.pad_mask = self.pad_mask.index_select(0, kept)
            index = (kept[:, None] * g + cont.rows).view(-1)  # [B']
        elif regroup:
            index = (self._arange(cont.rows.size(0))[:, None] * g + cont.rows).view(-1)
        rows = self.rows
        if index is not None:  # (greedy and sampling rows stay in place until a unit ends)
            if self.cache is not None:
                self.cache.reorder(index, kept)  # the sources that stay: known here, not read from `index`
            rows = rows.select(index)
            if step_attn is not None:
                step_attn = step_attn.index_select(0, index)
        self.rows = rows.append(cont.tokens, cont.logprob, step_attn)
        self.scores = cont.scores.view(-1)
        for control in self.controls:
            control.follow(kept, index, cont.tokens.view(-1))

    # ---- helpers -----------------------------------------------------------------------------

    def _repeated(self, memory: M, pad_mask: Tensor, k: int) -> tuple[M, Tensor]:
        """Each unit's memory and pad mask k times in a row (`reorder_memory`)."""
        index = self._arange(pad_mask.size(0)).repeat_interleave(k)
        return reorder_memory(self.model, memory, index), pad_mask.index_select(0, index)

    def _rescore_with_ctc(self, memory: M, pad_mask: Tensor) -> None:
        """decoding.ctc_weight: add each source's CTC best paths to its finished hypotheses and score
        them all with attention and CTC together (see seq2seq.inference.ctc)."""
        cfg = self.cfg
        scorer = ctc_scorer(self.model, memory, pad_mask, cfg.pad_id)
        finished_tokens = [[h.tokens for h in hyps] for hyps in self.finished]
        added = best_paths(self.model, memory, pad_mask, scorer.best_paths(), finished_tokens, cfg)
        for source, tokens, lps, attention in added:
            if attention is not None:
                attention = attention[:, self.real_positions(source)]
            self.finished[source].append(Hypothesis(tokens, 0.0, sum(lps), lps, attention))
        pairs = [(source, h) for source, hyps in enumerate(self.finished) for h in hyps]
        ctc = iter(scorer.log_likelihood([s for s, _ in pairs], [h.tokens for _, h in pairs]))
        for hyps in self.finished:
            values = [next(ctc) for _ in hyps]  # (in the order of `pairs`)
            for h, value in zip(hyps, values):
                h.ctc_logprob = value
            if any(value > NEG_INF for value in values):  # else CTC can align none: attention stands
                for h, value in zip(hyps, values):
                    h.score = hypothesis_score(joint_logprob(h.logprob, value, cfg.ctc_weight), len(h.tokens) + 1,
                                               cfg.lenpen)

    def real_positions(self, source: int) -> Tensor:
        """The real (unpadded) source positions of `source`, on the host (for its attention)."""
        assert self.pad_mask_host is not None  # kept whenever there is attention (attention_layer set)
        return (~self.pad_mask_host[source]).nonzero().squeeze(1)

    def _arange(self, n: int) -> Tensor:
        if n not in self._aranges:
            self._aranges[n] = torch.arange(n, device=self.device)
        return self._aranges[n]

    def _init_units(self, max_lens: list[int], per: int) -> Units:
        """The state of the units at the start: source, length limit, nothing finished yet."""
        n, device = len(max_lens), self.device
        units = Units(
            source=[u // per for u in range(n)],
            max_host=max_lens,
            max=torch.tensor(max_lens, device=device),
            n_finished=torch.zeros(n, dtype=torch.long, device=device),
        )
        if self.exact:
            units.best_finished = torch.full((n, self.group), NEG_INF, device=device)  # top-g finished scores
            units.max_penalty = torch.tensor([length_penalty(m + 1, self.cfg.lenpen) for m in max_lens],
                                             device=device)
        return units

    def _constrain(self, lprobs: Tensor, tokens: Tensor, step: int) -> None:
        """Apply (in place) PAD/BOS blocking, min_len, the n-gram block and the forced EOS at max_len.

        lprobs [B, V]; tokens [B, 1 + step] (BOS + generated).
        """
        cfg = self.cfg
        eos = cfg.eos_id
        force = step >= min(self.units.max_host)
        raw = lprobs.clone() if any(c.reads_raw(step) for c in self.controls) else None
        if force:
            raw_eos = lprobs[:, eos].clone()
        if self.blocked.numel():
            lprobs.index_fill_(1, self.blocked, NEG_INF)
        if step < cfg.min_len:
            lprobs[:, eos] = NEG_INF
        n = cfg.no_repeat_ngram
        if n and step >= n:
            block_repeated_ngrams(lprobs, tokens[:, 1:], n)
        for control in self.controls:
            control.mask(lprobs, tokens, step, raw)
        if force:  # rows at their max_len: EOS only, with its real log-probability
            at_max = (self.units.max <= step).repeat_interleave(self.group)  # [B]
            lprobs.masked_fill_(at_max[:, None], NEG_INF)
            lprobs[:, eos] = torch.where(at_max, raw_eos, lprobs[:, eos])

    def _beam_done(self, final: Tensor, cand: Candidates, cont: Candidates, step: int) -> Tensor:
        """[U] bool: has the unit finished (see `SearchConfig.early_stopping`)?"""
        units = self.units
        at_max = units.max <= step
        if not self.exact:
            units.n_finished += final.sum(dim=1)
            # Also done when no live hypothesis has a finite score: nothing more can finish.
            return (units.n_finished >= self.group) | at_max | (cont.scores[:, 0] == NEG_INF)
        cfg, g = self.cfg, self.group
        assert units.best_finished is not None and units.max_penalty is not None  # exact beam search has them
        bonus = self._bonus(self._global_rows(cand.rows[:, :g]))
        ended = torch.where(final, hypothesis_score(cand.scores[:, :g], step + 1, cfg.lenpen,
                                                    None if bonus is None else bonus[0].view(final.shape)), NEG_INF)
        units.best_finished = torch.cat([units.best_finished, ended], dim=1).topk(g, dim=1).values
        # The best score a live hypothesis could still reach: its log-probability only falls, so
        # only the length penalty can help, most at max_len when lenpen > 0, else at the next step;
        # and a bonus can still grow, at most by its most a step until max_len.
        penalty = units.max_penalty if cfg.lenpen > 0 else length_penalty(step + 2, cfg.lenpen)
        bonus = self._bonus(self._global_rows(cont.rows))
        if bonus is None:
            bound = cont.scores.amax(dim=1) / penalty  # (constrained beam: candidates are not in score order)
        else:
            taken, most = (x.view(cont.rows.shape) for x in bonus)
            penalty = penalty[:, None] if isinstance(penalty, Tensor) else penalty
            bound = ((cont.scores - taken) / penalty + taken + most * (units.max - step)[:, None]).amax(dim=1)
        return (units.best_finished[:, -1] >= bound) | at_max

    def _global_rows(self, rows: Tensor) -> Tensor:
        """Each unit's rows [U, k] (row within its unit) -> their indices among all rows [U * k]."""
        return (self._arange(rows.size(0))[:, None] * self.group + rows).view(-1)

    def _bonus(self, rows: Tensor) -> tuple[Tensor, Tensor] | None:
        """The bonus the controls gave each of the rows [N] (global indices) and the most they can give it a
        step, ([N], [N]) (`Control.bonus`); None without such a control."""
        parts = [b for b in (c.bonus(rows) for c in self.controls) if b is not None]
        if not parts:
            return None
        taken, most = (torch.stack(p).sum(dim=0) for p in zip(*parts))
        return taken, most

    def _read(self, *flags: Tensor) -> list[list[bool]]:
        """The step's one host read: `flags` (bool tensors, e.g. which units are done), each as a flat
        list of bools, and, in the same transfer, the values of the hypotheses ended at the previous
        step (`_finalize`), which then join `finished`. With no flags: only those values (after the loop)."""
        parts = [f.reshape(-1).to(torch.float32) for f in flags]
        pending, self.pending = self.pending, None
        if pending is not None:
            parts.append(pending.values.reshape(-1))
        if not parts:
            return []
        values = torch.cat(parts).tolist()
        out, at = [], 0
        for f in flags:
            out.append([v != 0 for v in values[at: at + f.numel()]])
            at += f.numel()
        if pending is not None:
            pending.complete(values[at:], self.cfg, self.finished, self.real_positions)
        return out

    def _finalize(self, cand: Candidates, final: list[bool], step: int, rows: Rows, step_attn: Tensor | None) -> None:
        """The candidates marked in `final` (the host's copy of [U, g], flattened; EOS appended at `step`)
        become Hypotheses at the next host read: their tokens, log-probabilities, score and whether they
        met their constraints are gathered now, on the device, into one tensor that read brings."""
        g = self.group
        ended = [k for k, f in enumerate(final) if f]
        unit_host = [k // g for k in ended]
        unit = torch.tensor(unit_host, device=self.device)
        col = torch.tensor([k % g for k in ended], device=self.device)
        index = unit * g + cand.rows[unit, col]
        met = torch.ones_like(unit, dtype=torch.bool) if self.tracker is None else self.tracker.all_met(index)
        bonus = self._bonus(index)
        taken = torch.zeros_like(met, dtype=torch.float32) if bonus is None else bonus[0]
        values = torch.cat([rows.tokens[index, 1:].to(torch.float32),  # ids < 2^24: exact in float32
                            rows.logprobs[index], cand.logprob[unit, col][:, None].float(),
                            cand.scores[unit, col][:, None].float(), met[:, None].to(torch.float32),
                            taken[:, None].float()], dim=1)
        attn = None
        if rows.attention is not None:
            assert step_attn is not None  # rows keep attention when each step has it (attention_layer set)
            attn = torch.cat([rows.attention[index], step_attn[index][:, None]], dim=1).cpu()
        self.pending = EndedHypotheses(values, [self.units.source[u] for u in unit_host], step, attn)

    def _nbest(self, hyps: list[Hypothesis]) -> list[Hypothesis]:
        """The best `nbest` hypotheses, best first (stable for equal scores): distinct ones, except that
        samples are kept even where two coincide (`SearchConfig.distinct_nbest`); only those that met
        their constraints, when any did."""
        if any(h.constraints_met for h in hyps):
            hyps = [h for h in hyps if h.constraints_met]
        out: list[Hypothesis] = []
        seen: set[tuple[int, ...]] = set()
        for hyp in sorted(hyps, key=lambda h: -h.score):
            key = tuple(hyp.tokens)
            if key in seen and self.cfg.distinct_nbest:
                continue
            seen.add(key)
            out.append(hyp)
            if len(out) == self.cfg.nbest:
                break
        return out


def block_repeated_ngrams(lprobs: Tensor, generated: Tensor, n: int) -> None:
    """Set to -inf (in place) every token that would complete an n-gram already in the row.

    lprobs [B, V]; generated [B, t] tokens so far (t >= n).
    """
    windows = generated.unfold(1, n, 1)  # [B, t - n + 1, n]: every n-gram so far
    suffix = generated[:, generated.size(1) - n + 1 :]  # [B, n - 1]: what a new n-gram starts with
    match = (windows[:, :, :-1] == suffix[:, None, :]).all(dim=-1)  # [B, t - n + 1]
    hits = torch.zeros_like(lprobs).scatter_add_(1, windows[:, :, -1], match.to(lprobs.dtype))
    lprobs.masked_fill_(hits > 0, NEG_INF)
