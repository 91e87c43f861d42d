"""Encoders: anything that maps an input batch to (memory [B, S, D], memory_pad_mask [B, S]).

A new modality is a new module here implementing `Encoder`; the decoder, trainer and search
need no change.
"""

from .base import Encoder
from .text import TextEncoder

__all__ = ["Encoder", "TextEncoder"]
