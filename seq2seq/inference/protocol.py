"""What the search needs of a model (`SearchableModel`; `seq2seq.model.transformer.Seq2SeqTransformer`
is one) and of its parts. What the command line and the server need of an engine is the `Engine` base
class (`seq2seq.inference.engine`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar, cast, runtime_checkable


if TYPE_CHECKING:  # pragma: no cover

    from torch import Tensor

    from seq2seq.config.model_section import ModelConfig


S = TypeVar("S", contravariant=True)  # a batch of sources, as the model's encoder takes it
M = TypeVar("M")  # the encoder's output the decoder reads: memory [N, S, D], or a model's own (an ensemble's)
C = TypeVar("C", bound="DecodingCache")  # the decoder's key/value cache


class SourceLengths(Protocol[S]):
    """The part of an encoder the search uses (`seq2seq.model.encoders.base.Encoder` declares it)."""

    def source_lengths(self, src: S) -> Tensor | None: ...


class DecodingCache(Protocol):
    """A decoder's key/value cache (`seq2seq.model.transformer.DecoderCache`): its rows follow `index`, its
    sources `sources` (None: all stay; "infer": found from `index`)."""

    def reorder(self, index: Tensor, sources: Tensor | None | str = "infer") -> None: ...


@runtime_checkable
class SearchableModel(Protocol[S, M, C]):
    """What `seq2seq.inference.search.search` needs of a model (`Seq2SeqTransformer` has it all).

    encode(src) -> (memory [N, S, D], memory_pad_mask [N, S], True at padding); a model whose memory
    is not one tensor (an ensemble's, one per member) moves it with its own `reorder_memory(memory,
    index)` (`reorder_memory` below), and the search reads sizes from the pad mask only. decode(tgt, memory,
    memory_pad_mask, cache, attention_layer) -> (logits [B, T, V], cross-attention [B, T, S] or None);
    with a cache, tgt holds only the new positions and memory is read on the first call only.
    new_cache(group): an empty cache for rows grouped `group` per source. encoder.source_lengths(src):
    each source's length for the length limit (None: the memory's real positions count).
    cfg.max_positions: the decoder's positions (BOS + the generated tokens must fit). training, eval
    and train: as `nn.Module`'s (the search runs in eval mode). Rescoring with CTC (decoding.ctc_weight
    > 0) needs a `CTCModel`.
    """

    training: bool

    @property
    def encoder(self) -> SourceLengths[S]: ...

    @property
    def cfg(self) -> ModelConfig: ...

    def encode(self, src: S) -> tuple[M, Tensor]: ...

    def decode(self, tgt: Tensor, memory: M | None, memory_pad_mask: Tensor | None,
               cache: C | None = None, attention_layer: int | None = None) -> tuple[Tensor, Tensor | None]: ...

    def new_cache(self, group: int = 1) -> C: ...

    def eval(self) -> object: ...  # (what it returns is not read)

    def train(self, mode: bool = True) -> object: ...


def reorder_memory(model: SearchableModel[S, M, C], memory: M, index: Tensor) -> M:
    """The encoder output of the sources `index` [K] (repeats allowed: a source per beam row or sample):
    the model's own `reorder_memory(memory, index)` where it has one (an ensemble, whose members each
    keep their own memory: fairseq's `reorder_encoder_out`), else memory [N, S, D] -> [K, S, D]."""
    own = getattr(model, "reorder_memory", None)
    if own is not None:
        return own(memory, index)
    return cast(M, cast("Tensor", memory).index_select(0, index))  # a model without its own: memory is a tensor


class Projects(Protocol):
    """A decoder's output projection: states [..., D] -> logits [..., V]."""

    def project(self, x: Tensor) -> Tensor: ...


class CTCHead(Protocol):
    """A model whose decoder's output projection, applied to the memory, is its CTC head (what
    `seq2seq.inference.ctc` reads of a model)."""

    @property
    def decoder(self) -> Projects: ...


@runtime_checkable
class CTCModel(SearchableModel[S, M, C], CTCHead, Protocol[S, M, C]):
    """A `SearchableModel` with a CTC head (`CTCHead`; trained with training.ctc_weight > 0)."""
