"""Ensemble decoding: several models that share a target vocabulary, searched as one model.

`EnsembleModel` is a `SearchableModel` (seq2seq.inference.protocol), so every search (greedy, beam,
sampling, n-best, length penalty, and steering: docs/decoding-controls.md) runs on it unchanged. At each step each
member predicts the next token from its own source encoding and its own key/value cache, and the
ensemble's distribution is the weighted mean of the members' **probabilities**:

    log p(y | ...) = log sum_m w_m p_m(y | ...)        (w_m >= 0, sum 1; `combine="prob"`, the default)

or, with `combine="logprob"`, the normalised weighted mean of their log-probabilities (a product of
experts: log p = log_softmax(sum_m w_m log p_m)). fairseq and Marian average probabilities and
log-probabilities respectively; benchmarks/README.md measures both on Multi30K.

Sources may be tokenized differently per member: `EnsembleProcessor` prepares each source once per
member (a tuple of examples) and collates a tuple of batches, one per member; a source a member
cannot prepare is refused naming the member and the input. Each member keeps its own state: its
memory and padding mask (`EnsembleMemory`, moved by the search through `reorder_memory`, as fairseq's
`reorder_encoder_out`) and its key/value cache (`EnsembleCache`). The pad mask the search sees, the
source lengths and the cross-attention (`attention_layer`: alignments, heatmaps) are the **first
member's**. Rescoring with CTC (decoding.ctc_weight) mixes the members' CTC heads as their steps are
mixed (`EnsembleCTC`): every member needs one.

Shapes: N sources, S_m member m's memory length, D_m its width, M members, B decoder rows.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.config.diagnostics import Warn
from seq2seq.inference.ctc import CTCScorer
from seq2seq.model.encoders.sources import (AttentionView, SourceError, SourceInfo, SourceLimits,
                                            SourceProcessor, WindowedSource)
from seq2seq.model.transformer import DecoderCache, Seq2SeqTransformer

if TYPE_CHECKING:  # pragma: no cover
    from seq2seq.model.encoders.audio_windows import Window
    from seq2seq.storage.model_dir import LoadedModel
    from seq2seq.text.tokenizer import Tokenizer

COMBINE = ("prob", "logprob")


class EnsembleCache:
    """The members' key/value caches, reordered together."""

    def __init__(self, caches: list[DecoderCache]) -> None:
        self.members = caches

    def reorder(self, index: Tensor, sources: Tensor | None | str = "infer") -> None:
        for cache in self.members:
            cache.reorder(index, sources)


EnsembleMemory = list[tuple[Tensor, Tensor]]  # each member's (memory [N, S_m, D_m], pad mask [N, S_m])


class EnsembleCTC:
    """The members' CTC scorers mixed with the ensemble's weights: a hypothesis's log-likelihood is
    log sum_m w_m P_m ("prob") or sum_m w_m log P_m ("logprob"); every member's best path is a candidate."""

    def __init__(self, scorers: Sequence[CTCScorer], weights: Sequence[float], combine: str) -> None:
        self.scorers, self.weights, self.combine = list(scorers), list(weights), combine

    def best_paths(self) -> list[list[list[int]]]:
        each = [scorer.best_paths() for scorer in self.scorers]
        return [[path for member in each for path in member[source]] for source in range(len(each[0]))]

    def log_likelihood(self, sources: list[int], hyps: list[list[int]]) -> list[float]:
        per_member = [scorer.log_likelihood(sources, hyps) for scorer in self.scorers]
        out = []
        for values in zip(*per_member):
            used = [(w, v) for w, v in zip(self.weights, values) if w > 0]
            if self.combine == "prob":
                terms = [math.log(w) + v for w, v in used if v > -math.inf]
                top = max(terms, default=-math.inf)
                out.append(top + math.log(sum(math.exp(t - top) for t in terms)) if terms else -math.inf)
            else:
                out.append(sum(w * v for w, v in used) if all(v > -math.inf for _, v in used) else -math.inf)
        return out


class _FirstMemberLengths(nn.Module):
    """The ensemble's `encoder.source_lengths`: the first member's, from its part of the src tuple."""

    def __init__(self, first: Seq2SeqTransformer) -> None:
        super().__init__()
        self.first = first

    def source_lengths(self, src: Sequence[object]) -> Tensor | None:
        return self.first.encoder.source_lengths(src[0])


