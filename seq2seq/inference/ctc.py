"""Hybrid CTC/attention decoding: the n-best of the attention search rescored with the CTC head.

A model trained with `training.ctc_weight` > 0 has a CTC head for free: its encoder memory, projected
by the decoder's output weights (pad = blank), gives per-position token log-probabilities
(`seq2seq.training.loss.ctc_loss`). The attention decoder alone may skip or repeat a token while it
reads the right symbols (a digit string "81" read as "811"); CTC scores whole sequences against the
memory in order, so it tells such readings apart. With `decoding.ctc_weight` w > 0 each source's
candidates, the attention search's finished hypotheses plus the CTC greedy (best-path) reading, are
scored

    score = ((1 - w) * attention log-probability + w * CTC log-likelihood) / length penalty

(as ESPnet's joint decoding weighs the two, applied here to complete hypotheses: attention
rescoring in the manner of WeNet, with the CTC best path added to the candidates). A candidate that
CTC cannot align (more tokens than the memory has positions) scores -inf; when CTC can align none
of a source's candidates, the attention scores stand.

Shapes: memory [N, S, D], memory_pad_mask [N, S] (True = padding), V the target vocabulary.
"""

from __future__ import annotations

import math
from typing import Protocol, TypeVar, cast

import torch
import torch.nn.functional as F
from torch import Tensor

from seq2seq.config.search import SearchConfig
from seq2seq.inference.protocol import CTCHead, DecodingCache, SearchableModel, reorder_memory

S = TypeVar("S")  # a batch of sources (`SearchableModel`)
M = TypeVar("M")  # the encoder's output (`SearchableModel`)
C = TypeVar("C", bound=DecodingCache)  # the decoder's cache (`SearchableModel`)


def joint_logprob(attention_logprob: float, ctc_logprob: float, w: float) -> float:
    """A hypothesis's log-probability for its search score with decoding.ctc_weight w (the score is
    `seq2seq.inference.search.hypothesis_score` of it): (1 - w) * attention + w * CTC."""
    return (1 - w) * attention_logprob + w * ctc_logprob


def ctc_log_probs(model: CTCHead, memory: Tensor) -> Tensor:
    """Per-position token log-probabilities of the CTC head: [N, S, D] -> [N, S, V] (fp32)."""
    return F.log_softmax(model.decoder.project(memory).float(), dim=-1)


def ctc_best_path(log_probs: Tensor, memory_pad_mask: Tensor, blank: int) -> list[list[int]]:
    """The greedy CTC reading of each row: the most likely token per real position, repeats merged,
    blanks dropped. log_probs [N, S, V] -> N token lists."""
    best = log_probs.argmax(dim=-1).masked_fill(memory_pad_mask, blank).tolist()
    out = []
    for row in best:
        tokens, previous = [], blank
        for t in row:
            if t != blank and t != previous:
                tokens.append(t)
            previous = t
        out.append(tokens)
    return out


def ctc_log_likelihood(log_probs: Tensor, memory_pad_mask: Tensor, sources: list[int], hyps: list[list[int]],
                       blank: int) -> list[float]:
    """log P_CTC(hyps[i] | memory of source sources[i]) for each i (-inf where no alignment exists)."""
    if not hyps:
        return []
    index = torch.tensor(sources, device=log_probs.device)
    lp = log_probs.index_select(0, index).transpose(0, 1)  # [S, K, V]
    input_lengths = (~memory_pad_mask).sum(dim=1).index_select(0, index)
    target_lengths = torch.tensor([len(h) for h in hyps], device=log_probs.device)
    targets = torch.tensor([t for h in hyps for t in h], dtype=torch.long, device=log_probs.device)
    nll = F.ctc_loss(lp, targets, input_lengths, target_lengths, blank=blank, reduction="none", zero_infinity=False)
    return [-v if math.isfinite(v) else -math.inf for v in nll.tolist()]


class CTCScorer:
    """A batch's CTC head, read once: each source's best-path candidates and the log-likelihood of any
    hypothesis. memory [N, S, D], memory_pad_mask [N, S]. (An ensemble has its own scorer, mixing its
    members': `seq2seq.inference.ensemble.EnsembleCTC`.)"""

    def __init__(self, model: CTCHead, memory: Tensor, memory_pad_mask: Tensor, blank: int) -> None:
        self.log_probs = ctc_log_probs(model, memory)  # [N, S, V]
        self.pad_mask, self.blank = memory_pad_mask, blank

    def best_paths(self) -> list[list[list[int]]]:
        """Each source's candidate readings: its best path (`ctc_best_path`)."""
        return [[path] for path in ctc_best_path(self.log_probs, self.pad_mask, self.blank)]

    def log_likelihood(self, sources: list[int], hyps: list[list[int]]) -> list[float]:
        """log P_CTC(hyps[i] | source sources[i]) (`ctc_log_likelihood`)."""
        return ctc_log_likelihood(self.log_probs, self.pad_mask, sources, hyps, self.blank)


