"""seq2seq: an encoder-decoder Transformer toolkit for translation, captioning and speech-to-text."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["Translator", "__version__"]

# On CPU, torch runs bf16 matmuls through oneDNN, which keeps a compiled kernel per tensor shape in
# two caches of up to 1024 entries each. Variable-length batches meet new shapes at every step, so
# with the defaults a training process grew by ~6 MB a step (3.6 -> 6.7 GB RSS within an hour) and
# slowed down by ~20%. With 64 entries memory stays near 1.5 GB (measured on the Multi30K config,
# 300 steps) and the recipe trains 23% more steps an hour; a benchmark that replays the same few
# batches loses its kernel reuse (README, "Training speed"). Both are read when oneDNN first runs;
# a value the user set wins.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "64")
os.environ.setdefault("LRU_CACHE_CAPACITY", "64")

if TYPE_CHECKING:  # pragma: no cover
    from .translator import Translator


def __getattr__(name: str) -> Any:
    """`from seq2seq import Translator` imports torch and the model code only when asked for."""
    if name == "Translator":
        from .translator import Translator

        return Translator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
