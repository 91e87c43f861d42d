"""What the command line and the server need of a decoding engine (`TranslationEngine`), and what the
search needs of a model (`SearchableModel`).

The torch `Translator`, the `Generator`s built on it (`Captioner`, `Transcriber`) and the CTranslate2
engine (`seq2seq.deploy.engine.CTranslate2Translator`) all satisfy `TranslationEngine`;
tests/test_protocol.py checks each, by `isinstance` and by the signatures of the methods.
`seq2seq.model.transformer.Seq2SeqTransformer` is a `SearchableModel`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol, runtime_checkable

from seq2seq.config.search import SearchConfig
from seq2seq.inference.results import Translation

if TYPE_CHECKING:  # pragma: no cover
    from torch import Tensor

    from seq2seq.config.sections import ModelConfig


@runtime_checkable
class TranslationEngine(Protocol):
    """Sources in (texts, or files for an image or audio model), n-best `Translation`s out.

    defaults: the model's `decoding` config; search_config(**options) applies a call's search
    options to it (`seq2seq.inference.options.resolve_search`, plus what the engine cannot do),
    ValueError for a bad one; translate_nbest gives each source's n-best list in input order
    ([] for an empty or skipped source), translate each source's best text ("" for none). Steering
    (prefix, constraints, avoid, glossary: docs/decoding-controls.md) as `Translator.translate_nbest`
    takes it; what an engine cannot honour is refused with `SteeringError`, never dropped.
    """

    defaults: SearchConfig
    device: Any

    def search_config(self, **options: Any) -> SearchConfig: ...

    def translate_nbest(self, texts: list[str], batch_tokens: int = 4000, first_line: int = 1,
                        warn: Callable[[str], None] | None = None, *, prefix: Any = None, constraints: Any = None,
                        avoid: Any = None, glossary: Any = None, **options: Any) -> list[list[Translation]]: ...

    def translate(self, texts: list[str], **options: Any) -> list[str]: ...


class SourceLengths(Protocol):
    """The part of an encoder the search uses (`seq2seq.model.encoders.base.Encoder` declares it)."""

    def source_lengths(self, src: Any) -> Tensor | None: ...


class DecodingCache(Protocol):
    """A decoder's key/value cache (`seq2seq.model.transformer.DecoderCache`): its rows follow `index`, its
    sources `sources` (None: all stay; "infer": found from `index`)."""

    def reorder(self, index: Tensor, sources: Tensor | None | str = "infer") -> None: ...


@runtime_checkable
class SearchableModel(Protocol):
    """What `seq2seq.inference.search.search` needs of a model (`Seq2SeqTransformer` has it all).

    encode(src) -> (memory [N, S, D], memory_pad_mask [N, S], True at padding). decode(tgt, memory,
    memory_pad_mask, cache, attention_layer) -> (logits [B, T, V], cross-attention [B, T, S] or None);
    with a cache, tgt holds only the new positions and memory is read on the first call only.
    new_cache(group): an empty cache for rows grouped `group` per source. encoder.source_lengths(src):
    each source's length for the length limit (None: the memory's real positions count).
    cfg.max_positions: the decoder's positions (BOS + the generated tokens must fit). training, eval
    and train: as `nn.Module`'s (the search runs in eval mode). Rescoring with CTC (decoding.ctc_weight
    > 0) needs a `CTCModel`.
    """

    encoder: SourceLengths
    cfg: ModelConfig
    training: bool

    def encode(self, src: Any) -> tuple[Tensor, Tensor]: ...

    def decode(self, tgt: Tensor, memory: Tensor | None, memory_pad_mask: Tensor | None,
               cache: Any = None, attention_layer: int | None = None) -> tuple[Tensor, Tensor | None]: ...

    def new_cache(self, group: int = 1) -> DecodingCache: ...

    def eval(self) -> Any: ...

    def train(self, mode: bool = True) -> Any: ...


class Projects(Protocol):
    """A decoder's output projection: states [..., D] -> logits [..., V]."""

    def project(self, x: Tensor) -> Tensor: ...


@runtime_checkable
class CTCModel(SearchableModel, Protocol):
    """A `SearchableModel` whose decoder's output projection, applied to the memory, is its CTC head
    (seq2seq.inference.ctc; trained with training.ctc_weight > 0)."""

    decoder: Projects
