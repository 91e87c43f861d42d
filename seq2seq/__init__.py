"""seq2seq: an encoder-decoder Transformer toolkit for translation, captioning and speech-to-text."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["Translator", "__version__"]

# On CPU, torch runs bf16 matmuls through oneDNN, which keeps a compiled kernel per matmul shape in
# two caches of up to 1024 entries each. Variable-length batches meet new shapes at every step: with
# the defaults a training process grew by ~6 MB a step (3.6 -> 6.7 GB RSS within an hour). Training
# pads its bf16 matmul rows to a few bucketed sizes (seq2seq/onednn.py), so 256 entries hold every
# kernel it needs: no recompilation after warm-up, and memory flat near 1.7 GB (Multi30K config,
# benchmarks/train_speed.py). Both are read when oneDNN first runs; a value the user set wins.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "256")
os.environ.setdefault("LRU_CACHE_CAPACITY", "256")

if TYPE_CHECKING:  # pragma: no cover
    from .translator import Translator


def __getattr__(name: str) -> Any:
    """`from seq2seq import Translator` imports torch and the model code only when asked for."""
    if name == "Translator":
        from .translator import Translator

        return Translator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