class EnsembleModel(nn.Module):
    """members: models sharing the target vocabulary and special ids; weights: one per member (None:
    equal), normalised to sum 1; combine: "prob" or "logprob" (see the module docstring)."""

    def __init__(self, members: Sequence[Seq2SeqTransformer], weights: Sequence[float] | None = None,
                 combine: str = "prob") -> None:
        super().__init__()
        if len(members) < 2:
            raise ValueError("an ensemble needs at least two models")
        if combine not in COMBINE:
            raise ValueError(f"combine must be one of {COMBINE}, got {combine!r}")
        weights = list(weights) if weights is not None else [1.0] * len(members)
        if len(weights) != len(members):
            raise ValueError(f"{len(weights)} ensemble weights for {len(members)} models; give one per model")
        if any(not math.isfinite(w) or w < 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(f"ensemble weights must be >= 0 and not all 0, got {weights}")
        self.members = nn.ModuleList(members)
        self.models = list(members)  # the same, typed (`members` registers them)
        total = sum(weights)
        self.weights = [w / total for w in weights]
        self.combine = combine
        self.encoder = _FirstMemberLengths(members[0])
        # the first member's config, with the positions that fit every member (BOS + tokens)
        self.cfg = dataclasses.replace(members[0].cfg, max_positions=min(m.cfg.max_positions for m in members))

    def encode(self, src: Sequence[object]) -> tuple[EnsembleMemory, Tensor]:
        """src: one batch per member -> (each member's (memory, pad mask), the first member's pad mask [N, S_0])."""
        memory = [m.encode(s) for m, s in zip(self.models, src)]
        return memory, memory[0][1]

    @staticmethod
    def reorder_memory(memory: EnsembleMemory, index: Tensor) -> EnsembleMemory:
        """Every member's memory and pad mask of the sources `index` [K] (the search's reorder hook)."""
        return [(m.index_select(0, index), mask.index_select(0, index)) for m, mask in memory]

    def ctc_scorer(self, memory: EnsembleMemory, memory_pad_mask: Tensor, blank: int) -> EnsembleCTC:
        """The members' CTC heads mixed (`EnsembleCTC`); each member reads its own memory."""
        return EnsembleCTC([CTCScorer(m, mem, mask, blank) for m, (mem, mask) in zip(self.models, memory)],
                           self.weights, self.combine)

    def decode(self, tgt: Tensor, memory: EnsembleMemory | None, memory_pad_mask: Tensor | None,
               cache: EnsembleCache | None = None,
               attention_layer: int | None = None) -> tuple[Tensor, Tensor | None]:
        """tgt [B, T] -> (the ensemble's log-probabilities [B, T, V], the first member's cross-attention)."""
        parts: Sequence[tuple[Tensor | None, Tensor | None]] = memory if memory is not None else \
            [(None, None)] * len(self.models)
        caches: Sequence[DecoderCache | None] = cache.members if cache is not None else [None] * len(self.models)
        runs = zip(self.models, parts, caches, self.weights)
        member, (mem, mask), member_cache, weight = next(runs)  # the first member's attention
        logits, attention = member.decode(tgt, mem, mask, member_cache, attention_layer)
        mixed = self._term(logits, weight)
        for member, (mem, mask), member_cache, weight in runs:
            logits, _ = member.decode(tgt, mem, mask, member_cache, None)
            term = self._term(logits, weight)
            mixed = torch.logaddexp(mixed, term) if self.combine == "prob" else mixed + term
        if self.combine == "logprob":
            mixed = F.log_softmax(mixed, dim=-1)
        return mixed, attention

    def _term(self, logits: Tensor, weight: float) -> Tensor:
        """A member's log-probabilities from its logits, weighted for mixing: log w + log p ("prob"; -inf for
        w = 0), w log p ("logprob")."""
        lprobs = F.log_softmax(logits.float(), dim=-1)
        if self.combine == "prob":
            return lprobs + math.log(weight) if weight > 0 else torch.full_like(lprobs, float("-inf"))
        return weight * lprobs

    def new_cache(self, group: int = 1) -> EnsembleCache:
        return EnsembleCache([m.new_cache(group) for m in self.models])


class EnsembleProcessor(SourceProcessor):
    """The members' source processors, applied side by side: an example is a tuple with one example per
    member, a batch a tuple with one batch per member. Lengths, descriptions and attention views are
    the first member's; a source the first member does not prepare (an empty line) has no example, and
    one it prepares that another member cannot is refused (SourceError naming the member and the input).
    names: how messages call the members (their model directories; default "member 2", ...)."""

    def __init__(self, processors: Sequence[SourceProcessor], names: Sequence[str] | None = None) -> None:
        self.processors = list(processors)
        self.names = list(names) if names is not None else [f"member {i + 1}" for i in range(len(self.processors))]
        first = self.processors[0]
        self.kind = first.kind
        self.sample_rate = first.sample_rate
        self.max_seconds = first.max_seconds
        limits = [p.encoder_seconds for p in self.processors if p.encoder_seconds is not None]
        self.encoder_seconds = min(limits) if limits else None

    def _each(self, method: str, *args: object) -> tuple[object, ...]:
        return tuple(getattr(p, method)(*args) for p in self.processors)

    def probe(self, path: str) -> SourceInfo | None:
        return self.processors[0].probe(path)

    def check_limits(self, path: str, limits: SourceLimits, name: str | None = None) -> None:
        for p in self.processors:
            p.check_limits(path, limits, name)

    def load(self, path: str) -> tuple[object, ...]:
        return self._each("load", path)

    def without_length_limit(self) -> EnsembleProcessor:
        return EnsembleProcessor([p.without_length_limit() for p in self.processors], self.names)

    def _windowed(self) -> list[WindowedSource]:
        """The members' processors as `WindowedSource`s (TypeError for members that decode sources whole)."""
        found: list[WindowedSource] = [p for p in self.processors if isinstance(p, WindowedSource)]
        if len(found) < len(self.processors):
            raise TypeError(f"the members read {self.kind.name} sources, which are not split into windows")
        return found

    def split(self, example: tuple[object, ...], max_seconds: float) -> list[Window]:
        return self._windowed()[0].split(example[0], max_seconds)

    def crop(self, example: tuple[object, ...], window: Window) -> tuple[object, ...]:
        return tuple(p.crop(x, window) for p, x in zip(self._windowed(), example))

    def bind(self, tokenizer: Tokenizer | None, max_positions: int) -> None:
        raise RuntimeError("bind each member's processor on its own")

    def prepare(self, sources: Sequence[str], first_line: int = 1, warn: Warn | None = None,
                skipped: dict[int, str] | None = None) -> dict[int, tuple[object, ...]]:
        first = self.processors[0].prepare(sources, first_line, warn, skipped)
        # the others see only what the first prepared: no second warning or skip for the same source
        keys = sorted(first)
        rest = [p.prepare([sources[k] for k in keys], 1, None, None) for p in self.processors[1:]]
        for m, prepared in enumerate(rest, 1):
            for j, k in enumerate(keys):
                if j not in prepared:
                    raise SourceError(f"the ensemble's {self.names[m]} cannot read this source, which "
                                      f"{self.names[0]} reads; decode it with the models apart",
                                      line=first_line + k, code="member_cannot_read")
        return {k: (first[k], *(r[j] for r in rest)) for j, k in enumerate(keys)}

    def describe(self, source: str, example: tuple[object, ...]) -> dict[str, object]:
        return self.processors[0].describe(source, example[0])

    def length(self, example: tuple[object, ...]) -> int:
        return max(p.length(x) for p, x in zip(self.processors, example))

    def collate(self, examples: Sequence[tuple[object, ...]]) -> tuple[object, ...]:
        return tuple(p.collate([x[i] for x in examples]) for i, p in enumerate(self.processors))

    def attention_view(self, example: tuple[object, ...]) -> AttentionView | None:
        return self.processors[0].attention_view(example[0])


def check_members(loaded: Sequence[LoadedModel]) -> None:
    """ValueError naming the first difference that keeps `loaded` (LoadedModels) from decoding as one
    ensemble: the target tokenizer, the target vocabulary size, the special ids, the kind of source, where the
    language tag goes."""
    from seq2seq.model.encoders.base import source_kind
    from seq2seq.text.languages import tags_on_decoder

    first = loaded[0]
    for other in loaded[1:]:
        where = f"{other.path} and {first.path}"
        if other.tokenizers.tgt.model_proto != first.tokenizers.tgt.model_proto:
            raise ValueError(f"{where} have different target tokenizers; ensemble members must share one")
        if other.config.model.tgt_vocab_size != first.config.model.tgt_vocab_size:
            raise ValueError(f"{where} have different target vocabularies ({other.config.model.tgt_vocab_size} "
                             f"and {first.config.model.tgt_vocab_size} pieces)")
        for name in ("bos_id", "eos_id", "pad_id"):
            a, b = getattr(other.config.decoding, name), getattr(first.config.decoding, name)
            if a != b:
                raise ValueError(f"{where} have different decoding.{name} ({a} and {b})")
        ka, kb = source_kind(other.config.model.encoder), source_kind(first.config.model.encoder)
        if ka != kb:
            raise ValueError(f"{where} read different kinds of source ({ka.name} and {kb.name})")
        ta, tb = tags_on_decoder(other.config), tags_on_decoder(first.config)
        if ta != tb:
            raise ValueError(f"{where} put the language tag in different places (data.language_tag "
                             f"{'decoder' if ta else 'source'} and {'decoder' if tb else 'source'})")