class CTCScoring(Protocol):
    """What the search reads of a batch's CTC scorer (`CTCScorer`, an ensemble's `EnsembleCTC`)."""

    def best_paths(self) -> list[list[list[int]]]: ...

    def log_likelihood(self, sources: list[int], hyps: list[list[int]]) -> list[float]: ...


def ctc_scorer(model: SearchableModel[S, M, C], memory: M, memory_pad_mask: Tensor, blank: int) -> CTCScoring:
    """The model's own scorer (`ctc_scorer(memory, pad_mask, blank)`: an ensemble's) or, for a `CTCModel`, a
    `CTCScorer`."""
    own = getattr(model, "ctc_scorer", None)
    if own is not None:
        return own(memory, memory_pad_mask, blank)
    # a model without its own scorer is a Seq2SeqTransformer, whose decoder projects (a CTCModel); one trained
    # without CTC is refused before any search (`SearchConfig.check_ctc_head`)
    return CTCScorer(cast(CTCHead, model), cast(Tensor, memory), memory_pad_mask, blank)


def attention_log_probs(model: SearchableModel[S, M, C], memory: M, memory_pad_mask: Tensor, sources: list[int],
                        hyps: list[list[int]], bos: int, eos: int, pad: int,
                        attention_layer: int | None = None) -> list[tuple[list[float], Tensor | None]]:
    """The attention decoder's log-probability of each token of hyps[i] and of the final EOS, by
    teacher forcing on the memory of source sources[i] (len(hyps[i]) + 1 values each), with that
    layer's head-averaged cross-attention [len(hyps[i]) + 1, S] when `attention_layer` is set."""
    if not hyps:
        return []
    device = memory_pad_mask.device
    index = torch.tensor(sources, device=device)
    longest = max(len(h) for h in hyps) + 1
    tgt_in = torch.full((len(hyps), longest), pad, dtype=torch.long, device=device)
    tgt_out = torch.full_like(tgt_in, pad)
    for i, h in enumerate(hyps):
        tgt_in[i, : len(h) + 1] = torch.tensor([bos, *h])
        tgt_out[i, : len(h) + 1] = torch.tensor([*h, eos])
    logits, attention = model.decode(tgt_in, reorder_memory(model, memory, index),
                                     memory_pad_mask.index_select(0, index), attention_layer=attention_layer)
    lps = F.log_softmax(logits.float(), dim=-1).gather(2, tgt_out[..., None]).squeeze(2)  # [K, T]
    return [(lps[i, : len(h) + 1].tolist(), None if attention is None else attention[i, : len(h) + 1].float().cpu())
            for i, h in enumerate(hyps)]


def best_paths(model: SearchableModel[S, M, C], memory: M, memory_pad_mask: Tensor, candidates: list[list[list[int]]],
               finished: list[list[list[int]]], cfg: SearchConfig
               ) -> list[tuple[int, list[int], list[float], Tensor | None]]:
    """The candidates CTC adds: each source's best paths (candidates[source], `CTCScorer.best_paths`)
    that have at least min_len tokens and are not among the source's finished hypotheses
    (finished[source]: their tokens) nor added already, scored by the attention decoder
    (`attention_log_probs`). (source, tokens, token log-probabilities, cross-attention
    [len(tokens) + 1, S] or None) each."""
    sources: list[int] = []
    paths: list[list[int]] = []
    for source, readings in enumerate(candidates):
        for tokens in readings:
            seen = finished[source] + [p for s, p in zip(sources, paths) if s == source]
            if len(tokens) >= cfg.min_len and all(h != tokens for h in seen):
                sources.append(source)
                paths.append(tokens)
    scored = attention_log_probs(model, memory, memory_pad_mask, sources, paths, cfg.bos_id, cfg.eos_id, cfg.pad_id,
                                 cfg.attention_layer)
    return [(source, tokens, lps, attention) for source, tokens, (lps, attention) in zip(sources, paths, scored)]
