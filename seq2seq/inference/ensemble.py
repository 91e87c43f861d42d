"""Ensemble decoding: several models that share a target vocabulary, searched as one model.

`EnsembleModel` is a `SearchableModel` (seq2seq.inference.protocol), so every search (greedy, beam,
sampling, n-best, length penalty, prefixes and constraints) runs on it unchanged. At each step each
member predicts the next token from its own source encoding and its own key/value cache, and the
ensemble's distribution is the weighted mean of the members' **probabilities**:

    log p(y | ...) = log sum_m w_m p_m(y | ...)        (w_m >= 0, sum 1; `combine="prob"`, the default)

or, with `combine="logprob"`, the normalised weighted mean of their log-probabilities (a product of
experts: log p = log_softmax(sum_m w_m log p_m)). fairseq and Marian average probabilities and
log-probabilities respectively; benchmarks/README.md measures both on Multi30K.

Sources may be tokenized differently per member: `EnsembleProcessor` prepares each source once per
member (a tuple of examples) and collates a tuple of batches, one per member. The search sees one
memory tensor: the members' encoder outputs, padded to the longest and concatenated along the
feature axis, followed by one channel per member holding that member's padding mask, so the loop's
own bookkeeping (repeating a source for samples, dropping finished units) moves every member's memory
and mask together. The pad mask the search sees, the source lengths and the cross-attention
(`attention_layer`: alignments, heatmaps) are the **first member's**.

Shapes: N sources, S the longest member memory, D_m member m's width, M members, B decoder rows.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.model.encoders.base import SourceProcessor

COMBINE = ("prob", "logprob")


class EnsembleCache:
    """The members' key/value caches, reordered together."""

    def __init__(self, caches: list[Any]) -> None:
        self.members = caches

    def reorder(self, index: Tensor, sources: Tensor | None | str = "infer") -> None:
        for cache in self.members:
            cache.reorder(index, sources)


class _FirstMemberLengths(nn.Module):
    """The ensemble's `encoder.source_lengths`: the first member's, from its part of the src tuple."""

    def __init__(self, first: nn.Module) -> None:
        super().__init__()
        self.first = first

    def source_lengths(self, src: Sequence[Any]) -> Tensor | None:
        return self.first.encoder.source_lengths(src[0])


