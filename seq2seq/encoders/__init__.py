"""Encoders: anything that maps an input batch to (memory [B, S, D], memory_pad_mask [B, S]).

A new modality is a new module here (see `base`): its config, `Encoder` and `SourceProcessor`,
registered under the name `model.encoder.type` uses. The decoder, trainer and search need no change.
"""

from .base import Encoder, Modality, SourceError, SourceProcessor, get_modality, modalities, register
from .text import TextEncoder
from . import image  # noqa: F401 - registers "image"
from . import audio  # noqa: F401 - registers "audio"

__all__ = ["Encoder", "Modality", "SourceError", "SourceProcessor", "TextEncoder", "get_modality", "modalities",
           "register"]
