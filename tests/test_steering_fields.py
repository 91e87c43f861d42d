"""Hostile steering input: one parser of the steering fields for the command line's --json-input, the Python
API and the server (seq2seq.inference.inputs), contradictions named, limits that keep a request from
taking the machine (issue 59's probe of hostile inputs). On the tiny trained model (`tiny_model_dir`)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from seq2seq.cli import cli
from seq2seq.config.diagnostics import Diagnostic
from seq2seq.config.search import SearchConfig
from seq2seq.inference.inputs import SourceInput
from seq2seq.inference.steering import SteeringError, check_steering
from seq2seq.inference.translator import Translator
from conftest import translated
from seq2seq.serve import batcher as batcher_module
from seq2seq.serve.batcher import Batcher
from seq2seq.serve.requests import Limits, RequestError, parse_options, parse_texts

TIMEOUT = 30


@pytest.fixture(scope="module")
def translator(tiny_model_dir) -> Translator:
    return Translator.load(tiny_model_dir, device="cpu")


def translate_json(model_dir, *lines: str, args: tuple[str, ...] = ()):
    return CliRunner().invoke(cli, ["translate", str(model_dir), "--json-input", *args],
                              input="".join(line + "\n" for line in lines))


HOSTILE_LINES = [  # (a --json-input line, the message the CLI gives; the server names the field as texts[0].)
    ('{"text": "A dog.", "avoid": "Hund"}', 'avoid must be a list of strings, got "Hund"'),
    ('{"text": "A dog.", "avoid": {"Hund": 1}}', 'avoid must be a list of strings, got {"Hund": 1}'),
    ('{"text": "A dog.", "constraints": true}', "constraints must be a list of strings, got true"),
    ('{"text": "A dog.", "constraints": 5}', "constraints must be a list of strings, got 5"),
    ('{"text": "A dog.", "constraints": ["Hund", 5]}', 'constraints must be a list of strings, got \\["Hund", 5\\]'),
    ('{"text": "A dog.", "prefix": ["Ein"]}', 'prefix must be a string, got \\["Ein"\\]'),
    ('{"text": "A dog.", "constraints": ["Hu\\ud800nd"]}', "constraints\\[0\\] is not valid Unicode: character 2"),
    ('{"text": "A dog.", "prefix": "\\udfff"}', "prefix is not valid Unicode: character 0 is a lone surrogate"),
]


@pytest.mark.parametrize("line, message", HOSTILE_LINES)
def test_hostile_json_input_is_one_line_naming_the_line_and_field_on_the_cli_and_the_server(
        tiny_model_dir, line, message):
    import re

    for args in ((), ("--avoid", "Katze")):  # --avoid beside the line's own avoid: still refused, not split
        result = translate_json(tiny_model_dir, '{"text": "A cat."}', line, args=args)
        assert result.exit_code == 1, result.output
        assert re.search("input line 2: " + message, result.output), result.output
        assert "Traceback" not in result.output and result.stdout.count("\n") <= 1
    with pytest.raises(RequestError) as e:  # the server reads the same fields with the same words
        parse_texts({"texts": [json.loads(line)]}, Limits())
    assert e.value.status == 422 and re.search(r"texts\[0\]\." + message, e.value.message), e.value.message


def test_a_lone_surrogate_in_a_json_input_text_is_named(tiny_model_dir):
    result = translate_json(tiny_model_dir, '{"text": "A \\ud800 dog."}')
    assert result.exit_code == 1 and "input line 1: text is not valid Unicode: character 2" in result.output
    assert "Traceback" not in result.output


def test_an_avoid_string_per_line_bans_that_line_only(translator, tiny_model_dir):
    """Per-line avoid lists stay per line (they are never pooled into one list banned for every line)."""
    plain = translated(translator, ["A dog runs.", "A dog runs."], max_len_b=20)
    word = plain[0].split()[1]
    result = translate_json(tiny_model_dir, json.dumps({"text": "A dog runs.", "avoid": [word]}),
                            json.dumps({"text": "A dog runs."}), args=("--max-len-b", "20"))
    assert result.exit_code == 0, result.output
    first, second = result.stdout.split("\n")[:2]
    assert word not in first.split() and second == plain[1]


@pytest.mark.parametrize("kwargs, message", [
    (dict(constraints=[True]), "line 1: constraints must be a list of strings, got true"),
    (dict(constraints=[{"Hund": 1}]), 'line 1: constraints must be a list of strings, got {"Hund": 1}'),
    (dict(avoid=[["Hund"], 5]), "line 2: avoid must be a list of strings, got 5"),
    (dict(prefix=[5, ""]), "line 1: prefix must be a string, got 5"),
])
def test_the_python_api_reads_the_same_fields_with_the_same_words(translator, kwargs, message):
    n = len(next(iter(kwargs.values())))
    with pytest.raises(SteeringError, match=message):
        translator.translate(["A dog.", "A cat."][:n], **kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(constraints=[["Hund"]], avoid=["Hund"]), "line 1: the constraint 'Hund' holds the avoided phrase 'Hund'"),
    (dict(constraints=[["einem Hund"]], avoid=[["Hund"]]),
     "line 1: the constraint 'einem Hund' holds the avoided phrase 'Hund'; .*drop one of the two"),
])
def test_contradictory_steering_is_one_error_naming_both_fields(translator, kwargs, message):
    with pytest.raises(SteeringError, match=message):
        translator.translate(["A dog."], beam=3, **kwargs)


def test_a_prefix_that_holds_an_avoided_phrase_is_kept_with_a_warning_naming_both(translator):
    warnings: list[str] = []
    out = translator.translate(["A dog."], prefix=["Ein Hund"], avoid=["Hund"], max_len_b=20, warn=warnings.append)
    assert out[0].startswith("Ein Hund")
    assert warnings == [Diagnostic("the prefix 'Ein Hund' holds the avoided phrase 'Hund'; the prefix is kept as "
                                   "given (a prefix wins over a banned phrase)", 1, "prefix", "prefix_avoided")]


def test_a_glossary_term_that_is_also_avoided_is_named_as_such(translator, tmp_path):
    path = tmp_path / "g.tsv"
    path.write_text("dog\tHund\n")
    with pytest.raises(SteeringError, match="line 1: the glossary term 'Hund' holds the avoided phrase 'Hund'"):
        translator.translate(["A dog."], glossary=path, avoid=["Hund"], beam=3)


def test_an_avoided_phrase_inside_no_constraint_is_no_contradiction(translator):
    out = translator.translate(["A dog runs."], constraints=[["Hund"]], avoid=["Katze"], beam=3, max_len_b=20)
    assert "Hund" in out[0] and "Katze" not in out[0]


def test_too_many_constraints_for_the_beam_are_refused_before_any_memory_is_taken(translator):
    constraints = [[f"Wort{i}" for i in range(1000)]]
    with pytest.raises(SteeringError, match="line 1: 1000 constraints in a beam of 1001 are too many to track"):
        translator.translate(["A dog."], constraints=constraints, beam=1001)


def test_check_steering_leaves_its_arguments_alone_and_returns_what_the_beam_holds():
    given, terms = SourceInput("A man.", constraints=["Hund"]), ["Mann", "Frau", "Kind"]
    kept, dropped = check_steering(given, terms, SearchConfig(strategy="beam", beam=3), line=1)
    assert kept == ["Mann"] and dropped == ["Frau", "Kind"]
    assert given == SourceInput("A man.", constraints=["Hund"]) and terms == ["Mann", "Frau", "Kind"]


def test_an_empty_input_with_steering_says_its_steering_is_not_used(translator):
    warnings: list[str] = []
    out = translator.translate(["A dog.", "  "], constraints=[["Hund"], ["Katze"]], beam=3, max_len_b=20,
                               warn=warnings.append)
    assert out[1] == "" and [str(w) for w in warnings] == ["line 2: an empty input: its prefix, constraints and "
                                                           "terms are not used (its output is empty)"]
    assert warnings[0].index == 1 and warnings[0].code == "empty_input"


def test_a_seed_torch_cannot_take_is_one_line_on_the_cli_and_422_on_the_server(tiny_model_dir, translator):
    result = CliRunner().invoke(cli, ["translate", str(tiny_model_dir), "--sample", "--seed", str(2**70)],
                                input="A dog.\n")
    assert result.exit_code != 0 and "seed must be between 0 and 2**63 - 1" in result.output
    assert "Traceback" not in result.output
    with pytest.raises(ValueError, match="seed must be between 0 and 2"):
        translator.search_config(sample=True, seed=-1)


def test_the_server_caps_the_output_length_a_request_may_ask_for():
    limits = Limits(max_len=300)
    assert parse_options({"max_len_b": 300}, limits) == {"max_len_b": 300}
    with pytest.raises(RequestError) as e:
        parse_options({"max_len_b": 100_000}, limits)
    assert e.value.status == 413 and "max_len_b 100000 is over this server's limit of 300" in e.value.message


def test_the_batcher_keeps_only_the_recent_batch_sizes(monkeypatch):
    monkeypatch.setattr(batcher_module, "RECENT_CALLS", 3)
    batcher = Batcher(lambda items, options: list(items), max_batch=10, window_s=0.0, max_queue=100)
    batcher.start()
    try:
        for i in range(6):
            assert batcher.submit([str(i)] * (i + 1), {}).result(TIMEOUT) == [str(i)] * (i + 1)
    finally:
        batcher.close(TIMEOUT)
    assert batcher.calls == 6 and batcher.batch_sizes == [4, 5, 6]



def test_translate_json_carries_each_lines_diagnostics_as_the_server_does(tiny_model_dir):
    lines = ['{"text": "A dog.", "constraints": ["Hund"]}', '{"text": "  ", "constraints": ["Katze"]}',
             '{"text": "A cat."}']
    result = CliRunner().invoke(cli, ["translate", str(tiny_model_dir), "--json-input", "--json", "--beam", "3",
                                      "--chunk-lines", "2"], input="\n".join(lines) + "\n")
    assert result.exit_code == 0, result.output
    objects = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert len(objects) == 3 and objects[1]["text"] == ""
    assert objects[1]["diagnostics"] == [{"message": "an empty input: its prefix, constraints and terms are not "
                                                     "used (its output is empty)", "code": "empty_input",
                                          "field": "text", "index": 1}]
    assert objects[1]["warnings"] == [objects[1]["diagnostics"][0]["message"]]
    assert "diagnostics" not in objects[0] and "diagnostics" not in objects[2]  # none drawn
