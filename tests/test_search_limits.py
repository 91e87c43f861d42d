"""Every search number bounded where its `SearchConfig` is made, the memory of a search known before it
is taken, and what a search could not do said (issue 70, parts 2, 3 and 6): through the real command
line, a model directory whose config.yaml was edited, and the server."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch
import yaml
from click.testing import CliRunner

from seq2seq.cli import cli
from seq2seq.config import json_reader
from seq2seq.config.model_section import ModelConfig
from seq2seq.config.search import SearchConfig
from seq2seq.inference import memory
from seq2seq.config.search import resolve_search
from seq2seq.inference.search import search
from seq2seq.inference.strategies import top_p_filter

HUGE = 10**400  # an integer of 401 digits: no float holds it

# (options as a call gives them, the message, after "decoding." for a config file)
BOUNDED = [
    ({"lenpen": 1e308}, "lenpen must be <= 10.0, got 1e+308"),
    ({"lenpen": -1e308}, "lenpen must be >= -10.0, got -1e+308"),
    ({"constraint_lenpen": 1e308}, "constraint_lenpen must be <= 10.0, got 1e+308"),
    ({"max_len_a": 1e308}, "max_len_a must be <= 10000.0, got 1e+308"),
    ({"max_len_a": -1e308}, "max_len_a must be >= 0.0, got -1e+308"),
    ({"max_len_b": HUGE}, "max_len_b must be <= 1000000, got 100000000000... (401 characters)"),
    ({"beam": HUGE}, "beam must be <= 2147483647, got 100000000000... (401 characters)"),
    ({"min_len": HUGE}, "min_len must be <= 2147483647, got 100000000000... (401 characters)"),
    ({"strategy": "sample", "temperature": 1e300}, "temperature must be <= 10000.0, got 1e+300"),
    ({"strategy": "sample", "temperature": 1e-300}, "temperature must be >= 0.0001, got 1e-300"),
    ({"term_bias": 1e300}, "term_bias must be <= 100.0, got 1e+300"),
    ({"max_len_a": 0.0, "max_len_b": -3}, "max_len_a 0.0 and max_len_b -3 give every output a length limit of 0"),
]


@pytest.mark.parametrize("fields, message", BOUNDED, ids=[m[:40] for _, m in BOUNDED])
def test_every_number_is_bounded_where_the_search_config_is_made(fields, message):
    """A config file's `decoding` section and a call's options meet the same rule, in one place."""
    with pytest.raises(ValueError) as config_file:
        SearchConfig(**fields)
    assert str(config_file.value).startswith(f"decoding.{message}")
    with pytest.raises(ValueError) as call:
        resolve_search(SearchConfig(), fields)
    assert str(call.value).startswith(message)


def test_the_model_bounds_token_ids_attention_layers_and_min_len():
    model = ModelConfig(tgt_vocab_size=300, src_vocab_size=300, layers=1, max_positions=256)
    with pytest.raises(ValueError, match=re.escape("decoding.eos_id (99999) is not in the target vocabulary of 300 "
                                                   "pieces (ids 0 to 299)")):
        SearchConfig(eos_id=99999).check_model(model)
    with pytest.raises(ValueError, match=re.escape("min_len (100000) is more than the longest output this model can "
                                                   "write (255 tokens: model.max_positions 256 - 1)")):
        resolve_search(SearchConfig(), {"min_len": 100000}, model)
    with pytest.raises(ValueError, match="attention_layer 3 does not exist: the decoder has 1 layer"):
        resolve_search(SearchConfig(), {"attention_layer": 3}, model)
    assert resolve_search(SearchConfig(), {"min_len": 255}, model).min_len == 255
    # the length limit wins over min_len where they conflict (warned per source): an explicit max_len 0 stands
    assert SearchConfig(max_len=0, min_len=6).max_length(10) == 0


def one_line_error(result, *words):
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1, result.output
    for word in words:
        assert word in result.output, result.output


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    path = tmp_path_factory.mktemp("limits") / "src.txt"
    path.write_text("A dog runs.\nTwo men.\n")
    return path


@pytest.mark.parametrize("args, words", [
    (["--lenpen", "1e308"], ["lenpen must be <= 10.0"]),
    (["--constraint-lenpen", "-1e308"], ["constraint_lenpen must be >= -10.0"]),
    (["--max-len-a", "1e308"], ["max_len_a must be <= 10000.0"]),
    (["--max-len-b", "9" * 400], ["max_len_b must be <= 1000000, got 999999999999... (400 characters)"]),
    (["--sample", "--temperature", "1e-300"], ["temperature must be >= 0.0001"]),
    (["--sample", "--temperature", "1e300"], ["temperature must be <= 10000.0"]),
    (["--min-len", "100000"], ["min_len (100000) is more than the longest output", "max_positions 256"]),
])
def test_the_command_line_refuses_what_once_gave_a_traceback_in_one_line(tiny_model_dir, src, args, words):
    one_line_error(CliRunner().invoke(cli, ["translate", str(tiny_model_dir), "-i", str(src), *args]), *words)


def test_top_p_keeps_the_most_likely_token_however_small_p_is(tiny_model_dir, src):
    logits = torch.randn(3, 50)
    kept = top_p_filter(logits, 1e-300).isfinite()
    assert kept.sum(dim=1).tolist() == [1, 1, 1] and torch.equal(kept.float().argmax(1), logits.argmax(1))
    result = CliRunner().invoke(cli, ["translate", str(tiny_model_dir), "-i", str(src), "--sample", "--topp", "1e-300",
                                      "--seed", "1"])
    greedy = CliRunner().invoke(cli, ["translate", str(tiny_model_dir), "-i", str(src), "--greedy"])
    assert result.exit_code == 0 and result.output == greedy.output  # top-p of ~0: the most likely token


def edited_model(tiny_model_dir, tmp_path, **decoding):
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model, ignore=shutil.ignore_patterns("checkpoints", "train_state"))
    config = yaml.safe_load((model / "config.yaml").read_text())
    config["decoding"].update(decoding)
    (model / "config.yaml").write_text(yaml.safe_dump(config))
    return model


@pytest.mark.parametrize("decoding, words", [
    ({"lenpen": float("nan")}, ["decoding.lenpen must be a finite number, got nan"]),
    ({"eos_id": 99999}, ["decoding.eos_id (99999) is not in the target vocabulary of"]),
    ({"min_len": 100000}, ["decoding.min_len (100000) is more than the longest output"]),
])
def test_a_model_directorys_decoding_section_is_checked_like_the_command_line(tiny_model_dir, src, tmp_path,
                                                                               decoding, words):
    model = edited_model(tiny_model_dir, tmp_path, **decoding)
    one_line_error(CliRunner().invoke(cli, ["translate", str(model), "-i", str(src)]), *words)


def test_json_that_python_cannot_hold_is_one_line_everywhere(tiny_model_dir, tmp_path):
    digits, deep = '{"text": "a", "beam": ' + "9" * 5000 + "}", "[" * 100_000
    for text, message in ((digits, "a number of 5000 digits, more than the 4300 Python reads (line 1, column 23)"),
                          (deep, "arrays/objects nested 100000 levels deep")):
        with pytest.raises(json.JSONDecodeError) as e:
            json_reader.loads(text)
        assert str(e.value).startswith(message) and "\n" not in str(e.value)
    assert json_reader.loads('{"a": [1, 2.5, "[["]}') == {"a": [1, 2.5, "[["]}
    for text, words in ((digits, ["input line 1 is not JSON (a number of 5000 digits"]),
                        (deep, ["input line 1 is not JSON (arrays/objects nested 100000 levels deep"])):
        (tmp_path / "in.jsonl").write_text(text + "\n")
        result = CliRunner().invoke(cli, ["translate", str(tiny_model_dir), "-i", str(tmp_path / "in.jsonl"),
                                          "--json-input"])
        one_line_error(result, *words)
    (tmp_path / "deep.json").write_text("[" * 100_000)
    result = CliRunner().invoke(cli, ["config", str(tmp_path / "deep.json")])
    assert result.exit_code != 0 and "Traceback" not in result.output and "nested 100000 levels" in result.output


def test_the_server_answers_json_it_cannot_hold_and_a_search_over_memory_with_4xx(tiny_model_dir, monkeypatch):
    from test_serve import call, serving

    from seq2seq.inference.translator import Translator
    from seq2seq.serve.app import create_app
    from seq2seq.serve.requests import Limits

    monkeypatch.setenv(memory.MEMORY_ENV, "1GB")
    translator = Translator.load(tiny_model_dir, device="cpu")
    limits = Limits(max_beam=1_000_000, max_work=10**12)
    with serving(create_app(translator, limits)) as (port, _):
        got, answer = call(port, "POST", "/translate", b'{"text": "a", "beam": ' + b"9" * 5000 + b"}")
        assert got == 400 and "a number of 5000 digits" in answer["error"], answer
        got, answer = call(port, "POST", "/translate", b"[" * 100_000)
        assert got == 400 and "nests JSON arrays/objects more than 32 levels deep" in answer["error"], answer
        got, answer = call(port, "POST", "/translate", {"text": "A dog runs.", "lenpen": 1e308})
        assert got == 422 and answer["error"] == "lenpen must be <= 10.0, got 1e+308", answer
        got, answer = call(port, "POST", "/translate", {"text": "A dog runs.", "beam": 444000})
        assert got == 413 and "beam 444000 needs about" in answer["error"] and "at most beam" in answer["error"], answer
        assert answer["code"] == "search_memory"
        assert call(port, "POST", "/translate", {"text": "A dog runs."})[0] == 200  # and the server goes on


def test_a_beam_over_the_memory_is_refused_up_front_naming_the_largest_that_fits(tiny_model_dir, src, monkeypatch):
    monkeypatch.setenv(memory.MEMORY_ENV, "1GB")
    result = CliRunner().invoke(cli, ["translate", str(tiny_model_dir), "-i", str(src), "--beam", "444000"])
    one_line_error(result, "beam 444000 needs about", "the search may take 1 GB (SEQ2SEQ_SEARCH_MEMORY)")
    most = int(re.search(r"at most beam (\d+)", result.output).group(1))
    src_len, out_len = (int(n) for n in re.search(r"a source of (\d+) positions into up to (\d+) tokens",
                                                  result.output).groups())
    model = yaml.safe_load((tiny_model_dir / "config.yaml").read_text())["model"]
    model = ModelConfig(**{k: v for k, v in model.items() if k != "encoder"})

    def need(beam):
        return memory.search_bytes(SearchConfig(beam=beam), model, 1, src_len, out_len)

    assert need(most) <= 10**9 < need(most + 1)
    monkeypatch.setenv(memory.MEMORY_ENV, "a lot")
    one_line_error(CliRunner().invoke(cli, ["translate", str(tiny_model_dir), "-i", str(src)]),
                   "SEQ2SEQ_SEARCH_MEMORY='a lot': give a size in bytes such as 8GB")
    assert memory.parse_size("512MiB") == 512 * 2**20 and memory.parse_size("1.5GB") == 1_500_000_000


def test_too_many_constraints_for_the_memory_are_refused_naming_how_many_fit(tiny_model_dir, src, tmp_path,
                                                                            monkeypatch):
    monkeypatch.setenv(memory.MEMORY_ENV, "10GB")
    (tmp_path / "c.txt").write_text("\t".join(["Hund"] * 200) + "\n\n")
    result = CliRunner().invoke(cli, ["translate", str(tiny_model_dir), "-i", str(src), "--beam", "201",
                                      "--constraints-file", str(tmp_path / "c.txt")])
    one_line_error(result, "line 1: 200 constraints in a beam of 201 are too many to track", "give at most")
    most = int(re.search(r"give at most (\d+) constraints", result.output).group(1))
    assert memory.tracker_bytes(201, most) <= 10**10 < memory.tracker_bytes(201, most + 1)


def test_sampling_returns_nbest_samples_even_where_two_coincide():
    from test_search import sources, tiny_model

    model, src = tiny_model(eos_bias=3.0), sources()  # short, likely outputs: samples coincide
    out = search(model, src, SearchConfig(strategy="sample", nbest=8, seed=0))
    assert [len(hyps) for hyps in out] == [8] * len(out)
    assert any(len({tuple(h.tokens) for h in hyps}) < 8 for hyps in out)  # duplicates kept, not dropped
    beam = search(model, src, SearchConfig(beam=8, nbest=8))
    assert all(len({tuple(h.tokens) for h in hyps}) == len(hyps) for hyps in beam)  # beam: distinct


def test_a_length_limit_a_source_cannot_meet_is_warned_about_and_every_line_is_written(tiny_model_dir, src):
    result = CliRunner().invoke(cli, ["translate", str(tiny_model_dir), "-i", str(src), "--max-len-a", "0.5",
                                      "--max-len-b", "-4", "--json"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == 2 and all(line["text"] == "" for line in lines)
    assert "line 1: its length limit is 0 tokens (max_len_a 0.5 x" in result.stderr
    result = CliRunner().invoke(cli, ["translate", str(tiny_model_dir), "-i", str(src), "--min-len", "40"])
    assert result.exit_code == 0 and len(result.stdout.splitlines()) == 2
    assert "line 2: min_len 40 is more than its length limit of" in result.stderr
