"""Decoding: greedy, beam and sampling search over an encoder-decoder model.

One loop (`_Search`) owns everything the strategies share: incremental decoding with the model's
key/value cache, the length limits, the n-gram block, finishing hypotheses, length-penalised
scoring and removing finished sentences from the batch. A strategy only decides which
(row, token) pairs continue:

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
* `score = logprob / ((5 + L) / 6) ** lenpen` (GNMT length penalty); beam search ranks finished
  hypotheses by it, and the n-best lists of every strategy are sorted by it.

Length limits, per sentence: max_len = min(floor(max_len_a * src_len + max_len_b), cfg.max_len,
model.cfg.max_positions - 1), src_len from `model.encoder.source_lengths(src)`. EOS is forbidden
while fewer than `min_len` tokens have been generated and forced once `max_len` tokens have been
(so at most max_len tokens; max_len wins over min_len when they conflict). PAD and BOS are never
generated.

Batch invariance: every decision (lengths, finishing, early stopping) is made per unit from that
unit's rows alone, so a sentence's greedy or beam result does not depend on the other sentences of
the batch or on their padding (up to floating-point noise of batched matmuls). Sampling is
reproducible for a given batch and seed, but its random draws depend on the batch composition.

Shapes: N sources, U active units, g rows per unit, B = U * g decoder rows, V vocabulary,
S padded source length, t tokens generated so far.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.config.search import SearchConfig
from seq2seq.inference.ctc import attention_log_probs, ctc_best_path, ctc_log_likelihood, ctc_log_probs

NEG_INF = float("-inf")


@dataclass
class Hypothesis:
    """One output sequence.

    tokens: generated ids without BOS and EOS. token_logprobs: the log-probability of each token
    and of the final EOS (len(tokens) + 1 values). logprob: their sum. score: logprob with the
    length penalty (see the module docstring), or with decoding.ctc_weight w the mix
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


class Candidates(NamedTuple):
    """A strategy's proposals for each unit, [U, C] each; C > g means sorted best first."""

    rows: Tensor  # row within the unit's group that is extended
    tokens: Tensor  # the token appended
    logprob: Tensor  # its log-probability
    scores: Tensor  # the cumulative log-probability of the extended hypothesis


# --------------------------------------------------------------------------------------------
# Strategies: which (row, token) pairs continue
# --------------------------------------------------------------------------------------------


class Strategy:
    """Chooses continuations. `group` rows per unit, `units_per_source` units per source,
    `candidates` proposals per unit (== group: one per row; > group: sorted, beam-style)."""

    group: int = 1
    units_per_source: int = 1
    candidates: int = 1

    def initial_scores(self, units: int, device: torch.device) -> Tensor:
        """Cumulative log-probabilities of the B = units * group rows before the first step."""
        return torch.zeros(units * self.group, device=device)

    def select(self, lprobs: Tensor, scores: Tensor) -> Candidates:
        """lprobs [B, V] (constrained log-probabilities), scores [B] -> Candidates [U, C]."""
        raise NotImplementedError


class Greedy(Strategy):
    """Each row takes its arg-max token."""

    def select(self, lprobs: Tensor, scores: Tensor) -> Candidates:
        logprob, tokens = lprobs.max(dim=-1, keepdim=True)  # [B, 1]
        return Candidates(torch.zeros_like(tokens), tokens, logprob, scores[:, None] + logprob)


