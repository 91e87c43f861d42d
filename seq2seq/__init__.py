"""seq2seq: an encoder-decoder Transformer toolkit for translation, captioning and speech-to-text."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["Translator", "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from .translator import Translator


def __getattr__(name: str) -> Any:
    """`from seq2seq import Translator` imports torch and the model code only when asked for."""
    if name == "Translator":
        from .translator import Translator

        return Translator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
