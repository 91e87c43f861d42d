"""Every decoding engine (torch `Translator`, the `Generator`s, the CTranslate2 engine) is a
`TranslationEngine` (seq2seq.inference.protocol): the methods the CLI and the server call exist on
each, with parameters the protocol's callers can pass, and they resolve search options alike."""

from __future__ import annotations

import inspect

import pytest

from seq2seq.config import SearchConfig
from seq2seq.deploy.engine import CTranslate2Translator
from seq2seq.inference.generator import Captioner, Generator, Transcriber
from seq2seq.inference.protocol import ServedModel, TranslationEngine
from seq2seq.inference.translator import Translator

ENGINES = [Translator, Generator, Captioner, Transcriber, CTranslate2Translator]
METHODS = ("search_config", "translate_nbest", "translate")


def accepts(impl: inspect.Signature, param: inspect.Parameter) -> bool:
    """Can a call that passes `param` as the protocol declares it be made to `impl`?"""
    if param.kind is inspect.Parameter.VAR_KEYWORD:
        return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in impl.parameters.values())
    if param.name in impl.parameters:
        mine = impl.parameters[param.name]
        return mine.kind is param.kind and (param.default is inspect.Parameter.empty
                                             or mine.default == param.default)
    return param.kind is inspect.Parameter.KEYWORD_ONLY and any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in impl.parameters.values())


@pytest.mark.parametrize("engine", ENGINES, ids=lambda c: c.__name__)
def test_each_engine_has_the_protocols_methods_with_compatible_parameters(engine):
    for name in METHODS:
        method = getattr(engine, name, None)
        assert callable(method), f"{engine.__name__}.{name} is missing"
        protocol, impl = inspect.signature(getattr(TranslationEngine, name)), inspect.signature(method)
        for param in protocol.parameters.values():
            assert accepts(impl, param), f"{engine.__name__}.{name} does not take {param}"
        extra = [p for p in impl.parameters.values() if p.name not in protocol.parameters
                 and p.default is inspect.Parameter.empty
                 and p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)]
        assert not extra, f"{engine.__name__}.{name} needs {extra}, which the protocol's callers do not pass"


def test_a_loaded_translator_is_an_engine_and_resolves_options_as_the_ctranslate2_engine(tiny_model_dir, tmp_path):
    translator = Translator.load(tiny_model_dir, device="cpu")
    assert isinstance(translator, TranslationEngine)
    assert isinstance(translator, ServedModel)  # what the server reads of it, without reaching inside
    assert translator.path == tiny_model_dir and translator.config.model == translator.loaded.config.model
    assert translator.parameters == sum(p.numel() for p in translator.loaded.model.parameters())
    assert isinstance(translator.search_config(), SearchConfig)
    pytest.importorskip("ctranslate2", reason="the export extra: pip install -e '.[export]'")
    from seq2seq.deploy.ctranslate2 import export_ctranslate2

    export_ctranslate2(tiny_model_dir, tmp_path / "ct2")
    engine = CTranslate2Translator.load(tmp_path / "ct2")
    assert isinstance(engine, TranslationEngine)
    for options in ({}, {"beam": 1}, {"beam": 3, "nbest": 2, "lenpen": 0.0}, {"max_len_a": 0, "max_len_b": 7}):
        assert engine.search_config(**options) == translator.search_config(**options), options
    for bad in ({"beam": 0}, {"nbest": 3, "beam": 2}, {"lenpen": "x"}):
        with pytest.raises(ValueError) as ours:
            translator.search_config(**bad)
        with pytest.raises(ValueError) as theirs:
            engine.search_config(**bad)
        assert str(ours.value) == str(theirs.value)


def test_one_loader_picks_the_engine_from_what_the_model_reads(tiny_model_dir, tmp_path):
    from seq2seq.inference.loading import engine_class, load_engine
    from seq2seq.model.encoders.sources import AUDIO, IMAGE, TEXT
    from seq2seq.storage import CheckpointError

    assert (engine_class(TEXT), engine_class(IMAGE), engine_class(AUDIO)) == (Translator, Generator, Transcriber)
    engine = load_engine(tiny_model_dir, device="cpu")
    assert type(engine) is Translator and isinstance(engine, ServedModel)
    with pytest.raises(CheckpointError, match=f"^{tmp_path} is not a model directory"):
        load_engine(tmp_path, device="cpu")
