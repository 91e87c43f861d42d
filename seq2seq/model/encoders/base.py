"""The source side shared by every modality: the `Encoder` interface, the `SourceProcessor` that turns
raw inputs into encoder batches, and the registry that maps `model.encoder.type` to both.

A modality is one module under `seq2seq/model/encoders/` that defines

* a config dataclass (a subclass of `seq2seq.config.schema.EncoderConfig`, registered with
  `@register_encoder_config`), saved in the model directory's config.yaml, so that training and
  inference preprocess alike;
* an `Encoder`: src batch -> (memory [B, S, D], memory_pad_mask [B, S], True at padding);
* a `SourceProcessor` (not needed for text, which goes through the tokenizer pipeline):
  path -> example tensor (`load`), example -> encoder positions (`length`, for token batching),
  examples -> src batch (`collate`);

and calls `register(Modality(...))`. The decoder, trainer, search and CLI need no change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from torch import Tensor, nn

from seq2seq.config.schema import ConfigError, EncoderConfig

if TYPE_CHECKING:  # pragma: no cover
    from seq2seq.config.schema import ModelConfig
    from seq2seq.model.layers import Embedding


class SourceError(ValueError):
    """A source file that cannot be used (missing, unreadable, empty, not an image/audio file);
    the message names the path."""


class Encoder(nn.Module):
    """Maps a source batch to the memory the decoder attends to.

    forward(src) -> (memory [B, S, d_model], memory_pad_mask [B, S], True at padding).
    `src` is whatever the modality's `SourceProcessor.collate` makes: token ids [B, S] for text,
    images [B, C, H, W], padded waveforms with their lengths, ... Every memory row must have at
    least one non-padding position. The encoder must be batch invariant: a source encoded inside a
    padded batch gives the same memory rows as encoded alone (up to float rounding).
    """

    d_model: int

    def forward(self, src: Any) -> tuple[Tensor, Tensor]:  # pragma: no cover - interface
        raise NotImplementedError

    def source_lengths(self, src: Any) -> Tensor | None:
        """Source length per example [B] for search's max length (max_len_a * len + max_len_b);
        None (the default) counts the memory's real positions instead."""
        return None


class SourceProcessor:
    """Raw source (a file path) -> what the encoder takes. Built from the encoder config alone."""

    def load(self, path: str) -> Tensor:
        """Read and preprocess one source file into a compact example tensor; SourceError naming
        the path when it is missing, empty or unreadable."""
        raise NotImplementedError

    def length(self, example: Tensor) -> int:
        """Encoder positions this example becomes (memory rows), for token-bounded batching."""
        raise NotImplementedError

    def collate(self, examples: list[Tensor]) -> Any:
        """Examples -> one src batch for `Encoder.forward`, padded where lengths differ."""
        raise NotImplementedError


@dataclass(frozen=True)
class Modality:
    """What `model.encoder.type: <name>` means.

    build_encoder(model_cfg, shared_embedding) -> Encoder: `model_cfg.encoder` holds this
        modality's config; `shared_embedding` is the target embedding when
        model.share_embeddings is set (text only), else None.
    processor(encoder_cfg) -> SourceProcessor, or None for text (tokenized by the text pipeline).
    plot_attention(encoder_cfg, example, attention, words, png_path): draw one generated word's
        cross-attention per row over the source (`example` from `processor.load`, `attention`
        [len(words), S] as nested lists, S = memory positions); None where not supported.
    noun: what one source is called in messages ("image", "audio file").
    """

    name: str
    build_encoder: Callable[["ModelConfig", "Embedding | None"], Encoder]
    processor: Callable[[EncoderConfig], SourceProcessor] | None = None
    plot_attention: Callable[[EncoderConfig, Tensor, list[list[float]], list[str], str], None] | None = None
    noun: str = "source"


_MODALITIES: dict[str, Modality] = {}


def register(modality: Modality) -> Modality:
    _MODALITIES[modality.name] = modality
    return modality


def load_plugins() -> None:
    """Register the built-in modalities and those of installed packages: a package adds a modality
    by naming a module in the `seq2seq.model.encoders` entry-point group, e.g. in its pyproject.toml

        [project.entry-points."seq2seq.model.encoders"]
        my_encoder = "my_package.my_encoder"

    (importing that module registers its config and `Modality`)."""
    import seq2seq.model.encoders  # noqa: F401 - registers text, image, audio

    from importlib.metadata import entry_points

    for entry in entry_points(group="seq2seq.model.encoders"):
        if entry.name not in _MODALITIES:
            entry.load()


def get_modality(name: str) -> Modality:
    if name not in _MODALITIES:
        load_plugins()
    if name not in _MODALITIES:
        raise ConfigError(f"unknown encoder type {name!r}; choose one of {sorted(_MODALITIES)}")
    return _MODALITIES[name]


def modalities() -> list[str]:
    load_plugins()
    return sorted(_MODALITIES)
