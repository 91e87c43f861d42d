"""The `Encoder` interface shared by every modality, and the registry that maps `model.encoder.type` to
a modality: its encoder and the `SourceProcessor` (`seq2seq.model.encoders.sources`) that turns raw
inputs into encoder batches.

A modality is one module under `seq2seq/model/encoders/` that defines

* (for a plugin) a config dataclass (a subclass of `seq2seq.config.encoder_section.EncoderConfig`,
  registered with `@register_encoder_config`), saved in the model directory's config.yaml, so that
  training and inference preprocess alike; the built-in modalities' config types are in
  `seq2seq.config.encoder_section`, the config layer;
* an `Encoder`: src batch -> (memory [B, S, D], memory_pad_mask [B, S], True at padding);
* a `SourceProcessor` of a `SourceKind` (TEXT, IMAGE, AUDIO, or its own): the one owner of what
  follows from the kind of source: probing a file and checking limits, splitting a long source,
  preparing examples, their lengths, collating batches, describing a source and what attention is
  drawn over. A modality that reads sentences leaves it out and gets the `TextProcessor`
  (`seq2seq.model.encoders.text_processor`);

and calls `register(Modality(...))`. The decoder, trainer, search, server and CLI need no change:
they call the processor (`source_processor(model_cfg, tokenizer)`) and read its `kind`, never the
encoder's type.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Generic, TypeGuard, TypeVar

from torch import Tensor, nn

from seq2seq.config import ConfigError
from seq2seq.config.encoder_section import EncoderConfig, load_encoder_plugins
from seq2seq.model.encoders.sources import SourceError, SourceKind, SourceProcessor
from seq2seq.model.encoders.text_processor import TextProcessor

SrcT = TypeVar("SrcT")  # the batch an encoder's forward takes (its processor's `collate` makes it)

if TYPE_CHECKING:  # pragma: no cover
    from seq2seq.config.model_section import ModelConfig
    from seq2seq.model.layers import Embedding
    from seq2seq.text.tokenizer import Tokenizer

# SourceError, SourceKind and SourceProcessor (seq2seq.model.encoders.sources) are also imported from here
# by seq2seq.inference.translator, ensemble and protocol.
__all__ = ["Encoder", "Modality", "SourceError", "SourceKind", "SourceProcessor", "get_modality", "load_plugins",
           "register", "resolve_encoder_config", "source_kind", "source_processor"]


class Encoder(nn.Module, Generic[SrcT]):
    """Maps a source batch to the memory the decoder attends to.

    forward(src) -> (memory [B, S, d_model], memory_pad_mask [B, S], True at padding), d_model being the
    encoder's own width (the model projects the memory to the decoder's width when the two differ).
    `src` is whatever the modality's `SourceProcessor.collate` makes: token ids [B, S] for text,
    images [B, C, H, W], padded waveforms with their lengths, ... Every memory row must have at
    least one non-padding position. The encoder must be batch invariant: a source encoded inside a
    padded batch gives the same memory rows as encoded alone (up to float rounding).
    """

    d_model: int

    def forward(self, src: SrcT) -> tuple[Tensor, Tensor]:  # pragma: no cover - interface
        raise NotImplementedError

    def source_lengths(self, src: SrcT) -> Tensor | None:
        """Source length per example [B] for search's max length (max_len_a * len + max_len_b);
        None (the default) counts the memory's real positions instead."""
        return None

    def on_train_step(self, step: int) -> None:
        """Called by the trainer before each optimizer step (`step`: the steps done so far, also after a
        resume), e.g. to unfreeze a pretrained backbone at a given step. Default: nothing."""

    def fit_statistics(self, examples: Sequence[Tensor]) -> None:
        """Called once before training (fresh runs; fine-tuning and --resume then load the saved
        weights over it) with the training examples as `SourceProcessor.load` made them, for an
        encoder that normalises with corpus statistics kept in its buffers. Default: nothing."""


