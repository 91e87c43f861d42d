"""Every decoding engine (torch `Translator`, the `Generator`s, the CTranslate2 engine) is an `Engine`
(seq2seq.inference.engine): one prepare -> search -> finish loop, each engine writing only its search
step, and what it cannot do declared as `Capabilities`; they resolve search options alike."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from seq2seq.config import SearchConfig
from seq2seq.deploy.engine import CTranslate2Translator
from seq2seq.inference.engine import Capabilities, Engine
from seq2seq.inference.generator import Captioner, Generator, Transcriber
from seq2seq.config.search import SearchOptions
from seq2seq.inference.inputs import CALL_FIELDS, FIELD_RULES, STEERING_FIELDS, CallKeywords, SourceInput
from seq2seq.config.search import FIELD_TYPES, SWITCHES
from seq2seq.inference.translator import Translator
from conftest import translated

ENGINES = [Translator, Generator, Captioner, Transcriber, CTranslate2Translator]
LOOP = ("translate", "translate_nbest", "run", "prepare", "search_config")


@pytest.mark.parametrize("engine", ENGINES, ids=lambda c: c.__name__)
def test_each_engine_writes_only_its_search_step(engine):
    assert issubclass(engine, Engine)
    for name in LOOP:  # the loop and its checks are the base's, never an engine's own copy
        assert getattr(engine, name) is getattr(Engine, name), f"{engine.__name__} overrides {name}"
    assert not inspect.isabstract(engine)


def test_the_typed_keywords_name_every_search_option_and_call_field():
    assert set(SearchOptions.__annotations__) == set(FIELD_TYPES) | set(SWITCHES)
    assert set(CALL_FIELDS) <= set(CallKeywords.__annotations__)
    assert set(inspect.signature(Engine.translate_nbest).parameters) - {"self", "texts", "search"} == \
        set(CallKeywords.__annotations__) - set(SearchOptions.__annotations__)


def test_a_missing_capability_is_refused_in_one_line_naming_the_engine():
    lacking = Capabilities("other", fields=frozenset(), attention=False, term_bias=False, beam_without_min_len=False)
    for what in (*STEERING_FIELDS, "attention", "term_bias", "beam_without_min_len"):
        message = lacking.refusal(what)
        assert "\n" not in message and "the other engine" in message
    assert CTranslate2Translator.capabilities.refusal("constraints") == \
        "the ctranslate2 engine cannot honour lexical constraints; use --engine torch"
    assert Translator.capabilities == Capabilities()


def test_an_engine_refuses_each_steering_field_it_does_not_honour_by_its_declared_name():
    from seq2seq.inference.steering import SteeringError

    ct2 = CTranslate2Translator.capabilities
    ct2.check_inputs([SourceInput("a", prefix="b", avoid=["c"])], "constrain")  # what it honours passes
    ct2.check_inputs([SourceInput("a", constraints=["x"])], "annotate")  # annotated terms are the source's
    with pytest.raises(SteeringError) as e:
        ct2.check_inputs([SourceInput("a"), SourceInput("b", constraints=[]), SourceInput("c", constraints=["x"])],
                         "constrain")
    assert str(e.value) == "the ctranslate2 engine cannot honour lexical constraints; use --engine torch"
    assert (e.value.diagnostic.field, e.value.diagnostic.code) == ("constraints", "unsupported_option")
    none = Capabilities("other", fields=frozenset())
    for name, value in (("prefix", "b"), ("constraints", ["x"]), ("avoid", ["y"])):
        with pytest.raises(SteeringError, match=f"the other engine cannot honour {FIELD_RULES[name].refused_as};"):
            none.check_inputs([SourceInput("a", **{name: value})], "constrain")
    Capabilities().check_inputs([SourceInput("a", "b", ["x"], ["y"])], "constrain")


def test_a_loaded_translator_is_an_engine_and_resolves_options_as_the_ctranslate2_engine(tiny_model_dir, tmp_path):
    translator = Translator.load(tiny_model_dir, device="cpu")
    assert isinstance(translator, Engine)
    assert translator.path == tiny_model_dir and translator.config.model == translator.loaded.config.model
    trained = json.loads((tiny_model_dir / "metadata.json").read_text())["parameters"]
    assert translator.parameters == trained  # a tied projection, packed for decoding, counts once
    assert isinstance(translator.search_config(), SearchConfig)
    pytest.importorskip("ctranslate2", reason="the export extra: pip install -e '.[export]'")
    from seq2seq.deploy.ctranslate2 import export_ctranslate2

    export_ctranslate2(tiny_model_dir, tmp_path / "ct2")
    engine = CTranslate2Translator.load(tmp_path / "ct2")
    assert isinstance(engine, Engine)
    for options in ({}, {"beam": 1}, {"beam": 3, "nbest": 2, "lenpen": 0.0}, {"max_len_a": 0, "max_len_b": 7}):
        assert engine.search_config(**options) == translator.search_config(**options), options
    for bad in ({"beam": 0}, {"nbest": 3, "beam": 2}, {"lenpen": "x"}):
        with pytest.raises(ValueError) as ours:
            translator.search_config(**bad)
        with pytest.raises(ValueError) as theirs:
            engine.search_config(**bad)
        assert str(ours.value) == str(theirs.value)


def test_one_loader_picks_the_engine_from_what_the_model_reads(tiny_model_dir, tmp_path):
    from seq2seq.inference.generator import engine_class, load_engine
    from seq2seq.model.encoders.sources import AUDIO, IMAGE, TEXT
    from seq2seq.storage import CheckpointError

    assert (engine_class(TEXT), engine_class(IMAGE), engine_class(AUDIO)) == (Translator, Generator, Transcriber)
    engine = load_engine(tiny_model_dir, device="cpu")
    assert type(engine) is Translator and isinstance(engine, Engine)
    with pytest.raises(CheckpointError, match=f"^{tmp_path} is not a model directory"):
        load_engine(tmp_path, device="cpu")


def test_the_one_loader_takes_a_class_an_export_and_the_call_it_checks(tiny_model_dir, tmp_path):
    from seq2seq.inference.generator import load_engine
    from seq2seq.inference.inputs import Call
    from seq2seq.model.encoders.sources import SourceError

    with pytest.raises(SourceError, match="use `seq2seq translate`"):  # a command's class refuses another kind
        load_engine(tiny_model_dir, device="cpu", decodes=Captioner)
    with pytest.raises(ValueError, match="beam"):  # the call's search options, checked once at loading
        load_engine(tiny_model_dir, device="cpu", decodes=Translator, call=Call({"beam": 0}))
    exported: list[Path] = []

    def export(model_dir, engine_dir, *, device, precision, seed, warn):  # an `ExportLoader`
        exported.append(model_dir)
        return load_engine(model_dir, device=device, precision=precision)

    assert isinstance(load_engine(tiny_model_dir, device="cpu", export=export), Translator)
    assert exported == [Path(tiny_model_dir)]
    for bad in ({"weights": tmp_path / "w.safetensors"}, {"last_checkpoints": 2}):
        with pytest.raises(ValueError, match="an exported engine runs one model directory"):
            load_engine(tiny_model_dir, device="cpu", export=export, **bad)
    with pytest.raises(ValueError, match="engine_dir"):
        load_engine(tiny_model_dir, device="cpu", engine_dir=tmp_path)


def test_the_server_serves_a_ctranslate2_export_as_the_engine_translates(tiny_model_dir, tmp_path):
    pytest.importorskip("ctranslate2", reason="the export extra: pip install -e '.[export]'")
    pytest.importorskip("fastapi", reason="the serve extra")
    from test_serve import call, serving

    from seq2seq.deploy.ctranslate2 import export_ctranslate2
    from seq2seq.serve.app import create_app

    export_ctranslate2(tiny_model_dir, tmp_path / "ct2")
    engine = CTranslate2Translator.load(tmp_path / "ct2")
    assert isinstance(engine, Engine)
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
