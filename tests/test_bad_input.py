"""Ordinary mistakes, command by command: each gets exit code 1, one line naming the file, key or flag,
no traceback, and every file that was there before is byte for byte what it was.

A table of (command line, expected words in the message); the paths in it are made per test in a
sandbox holding a copy of the session's tiny model, its config, a source file, a truncated and a
false .gz, and a binary file.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from seq2seq.cli import cli


@pytest.fixture(scope="module")
def sandbox(tiny_model_dir, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bad_input")
    shutil.copytree(tiny_model_dir, root / "model", ignore=shutil.ignore_patterns("cache", "train_state"))
    shutil.copy(tiny_model_dir.parent / "config.yaml", root / "config.yaml")
    (root / "src.txt").write_text("a dog runs .\ntwo men sit on a bench .\n", encoding="utf-8")
    (root / "ref.txt").write_text("ein hund rennt .\nzwei männer sitzen auf einer bank .\n", encoding="utf-8")
    whole = gzip.compress(("a dog runs .\n" * 4000).encode())
    (root / "truncated.txt.gz").write_bytes(whole[: len(whole) // 2])
    (root / "plain.txt.gz").write_text("a dog runs .\n", encoding="utf-8")
    (root / "binary.bin").write_bytes(bytes(range(256)) * 8)
    (root / "a_dir").mkdir()
    (root / "out.txt").write_text("an earlier output\n", encoding="utf-8")
    return root


def digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


CASES = {
    # data loss
    "train over a finished model": (["train", "{config}", "-o", "{model}"], ["already holds a trained model", "--overwrite"]),
    "train into a file": (["train", "{config}", "-o", "{src}"], ["is a file"]),
    "test -o = --src": (["test", "{model}", "--src", "{src}", "--ref", "{ref}", "-o", "{src}"], ["destroy the input"]),
    "translate -o = -i": (["translate", "{model}", "-i", "{src}", "-o", "{src}"], ["destroy the input"]),
    "truncated .gz": (["translate", "{model}", "-i", "{truncated}", "-o", "{out}"], ["truncated.txt.gz", "ends early"]),
    "a .gz that is not gzip": (["translate", "{model}", "-i", "{plain_gz}", "-o", "{out}"], ["not a gzip file"]),
    # output paths
    "translate -o DIR": (["translate", "{model}", "-i", "{src}", "-o", "{dir}"], ["is a directory"]),
    "translate -o missing/x": (["translate", "{model}", "-i", "{src}", "-o", "{missing}/x.txt"], ["does not exist"]),
    "test -o DIR": (["test", "{model}", "--src", "{src}", "--ref", "{ref}", "-o", "{dir}"], ["is a directory"]),
    "average -o DIR": (["average", "{model}", "-o", "{dir}"], ["is a directory"]),
    "caption -o missing/x": (["caption", "{model}", "{binary}", "-o", "{missing}/x.txt"], ["does not exist"]),
    # config ranges
    "model.layers=-3": (["config", "--set", "model.layers=-3"], ["model.layers", ">= 1", "-3"]),
    "training.lr=-1": (["config", "--set", "training.lr=-1"], ["training.lr", "positive"]),
    "model.d_model=0": (["config", "--set", "model.d_model=0"], ["model.d_model", ">= 1"]),
    "model.heads=0": (["config", "--set", "model.heads=0"], ["model.heads", ">= 1"]),
    "training.max_steps=-1": (["train", "{config}", "--set", "training.max_steps=-1", "-o", "{new}"],
                              ["training.max_steps", ">= 0"]),
    "training.label_smoothing=1": (["config", "--set", "training.label_smoothing=1"], ["training.label_smoothing"]),
    # wrong kind of model
    "caption with a text model": (["caption", "{model}", "{binary}"], ["text sources", "seq2seq translate"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_mistake_gets_one_line_exit_1_and_changes_no_file(sandbox, case):
    args, words = CASES[case]
    paths = {"config": sandbox / "config.yaml", "model": sandbox / "model", "src": sandbox / "src.txt",
             "ref": sandbox / "ref.txt", "truncated": sandbox / "truncated.txt.gz",
             "plain_gz": sandbox / "plain.txt.gz", "binary": sandbox / "binary.bin", "dir": sandbox / "a_dir",
             "missing": sandbox / "missing", "out": sandbox / "out.txt", "new": sandbox / "new_run"}
    before = digests(sandbox)
    result = CliRunner().invoke(cli, [a.format(**paths) for a in args])
    message = result.output.strip()
    assert result.exit_code == 1, (case, result.exit_code, message)
    assert "Traceback" not in message and len(message.splitlines()) == 1, message
    for word in words:
        assert word in message, (word, message)
    assert digests(sandbox) == before, "a file changed, appeared or vanished"
    assert not (sandbox / "new_run").exists() and not (sandbox / "missing").exists()


def test_overwrite_replaces_a_finished_model_only_when_asked(sandbox, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(sandbox / "model", model)
    result = CliRunner().invoke(cli, ["train", str(sandbox / "config.yaml"), "-o", str(model), "--overwrite",
                                      "--set", "training.max_steps=2", "--set", "training.valid_every=2"])
    assert result.exit_code == 0, result.output
    assert (model / "model.safetensors").read_bytes() != (sandbox / "model" / "model.safetensors").read_bytes()


def test_zero_is_a_value_for_search_options(sandbox):
    """--max-len-a 0 --max-len-b 2 caps every output at 2 tokens (a truthiness test once dropped the 0)."""
    src = str(sandbox / "src.txt")
    capped = CliRunner().invoke(cli, ["translate", str(sandbox / "model"), "-i", src, "--greedy",
                                      "--max-len-a", "0", "--max-len-b", "2", "--scores"])
    assert capped.exit_code == 0, capped.output
    lines = capped.stdout.splitlines()
    assert len(lines) == 2 and all(len(line.split("\t", 1)[1].split()) <= 2 for line in lines), lines
    from seq2seq.inference.translator import Translator

    translator = Translator.load(sandbox / "model", device="cpu")
    for options in ({"lenpen": 0.0}, {"max_len_a": 0.0}, {"seed": 0}, {"sample": True, "temperature": 0.5}):
        cfg = translator.search_config(**options)
        for key, value in options.items():
            if key != "sample":
                assert getattr(cfg, key) == value, (key, getattr(cfg, key))
    nbest = translator.translate_nbest(["two men sit on a bench ."], max_len_a=0, max_len_b=2, beam=1)
    assert len(nbest[0][0].token_ids) <= 2
    with pytest.raises(ValueError, match="temperature must be > 0, got 0"):  # refused, not dropped
        translator.search_config(sample=True, temperature=0)
    refused = CliRunner().invoke(cli, ["translate", str(sandbox / "model"), "-i", src, "--sample", "--temperature", "0"])
    assert refused.exit_code != 0 and "temperature must be > 0" in refused.output


def test_a_binary_file_given_as_the_list_of_sources_is_named(sandbox):
    import click

    from seq2seq.cli.media import _sources

    with pytest.raises(click.ClickException, match=r"binary.bin line \d+ is not UTF-8 text"):
        list(_sources((), str(sandbox / "binary.bin")))