@dataclass(frozen=True)
class Modality:
    """What `model.encoder.type: <name>` means.

    build_encoder(model_cfg, shared_embedding) -> Encoder: `model_cfg.encoder` holds this
        modality's config; `shared_embedding` is the target embedding when
        model.share_embeddings is set (text only), else None.
    processor(encoder_cfg) -> SourceProcessor; left out (None): `TextProcessor`, sources are sentences.
    kind: the `SourceKind` its sources are, or kind(encoder_cfg) where the config decides (`type: hf`
        reads images or audio after its backbone); None: the processor class's `kind`.
    pretrained(model_cfg) -> Encoder: the encoder with the weights a training run starts from (e.g. a
        pretrained backbone read from the config's `name_or_path`), kept as they are (the model
        initialises only the rest); None (the default): `build_encoder`'s fresh initialisation. A model
        directory is always loaded through `build_encoder`, its weights replacing the initial ones.
    resolve(encoder_cfg) -> EncoderConfig: the config with what it names but does not hold filled in,
        when a run starts (`type: hf` reads its backbone's config from `name_or_path`), so that parsing a
        config reads nothing; ConfigError naming the key. None: nothing to resolve.
    """

    name: str
    build_encoder: Callable[["ModelConfig", "Embedding | None"], Encoder]
    processor: Callable[[EncoderConfig], SourceProcessor] = TextProcessor
    kind: SourceKind | Callable[[EncoderConfig], SourceKind] | None = None
    pretrained: Callable[["ModelConfig"], Encoder] | None = None
    resolve: Callable[[EncoderConfig], EncoderConfig] | None = None

    def __post_init__(self) -> None:
        if self.processor is None:  # given as None: left out
            object.__setattr__(self, "processor", TextProcessor)

    def source_kind(self, encoder_cfg: EncoderConfig) -> SourceKind:
        """The kind of source a model with this encoder config reads (no processor built where the
        modality or its processor class says)."""
        if isinstance(self.kind, SourceKind):
            return self.kind
        if self.kind is not None:
            return self.kind(encoder_cfg)
        if _is_processor_class(self.processor):
            return self.processor.kind
        return self.processor(encoder_cfg).kind


def _is_processor_class(make: object) -> TypeGuard[type[SourceProcessor]]:
    """Is a modality's `processor` a SourceProcessor class (whose `kind` is known without building one)?"""
    return isinstance(make, type) and issubclass(make, SourceProcessor)


_MODALITIES: dict[str, Modality] = {}


def register(modality: Modality) -> Modality:
    _MODALITIES[modality.name] = modality
    return modality


def load_plugins() -> None:
    """Register the modalities of installed packages (the built-in ones are registered by importing this
    package, whose `__init__` imports their modules): a package adds a modality by naming a module in the
    `seq2seq.model.encoders` entry-point group, e.g. in its pyproject.toml

        [project.entry-points."seq2seq.model.encoders"]
        my_encoder = "my_package.my_encoder"

    (importing that module registers its config type and its `Modality`; the config layer loads the
    group, `seq2seq.config.encoder_section.load_encoder_plugins`)."""
    load_encoder_plugins()


def get_modality(name: str) -> Modality:
    if name not in _MODALITIES:
        load_plugins()
    if name not in _MODALITIES:
        raise ConfigError(f"unknown encoder type {name!r}; choose one of {sorted(_MODALITIES)}")
    return _MODALITIES[name]



def source_kind(encoder_cfg: EncoderConfig) -> SourceKind:
    """The kind of source `model.encoder` reads."""
    return get_modality(encoder_cfg.type).source_kind(encoder_cfg)


def resolve_encoder_config(encoder_cfg: EncoderConfig) -> EncoderConfig:
    """What a run does first with `model.encoder`: its modality's `resolve` (see `Modality`); the
    config as it is where the modality resolves nothing."""
    resolve = get_modality(encoder_cfg.type).resolve
    return encoder_cfg if resolve is None else resolve(encoder_cfg)


def source_processor(model_cfg: ModelConfig, tokenizer: Tokenizer | None = None) -> SourceProcessor:
    """The processor of a model's sources, bound to its source tokenizer and positions."""
    processor = get_modality(model_cfg.encoder.type).processor(model_cfg.encoder)
    processor.bind(tokenizer, model_cfg.max_positions)
    return processor