class Beam(Strategy):
    """The 2 * beam best extensions of each sentence's beam (of beam * V), best first."""

    def __init__(self, beam: int) -> None:
        self.group = beam
        self.candidates = 2 * beam

    def initial_scores(self, units: int, device: torch.device) -> Tensor:
        # Only the first row of a beam is live at first, or the beam would hold `beam` copies.
        scores = torch.full((units, self.group), NEG_INF, device=device)
        scores[:, 0] = 0.0
        return scores.view(-1)

    def select(self, lprobs: Tensor, scores: Tensor) -> Candidates:
        b, v = lprobs.shape
        flat = (lprobs + scores[:, None]).view(b // self.group, self.group * v)
        top, index = flat.topk(min(self.candidates, flat.size(1)), dim=1)  # sorted, [U, C]
        rows = torch.div(index, v, rounding_mode="floor")
        logprob = lprobs.view_as(flat).gather(1, index)
        return Candidates(rows, index - rows * v, logprob, top)


class Sample(Strategy):
    """Each row samples from the filtered distribution softmax(lprobs / temperature)."""

    def __init__(self, cfg: SearchConfig, device: torch.device) -> None:
        self.units_per_source = cfg.nbest
        self.topk, self.topp, self.temperature = cfg.topk, cfg.topp, cfg.temperature
        self.generator = torch.Generator(device=device)
        if cfg.seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(cfg.seed)

    def select(self, lprobs: Tensor, scores: Tensor) -> Candidates:
        logits = lprobs if self.temperature == 1.0 else lprobs / self.temperature
        if 0 < self.topk < logits.size(-1):
            kth = logits.topk(self.topk, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, NEG_INF)
        if self.topp < 1.0:
            logits = top_p_filter(logits, self.topp)
        tokens = torch.multinomial(logits.softmax(dim=-1), 1, generator=self.generator)  # [B, 1]
        logprob = lprobs.gather(1, tokens)
        return Candidates(torch.zeros_like(tokens), tokens, logprob, scores[:, None] + logprob)


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Keep the smallest set of most likely tokens whose probability reaches p (at least one).

    logits [B, V] -> [B, V] with the others set to -inf.
    """
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # mass of the more likely tokens
    sorted_logits = sorted_logits.masked_fill(before >= p, NEG_INF)
    return torch.full_like(logits, NEG_INF).scatter(1, order, sorted_logits)


def make_strategy(cfg: SearchConfig, device: torch.device) -> Strategy:
    if cfg.strategy == "greedy":
        return Greedy()
    if cfg.strategy == "beam":
        return Beam(cfg.beam)
    return Sample(cfg, device)


def block_repeated_ngrams(lprobs: Tensor, generated: Tensor, n: int) -> None:
    """Set to -inf (in place) every token that would complete an n-gram already in the row.

    lprobs [B, V]; generated [B, t] tokens so far (t >= n).
    """
    windows = generated.unfold(1, n, 1)  # [B, t - n + 1, n]: every n-gram so far
    suffix = generated[:, generated.size(1) - n + 1 :]  # [B, n - 1]: what a new n-gram starts with
    match = (windows[:, :, :-1] == suffix[:, None, :]).all(dim=-1)  # [B, t - n + 1]
    hits = torch.zeros_like(lprobs).scatter_add_(1, windows[:, :, -1], match.to(lprobs.dtype))
    lprobs.masked_fill_(hits > 0, NEG_INF)


def length_penalty(length: int, alpha: float) -> float:
    """GNMT: ((5 + length) / 6) ** alpha."""
    return ((5.0 + length) / 6.0) ** alpha


# --------------------------------------------------------------------------------------------
# The loop's state: per unit and per decoder row, each narrowed by one `select`
# --------------------------------------------------------------------------------------------


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
        """Each row extended by one token [B] with its log-probability [B] and cross-attention [B, S]."""
        return Rows(
            torch.cat([self.tokens, tokens.view(-1, 1)], dim=1),
            torch.cat([self.logprobs, logprob.view(-1, 1)], dim=1),
            None if self.attention is None else torch.cat([self.attention, attention[:, None]], dim=1),
        )


# --------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------


def search(model: nn.Module, src: Any, cfg: SearchConfig, *, use_cache: bool = True) -> list[list[Hypothesis]]:
    """Decode a batch: src (whatever `model.encode` takes, N sources) -> N n-best lists.

    Each list holds up to `cfg.nbest` distinct hypotheses sorted by score, best first (fewer only
    when constraints or a tiny vocabulary leave fewer finite-probability sequences, or when
    samples coincide). `use_cache=False` recomputes the whole prefix at every step instead of
    using the key/value cache (slow; for testing). The model is run in eval mode and restored.
    """
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            return _Search(model, cfg, use_cache).run(src)
    finally:
        model.train(was_training)


class _Search:
    """State of one `search` call; see the module docstring for the vocabulary."""

    def __init__(self, model: nn.Module, cfg: SearchConfig, use_cache: bool) -> None:
        self.model, self.cfg, self.use_cache = model, cfg, use_cache
        self.exact = cfg.strategy == "beam" and not cfg.early_stopping

    def _max_lengths(self, src: Any, pad_mask: Tensor) -> list[int]:
        encoder = getattr(self.model, "encoder", None)
        lengths = encoder.source_lengths(src) if hasattr(encoder, "source_lengths") else None
        if lengths is None:
            lengths = (~pad_mask).sum(dim=1)
        cap = math.inf if self.cfg.max_len is None else self.cfg.max_len
        positions = getattr(getattr(self.model, "cfg", None), "max_positions", None)
        if positions is not None:
            cap = min(cap, positions - 1)  # BOS + max_len tokens must fit in the positions
        a, b = self.cfg.max_len_a, self.cfg.max_len_b
        return [max(0, int(min(math.floor(a * n + b + 1e-6), cap))) for n in lengths.tolist()]

    def run(self, src: Any) -> list[list[Hypothesis]]:
        cfg, model = self.cfg, self.model
        memory, pad_mask = model.encode(src)  # [N, S, D], [N, S]
        encoded = memory, pad_mask
        n_src, device = memory.size(0), memory.device
        if n_src == 0:
            return []
        self.device = device
        self.real_positions = [(~row).nonzero().squeeze(1) for row in pad_mask.cpu()]
        self.strategy = strategy = make_strategy(cfg, device)
        g = self.group = strategy.group
        per = strategy.units_per_source
        if per > 1:  # independent samples: one unit (and cross-attention entry) each
            memory, pad_mask = memory.repeat_interleave(per, 0), pad_mask.repeat_interleave(per, 0)
        self._aranges: dict[int, Tensor] = {}
        self.units = self._init_units([m for m in self._max_lengths(src, pad_mask) for _ in range(per)], per)
        self.blocked = torch.tensor(sorted({cfg.pad_id, cfg.bos_id} - {cfg.eos_id}), device=device)
        self.finished: list[list[Hypothesis]] = [[] for _ in range(n_src)]

        b = len(self.units.source) * g
        rows = Rows(
            tokens=torch.full((b, 1), cfg.bos_id, dtype=torch.long, device=device),
            logprobs=torch.zeros(b, 0, device=device),
            attention=None if cfg.attention_layer is None else torch.zeros(b, 0, memory.size(1), device=device),
        )
        scores = strategy.initial_scores(len(self.units.source), device)  # [B] cumulative log-probabilities
        cache = model.new_cache(group=g) if self.use_cache else None

        for step in range(max(self.units.max_host) + 1):
            # 1. next-token log-probabilities (and cross-attention [B, S]) of every row
            if cache is not None:  # only the new token; memory is read on the first step only
                first = step == 0
                inputs = (rows.tokens[:, -1:], memory if first else None, pad_mask if first else None, cache)
            else:  # the whole prefix, memory repeated per row
                inputs = (rows.tokens, memory.repeat_interleave(g, 0), pad_mask.repeat_interleave(g, 0), None)
            logits, step_attn = model.decode(*inputs, attention_layer=cfg.attention_layer)
            lprobs = F.log_softmax(logits[:, -1].float(), dim=-1)  # [B, V]
            if step_attn is not None:
                step_attn = step_attn[:, -1].float()
            self._constrain(lprobs, rows.tokens, step)

            # 2. the strategy proposes; the loop finishes hypotheses and decides which units are done
            cand = strategy.select(lprobs, scores)
            eos = cand.tokens == cfg.eos_id  # [U, C]
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
            flags = torch.cat([done, final.any().view(1)]).tolist()  # the step's one host sync
            done_host, any_final = flags[:-1], flags[-1]
            if any_final:
                self._finalize(cand, final, step, rows, step_attn)
            if all(done_host):
                break

            # 3. advance: drop finished units, move rows to their parents, append the new tokens
            index = None
            if any(done_host):
                keep_host = [i for i, d in enumerate(done_host) if not d]
                kept = torch.tensor(keep_host, device=device)
                cont = Candidates(*(x.index_select(0, kept) for x in cont))
                self.units = self.units.select(kept, keep_host)
                if cache is None:
                    memory, pad_mask = memory.index_select(0, kept), pad_mask.index_select(0, kept)
                index = (kept[:, None] * g + cont.rows).view(-1)  # [B']
            elif n_cand > g:
                index = (self._arange(cont.rows.size(0))[:, None] * g + cont.rows).view(-1)
            if index is not None:  # (greedy and sampling rows stay in place until a unit ends)
                if cache is not None:
                    cache.reorder(index)
                rows = rows.select(index)
                if step_attn is not None:
                    step_attn = step_attn.index_select(0, index)
            rows = rows.append(cont.tokens, cont.logprob, step_attn)
            scores = cont.scores.view(-1)

        if cfg.ctc_weight > 0:
            self._rescore_with_ctc(*encoded)
        return [self._nbest(hyps) for hyps in self.finished]

    def _rescore_with_ctc(self, memory: Tensor, pad_mask: Tensor) -> None:
        """decoding.ctc_weight: add each source's CTC best path to its finished hypotheses and score
        them all with attention and CTC together (see seq2seq.inference.ctc)."""
        cfg, w = self.cfg, self.cfg.ctc_weight
        log_probs = ctc_log_probs(self.model, memory)
        sources, paths = [], []
        for source, tokens in enumerate(ctc_best_path(log_probs, pad_mask, cfg.pad_id)):
            if len(tokens) >= cfg.min_len and all(h.tokens != tokens for h in self.finished[source]):
                sources.append(source)
                paths.append(tokens)
        scored = attention_log_probs(self.model, memory, pad_mask, sources, paths, cfg.bos_id, cfg.eos_id, cfg.pad_id,
                                     cfg.attention_layer)
        for source, tokens, (lps, attention) in zip(sources, paths, scored):
            if attention is not None:
                attention = attention[:, self.real_positions[source]]
            self.finished[source].append(Hypothesis(tokens, 0.0, sum(lps), lps, attention))
        pairs = [(source, h) for source, hyps in enumerate(self.finished) for h in hyps]
        ctc = ctc_log_likelihood(log_probs, pad_mask, [s for s, _ in pairs], [h.tokens for _, h in pairs], cfg.pad_id)
        for (_, h), value in zip(pairs, ctc):
            h.ctc_logprob = value
        for hyps in self.finished:
            if any(h.ctc_logprob > NEG_INF for h in hyps):  # else CTC can align none: attention stands
                for h in hyps:
                    combined = (1 - w) * h.logprob + w * h.ctc_logprob
                    h.score = combined / length_penalty(len(h.tokens) + 1, cfg.lenpen)

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
            units.max_penalty = torch.tensor([length_penalty(m + 1, self.cfg.lenpen) for m in max_lens], device=device)
        return units

    def _constrain(self, lprobs: Tensor, tokens: Tensor, step: int) -> None:
        """Apply (in place) PAD/BOS blocking, min_len, the n-gram block and the forced EOS at max_len.

        lprobs [B, V]; tokens [B, 1 + step] (BOS + generated).
        """
        cfg = self.cfg
        eos = cfg.eos_id
        force = step >= min(self.units.max_host)
        if force:
            raw_eos = lprobs[:, eos].clone()
        if self.blocked.numel():
            lprobs.index_fill_(1, self.blocked, NEG_INF)
        if step < cfg.min_len:
            lprobs[:, eos] = NEG_INF
        n = cfg.no_repeat_ngram
        if n and step >= n:
            block_repeated_ngrams(lprobs, tokens[:, 1:], n)
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
        alpha = self.cfg.lenpen
        ended = torch.where(final, cand.scores[:, : self.group] / length_penalty(step + 1, alpha), NEG_INF)
        units.best_finished = torch.cat([units.best_finished, ended], dim=1).topk(self.group, dim=1).values
        # The best score a live hypothesis could still reach: its log-probability only falls, so
        # only the length penalty can help, most at max_len when alpha > 0, else at the next step.
        penalty = units.max_penalty if alpha > 0 else length_penalty(step + 2, alpha)
        bound = cont.scores[:, 0] / penalty
        return (units.best_finished[:, -1] >= bound) | at_max

    def _finalize(
        self,
        cand: Candidates,
        final: Tensor,
        step: int,
        rows: Rows,
        step_attn: Tensor | None,
    ) -> None:
        """Turn the candidates marked in `final` [U, g] (EOS appended at `step`) into Hypotheses."""
        unit, col = final.nonzero(as_tuple=True)
        index = unit * self.group + cand.rows[unit, col]
        prefixes = rows.tokens[index, 1:].tolist()
        lps = torch.cat([rows.logprobs[index], cand.logprob[unit, col][:, None]], dim=1).tolist()
        totals = cand.scores[unit, col].tolist()
        attn = None
        if rows.attention is not None:
            attn = torch.cat([rows.attention[index], step_attn[index][:, None]], dim=1).cpu()
        penalty = length_penalty(step + 1, self.cfg.lenpen)
        for i, u in enumerate(unit.tolist()):
            source = self.units.source[u]
            self.finished[source].append(
                Hypothesis(
                    tokens=prefixes[i],
                    score=totals[i] / penalty,
                    logprob=totals[i],
                    token_logprobs=lps[i],
                    attention=None if attn is None else attn[i][:, self.real_positions[source]],
                )
            )

    def _nbest(self, hyps: list[Hypothesis]) -> list[Hypothesis]:
        """The best `nbest` distinct hypotheses, best first (stable for equal scores)."""
        out, seen = [], set()
        for hyp in sorted(hyps, key=lambda h: -h.score):
            key = tuple(hyp.tokens)
            if key not in seen:
                seen.add(key)
                out.append(hyp)
                if len(out) == self.cfg.nbest:
                    break
        return out
