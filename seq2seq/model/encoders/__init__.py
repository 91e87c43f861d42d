"""Encoders: anything that maps an input batch to (memory [B, S, D], memory_pad_mask [B, S]).

A new modality is a new module here (see `base`): its `Encoder` and `SourceProcessor` (of a `SourceKind`;
see `sources`), registered as a `Modality` under the name `model.encoder.type` uses; its config type is
registered on the config side (`seq2seq.config.encoder_section`; a plugin's module holds both). This
package imports the built-in modules below, which registers them: nothing is imported by name. The decoder,
trainer, search, server and CLI need no change: they call the processor.
"""

from seq2seq.model.encoders.base import Encoder, Modality, get_modality, register, source_kind, source_processor
from seq2seq.model.encoders.sources import AUDIO, IMAGE, TEXT, SourceError, SourceKind, SourceLimits, SourceProcessor
from seq2seq.model.encoders.text_processor import TextProcessor
from seq2seq.model.encoders.text import TextEncoder
from seq2seq.model.encoders import image  # noqa: F401 - registers "image"
from seq2seq.model.encoders import audio  # noqa: F401 - registers "audio"
from seq2seq.model.encoders import hf  # noqa: F401 - registers "hf" (transformers backbones)

__all__ = ["AUDIO", "IMAGE", "TEXT", "Encoder", "Modality", "SourceError", "SourceKind", "SourceLimits", "SourceProcessor",
           "TextEncoder", "TextProcessor", "get_modality", "register", "source_kind", "source_processor"]
