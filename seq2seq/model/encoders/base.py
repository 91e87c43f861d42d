"""The source side shared by every modality: the `Encoder` interface, the `SourceProcessor` that turns
raw inputs into encoder batches, and the registry that maps `model.encoder.type` to both.

A modality is one module under `seq2seq/model/encoders/` that defines

* a config dataclass (a subclass of `seq2seq.config.sections.EncoderConfig`, registered with
  `@register_encoder_config`), saved in the model directory's config.yaml, so that training and
  inference preprocess alike;
* an `Encoder`: src batch -> (memory [B, S, D], memory_pad_mask [B, S], True at padding);
* a `SourceProcessor`: path -> example tensor (`load`), example -> encoder positions (`length`, for
  token batching), examples -> src batch (`collate`; at training time `collate_augmented`, which a
  modality with on-the-fly augmentation overrides). A modality that reads sentences leaves it out
  and gets the `TextProcessor`: its sources are tokenized by the model's source tokenizer
  (`needs_source_tokenizer`), and the text pipeline (seq2seq.data, `Translator`) serves it;

and calls `register(Modality(...))`. The decoder, trainer, search and CLI need no change: they ask the
modality (`Modality.tokenizes_source`) or its processor, never which type it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import torch
from torch import Tensor, nn

from seq2seq.config import ConfigError
from seq2seq.config.sections import EncoderConfig, discover_encoder_types
from seq2seq.text.tokenizer import PAD_ID

if TYPE_CHECKING:  # pragma: no cover
    from seq2seq.config.sections import ModelConfig
    from matplotlib.figure import Figure

    from seq2seq.model.layers import Embedding


class SourceError(ValueError):
    """A source file that cannot be used (missing, unreadable, empty, not an image/audio file);
    the message names the path."""


class Encoder(nn.Module):
    """Maps a source batch to the memory the decoder attends to.

    forward(src) -> (memory [B, S, d_model], memory_pad_mask [B, S], True at padding), d_model being the
    encoder's own width (the model projects the memory to the decoder's width when the two differ).
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

    def on_train_step(self, step: int) -> None:
        """Called by the trainer before each optimizer step (`step`: the steps done so far, also after a
        resume), e.g. to unfreeze a pretrained backbone at a given step. Default: nothing."""

    def fit_statistics(self, examples: Sequence[Any]) -> None:
        """Called once before training (fresh runs; fine-tuning and --resume then load the saved
        weights over it) with the training examples as `SourceProcessor.load` made them, for an
        encoder that normalises with corpus statistics kept in its buffers. Default: nothing."""


class SourceProcessor:
    """Raw source (a file path) -> what the encoder takes. Built from the encoder config alone.

    needs_source_tokenizer: the sources are sentences, which the model's source tokenizer turns into
        the examples (token ids); the model directory then holds a source tokenizer, the data comes as
        parallel text and decoding goes through `Translator`. False: sources are files, read by `load`.
    """

    needs_source_tokenizer: bool = False

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

    def collate_augmented(self, examples: list[Tensor], rngs: Sequence[np.random.Generator]) -> Any:
        """Training batches only: each example randomly transformed with its own generator (seeded
        from training.seed, epoch and row index by `seq2seq.data.media.example_rng`), then collated.
        Default, and whenever the modality's augmentation is off: `collate(examples)`, unchanged."""
        return self.collate(examples)


class TextProcessor(SourceProcessor):
    """Sentences: an example is a sentence's token ids (ending in EOS) from the source tokenizer, as the
    text pipeline makes them; batches are padded with pad_id into [B, S] ids. Nothing is read from files."""

    needs_source_tokenizer = True

    def __init__(self, cfg: EncoderConfig | None = None, pad_id: int = PAD_ID) -> None:
        self.cfg = cfg
        self.pad_id = pad_id

    def load(self, path: str) -> Tensor:
        raise SourceError(f"{path}: this model reads sentences (tokenized by its source tokenizer), not files")

    def length(self, example: Sequence[int] | Tensor) -> int:
        return len(example)

    def collate(self, examples: Sequence[Sequence[int] | Tensor]) -> Tensor:
        rows = [torch.as_tensor(e, dtype=torch.long).reshape(-1) for e in examples]
        return torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=self.pad_id)


@dataclass(frozen=True)
class Modality:
    """What `model.encoder.type: <name>` means.

    build_encoder(model_cfg, shared_embedding) -> Encoder: `model_cfg.encoder` holds this
        modality's config; `shared_embedding` is the target embedding when
        model.share_embeddings is set (text only), else None.
    processor(encoder_cfg) -> SourceProcessor; left out (None): `TextProcessor`, sources are sentences.
    draw_attention(encoder_cfg, example, attention, words) -> matplotlib Figure: one generated word's
        cross-attention per row drawn over the source (`example` from `processor.load`, `attention`
        [len(words), S] as nested lists, S = memory positions); None where not supported. Draw on a
        `matplotlib.figure.Figure` (no pyplot): `seq2seq.report.plots.save_figure` writes it.
    noun: what one source is called in messages ("image", "audio file").
    pretrained(model_cfg) -> Encoder: the encoder with the weights a training run starts from (e.g. a
        pretrained backbone read from the config's `name_or_path`), kept as they are (the model
        initialises only the rest); None (the default): `build_encoder`'s fresh initialisation. A model
        directory is always loaded through `build_encoder`, its weights replacing the initial ones.
    """

    name: str
    build_encoder: Callable[["ModelConfig", "Embedding | None"], Encoder]
    processor: Callable[[EncoderConfig], SourceProcessor] = None  # type: ignore[assignment] - None: TextProcessor
    draw_attention: Callable[[EncoderConfig, Tensor, list[list[float]], list[str]], "Figure"] | None = None
    noun: str = "source"
    pretrained: Callable[["ModelConfig"], Encoder] | None = None

    def __post_init__(self) -> None:
        if self.processor is None:
            object.__setattr__(self, "processor", TextProcessor)

    @property
    def tokenizes_source(self) -> bool:
        """Are the sources sentences for the model's source tokenizer (see `SourceProcessor`)?"""
        return bool(getattr(self.processor, "needs_source_tokenizer", False))


_MODALITIES: dict[str, Modality] = {}


def register(modality: Modality) -> Modality:
    _MODALITIES[modality.name] = modality
    return modality


def load_plugins() -> None:
    """Register the built-in modalities and those of installed packages: a package adds a modality
    by naming a module in the `seq2seq.model.encoders` entry-point group, e.g. in its pyproject.toml

        [project.entry-points."seq2seq.model.encoders"]
        my_encoder = "my_package.my_encoder"

    (importing that module registers its config and `Modality`). The config layer finds them
    (`seq2seq.config.sections.discover_encoder_types`), importing them by name."""
    discover_encoder_types(loaded=_MODALITIES)


def get_modality(name: str) -> Modality:
    if name not in _MODALITIES:
        load_plugins()
    if name not in _MODALITIES:
        raise ConfigError(f"unknown encoder type {name!r}; choose one of {sorted(_MODALITIES)}")
    return _MODALITIES[name]

