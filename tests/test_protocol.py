"""Every decoding engine (torch `Translator`, the `Generator`s, the CTranslate2 engine) is a
`TranslationEngine` (seq2seq.inference.protocol): the methods the CLI and the server call exist on
each, with parameters the protocol's callers can pass, and they resolve search options alike."""

from __future__ import annotations

import inspect
import json

import pytest

from seq2seq.config import SearchConfig
from seq2seq.deploy.engine import CTranslate2Translator
from seq2seq.inference.generator import Captioner, Generator, Transcriber
from seq2seq.inference.protocol import ServedModel, TranslationEngine
from seq2seq.inference.translator import Translator
from conftest import translated

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
    trained = json.loads((tiny_model_dir / "metadata.json").read_text())["parameters"]
    assert translator.parameters == trained  # a tied projection, packed for decoding, counts once
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


def test_the_server_serves_a_ctranslate2_export_as_the_engine_translates(tiny_model_dir, tmp_path):
    pytest.importorskip("ctranslate2", reason="the export extra: pip install -e '.[export]'")
    pytest.importorskip("fastapi", reason="the serve extra")
    from test_serve import call, serving

    from seq2seq.deploy.ctranslate2 import export_ctranslate2
    from seq2seq.serve.app import create_app

    export_ctranslate2(tiny_model_dir, tmp_path / "ct2")
    engine = CTranslate2Translator.load(tmp_path / "ct2")
    assert isinstance(engine, ServedModel)
    assert engine.precision == "fp32" and engine.processor_for(None) is engine.processor
    assert engine.parameters == Translator.load(tiny_model_dir, device="cpu").parameters
    with pytest.raises(ValueError, match="tgt_lang 'de': the CTranslate2 engine has no language tags"):
        engine.processor_for("de")
    texts = ["A dog runs.", "Two men.", ""]
    want = translated(engine, texts, beam=2, avoid=[None, ["Mann"], None])
    with serving(create_app(engine)) as (port, _):
        status, answer = call(port, "POST", "/translate", {"texts": [texts[0], {"text": texts[1], "avoid": ["Mann"]},
                                                                      texts[2]], "beam": 2})
        assert status == 200, answer
        assert [t["text"] for t in answer["translations"]] == want
        status, info = call(port, "GET", "/info")
        assert status == 200 and info["precision"] == "fp32" and info["parameters"] == engine.parameters
        status, answer = call(port, "POST", "/translate", {"text": "A dog.", "constraints": ["Hund"]})
        assert status == 422 and "cannot honour lexical constraints" in answer["error"], answer  # not dropped
        assert answer["code"] == "unsupported_option" and answer["field"] == "constraints"
        status, answer = call(port, "POST", "/translate", {"text": "A dog.", "tgt_lang": "de"})
        assert status == 422 and answer["field"] == "tgt_lang", answer


def test_serve_refuses_what_the_ctranslate2_engine_cannot_run(tiny_model_dir):
    from click.testing import CliRunner

    from seq2seq.cli import cli

    result = CliRunner().invoke(cli, ["serve", str(tiny_model_dir), str(tiny_model_dir), "--engine", "ctranslate2"])
    assert result.exit_code == 2 and "--engine ctranslate2 decodes one model" in result.output
    result = CliRunner().invoke(cli, ["serve", str(tiny_model_dir), "--engine-dir", "x"])
    assert result.exit_code == 2 and "--engine-dir is for --engine ctranslate2" in result.output
