"""Encoders: anything that maps an input batch to (memory [B, S, D], memory_pad_mask [B, S]).

A new modality is a new module here (see `base`): its config, `Encoder` and `SourceProcessor`,
registered under the name `model.encoder.type` uses. The decoder, trainer and search need no change.
"""

from seq2seq.model.encoders.base import (
    Encoder, Modality, SourceError, SourceProcessor, TextProcessor, get_modality, register,
)
from seq2seq.model.encoders.text import TextEncoder
from seq2seq.model.encoders import image  # noqa: F401 - registers "image"
from seq2seq.model.encoders import audio  # noqa: F401 - registers "audio"
from seq2seq.model.encoders import hf  # noqa: F401 - registers "hf" (transformers backbones)

__all__ = ["Encoder", "Modality", "SourceError", "SourceProcessor", "TextEncoder", "TextProcessor", "get_modality",
           "register"]