class EnsembleModel(nn.Module):
    """members: models sharing the target vocabulary and special ids; weights: one per member (None:
    equal), normalised to sum 1; combine: "prob" or "logprob" (see the module docstring)."""

    def __init__(self, members: Sequence[nn.Module], weights: Sequence[float] | None = None,
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
        total = sum(weights)
        self.weights = [w / total for w in weights]
        self.combine = combine
        self.encoder = _FirstMemberLengths(members[0])
        self.cfg = copy.copy(members[0].cfg)
        self.cfg.max_positions = min(m.cfg.max_positions for m in members)  # BOS + tokens fit every member
        self._widths: list[int] = []

    def encode(self, src: Sequence[Any]) -> tuple[Tensor, Tensor]:
        """src: one batch per member -> (memory [N, S, sum D_m + M], the first member's pad mask [N, S])."""
        outs = [m.encode(s) for m, s in zip(self.members, src)]
        longest = max(memory.size(1) for memory, _ in outs)
        memories, masks = [], []
        for memory, mask in outs:
            extra = longest - memory.size(1)
            memories.append(F.pad(memory, (0, 0, 0, extra)))
            masks.append(F.pad(mask, (0, extra), value=True))
        self._widths = [memory.size(2) for memory in memories]
        dtype = memories[0].dtype
        channels = torch.stack(masks, dim=-1).to(dtype)  # [N, S, M], 1.0 at padding
        return torch.cat([*[m.to(dtype) for m in memories], channels], dim=-1), masks[0]

    def _split(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        """The packed memory [.., S, sum D_m + M] -> each member's (memory, pad mask)."""
        parts = list(memory.split([*self._widths, len(self.members)], dim=-1))
        channels = parts.pop()
        return [(part, channels[..., i] > 0.5) for i, part in enumerate(parts)]

    def decode(self, tgt: Tensor, memory: Tensor | None, memory_pad_mask: Tensor | None, cache: Any = None,
               attention_layer: int | None = None) -> tuple[Tensor, Tensor | None]:
        """tgt [B, T] -> (the ensemble's log-probabilities [B, T, V], the first member's cross-attention)."""
        parts = self._split(memory) if memory is not None else [(None, None)] * len(self.members)
        caches = cache.members if cache is not None else [None] * len(self.members)
        mixed, attention = None, None
        for i, (member, (mem, mask), member_cache, weight) in enumerate(zip(self.members, parts, caches, self.weights)):
            logits, attn = member.decode(tgt, mem, mask, member_cache, attention_layer if i == 0 else None)
            lprobs = F.log_softmax(logits.float(), dim=-1)
            if i == 0:
                attention = attn
            if self.combine == "prob":
                term = lprobs + math.log(weight) if weight > 0 else torch.full_like(lprobs, float("-inf"))
                mixed = term if mixed is None else torch.logaddexp(mixed, term)
            else:
                mixed = weight * lprobs if mixed is None else mixed + weight * lprobs
        if self.combine == "logprob":
            mixed = F.log_softmax(mixed, dim=-1)
        return mixed, attention

    def new_cache(self, group: int = 1) -> EnsembleCache:
        return EnsembleCache([m.new_cache(group) for m in self.members])


class EnsembleProcessor(SourceProcessor):
    """The members' source processors, applied side by side: an example is a tuple with one example per
    member, a batch a tuple with one batch per member. Lengths, descriptions and attention views are
    the first member's; a source one member cannot prepare (an empty line) has no example."""

    def __init__(self, processors: Sequence[SourceProcessor]) -> None:
        self.processors = list(processors)
        first = self.processors[0]
        self.kind = first.kind
        self.sample_rate = first.sample_rate
        self.max_seconds = first.max_seconds
        limits = [p.encoder_seconds for p in self.processors if p.encoder_seconds is not None]
        self.encoder_seconds = min(limits) if limits else None

    def _each(self, method: str, *args: Any) -> tuple[Any, ...]:
        return tuple(getattr(p, method)(*args) for p in self.processors)

    def probe(self, path: str) -> Any:
        return self.processors[0].probe(path)

    def check_limits(self, path: str, limits: Any, name: str | None = None) -> None:
        for p in self.processors:
            p.check_limits(path, limits, name)

    def load(self, path: str) -> tuple[Any, ...]:
        return self._each("load", path)

    def without_length_limit(self) -> EnsembleProcessor:
        return EnsembleProcessor([p.without_length_limit() for p in self.processors])

    def split(self, example: tuple[Any, ...], max_seconds: float) -> Any:
        return self.processors[0].split(example[0], max_seconds)

    def crop(self, example: tuple[Any, ...], window: Any) -> tuple[Any, ...]:
        return tuple(p.crop(x, window) for p, x in zip(self.processors, example))

    def bind(self, tokenizer: Any, max_positions: int) -> None:
        raise RuntimeError("bind each member's processor on its own")

    def prepare(self, sources: Sequence[str], first_line: int = 1, warn: Callable[[str], None] | None = None,
                skipped: dict[int, str] | None = None) -> dict[int, tuple[Any, ...]]:
        first = self.processors[0].prepare(sources, first_line, warn, skipped)
        # the others see only what the first prepared: no second warning or skip for the same source
        keys = sorted(first)
        rest = [p.prepare([sources[k] for k in keys], 1, None, None) for p in self.processors[1:]]
        return {k: (first[k], *(r[j] for r in rest)) for j, k in enumerate(keys) if all(j in r for r in rest)}

    def describe(self, source: str, example: tuple[Any, ...]) -> dict[str, Any]:
        return self.processors[0].describe(source, example[0])

    def length(self, example: tuple[Any, ...]) -> int:
        return max(p.length(x) for p, x in zip(self.processors, example))

    def collate(self, examples: Sequence[tuple[Any, ...]]) -> tuple[Any, ...]:
        return tuple(p.collate([x[i] for x in examples]) for i, p in enumerate(self.processors))

    def attention_view(self, example: tuple[Any, ...]) -> Any:
        return self.processors[0].attention_view(example[0])


def check_members(loaded: Sequence[Any]) -> None:
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
