"""seq2seq: an encoder-decoder Transformer toolkit for translation, captioning and speech-to-text.

Importing seq2seq changes no process state (no environment variables, no torch settings): training
on CPU caps oneDNN's kernel caches when it starts (`seq2seq.accel.cpu.limit_onednn_caches`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["Captioner", "Generator", "Transcriber", "Translator", "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from seq2seq.inference.generator import Captioner, Generator, Transcriber
    from seq2seq.inference.translator import Translator


def __getattr__(name: str) -> Any:
    """`from seq2seq import Translator` (or Captioner, Transcriber, Generator) imports torch and the
    model code only when asked for."""
    if name == "Translator":
        from seq2seq.inference.translator import Translator

        return Translator
    if name in ("Captioner", "Generator", "Transcriber"):
        from seq2seq.inference import generator

        return getattr(generator, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
