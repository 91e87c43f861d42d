"""seq2seq: an encoder-decoder Transformer toolkit for translation, captioning and speech-to-text.

The public API, importable from here (each loads torch and the model code only when first used):

    load_engine                                     the engine that decodes a model directory: the one loader
                                                    (its class chosen from what the model reads, or named;
                                                    a CTranslate2 export with export=...)
    Translator, Captioner, Transcriber, Generator   decoding with a model directory (seq2seq.inference)
    Engine                                          what every engine is: run(inputs, call) (seq2seq.inference.engine)
    SourceInput, Call                               the typed request: each input with its own steering, and
                                                    what a call's inputs share (seq2seq.inference.inputs)
    load_model_dir                                  a model directory's model, config and tokenizers
    Config, load_config                             the typed experiment config (seq2seq.config)
    run_training                                    config -> trained model directory (seq2seq.training)
    translate_lines                                 lines as people write them through any engine: sentences
                                                    split, cased, joined back (seq2seq.documents)
    translate_documents                             HTML, XML and Markdown documents, translated into the
                                                    same document (seq2seq.documents.formats)

The package is layered, bottom first: config, text, model, accel, storage, report, data, adapters, inference,
corpora, documents, training, deploy, serve, cli (docs/architecture.md). Importing seq2seq changes no process state.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

__version__ = "0.1.0"

_API = {
    "Translator": "seq2seq.inference.translator",
    "Captioner": "seq2seq.inference.generator",
    "Transcriber": "seq2seq.inference.generator",
    "Generator": "seq2seq.inference.generator",
    "Engine": "seq2seq.inference.engine",
    "load_engine": "seq2seq.inference.generator",
    "SourceInput": "seq2seq.inference.inputs",
    "Call": "seq2seq.inference.inputs",
    "load_model_dir": "seq2seq.storage.model_dir",
    "Config": "seq2seq.config.root",
    "load_config": "seq2seq.config.root",
    "run_training": "seq2seq.training.experiment",
    "translate_lines": "seq2seq.documents.line_translation",
    "translate_documents": "seq2seq.documents.formats",
}

__all__ = [*_API, "__version__"]

if TYPE_CHECKING:  # pragma: no cover
    from seq2seq.config.root import Config, load_config
    from seq2seq.documents.formats import translate_documents
    from seq2seq.documents.line_translation import translate_lines
    from seq2seq.inference.engine import Engine
    from seq2seq.inference.generator import Captioner, Generator, Transcriber, load_engine
    from seq2seq.inference.inputs import Call, SourceInput
    from seq2seq.inference.translator import Translator
    from seq2seq.storage.model_dir import load_model_dir
    from seq2seq.training.experiment import run_training


def __getattr__(name: str) -> object:
    """`from seq2seq import Translator` (or any name of the public API) imports its module on first use."""
    if name in _API:
        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
