"""Ordinary mistakes, command by command: each gets one line naming the file, key or flag, exit code 1
(2 for click's usage errors, whose one "Error:" line follows click's usage hint), no traceback, and
every file that was there before is byte for byte what it was.

A table of (command line, expected words in the message[, exit code]) over every command (train,
translate, test, evaluate, average, config, export, import-hf, caption, transcribe, serve) and the
classes of bad input: missing, empty, a directory, the wrong kind of file, truncated, binary, bad
UTF-8, the wrong kind of model, output = input, output into a missing directory or onto a
directory, zero / negative / huge option values. The paths in it are made once in a sandbox holding
copies of the session's tiny text model and its config, tiny image and audio models, sources, a
truncated and a false .gz, a binary file, a UTF-16 file and files that are not UTF-8.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from seq2seq.cli import cli


def train_media_model(root: Path, kind: str) -> None:
    """root/{kind}_model: an image or audio model trained 2 steps on 6 generated files."""
    folder = root / kind
    folder.mkdir()
    rows = ["image\tcaption" if kind == "image" else "audio\ttext"]
    for i in range(6):
        if kind == "image":
            from PIL import Image

            Image.new("RGB", (32, 32), (40 * i, 200 - 30 * i, 90)).save(folder / f"{i}.png")
            rows.append(f"{kind}/{i}.png\ta {'red' if i % 2 else 'blue'} square")
        else:
            import soundfile as sf

            wave = 0.3 * np.sin(np.arange(4000) * (0.05 + 0.02 * i))
            sf.write(folder / f"{i}.wav", wave.astype(np.float32), 8000)
            rows.append(f"{kind}/{i}.wav\tone {'two' if i % 2 else 'three'}")
    (root / f"{kind}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    encoder = ({"type": "image", "image_size": 32, "patch_size": 8} if kind == "image" else
               {"type": "audio", "sample_rate": 8000, "n_fft": 256, "win_length": 200, "hop_length": 80, "n_mels": 20,
                "conv_channels": 8})
    config = {"data": {"train": str(root / f"{kind}.tsv"), "valid": str(root / f"{kind}.tsv")},
              "tokenizer": {"vocab_size": 16, "joint": False},
              "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "layers": 1, "encoder": encoder},
              "training": {"max_steps": 2, "max_tokens": 400, "device": "cpu", "threads": 1, "valid_bleu": False,
                           "best_metric": "loss", "output_dir": str(root / f"{kind}_model")}}
    (root / f"{kind}.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    result = CliRunner().invoke(cli, ["train", str(root / f"{kind}.yaml")])
    assert result.exit_code == 0, result.output
    shutil.rmtree(root / f"{kind}_model" / "train_state")  # a finished model, as users get it


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
    (root / "empty_dir").mkdir()
    (root / "out.txt").write_text("an earlier output\n", encoding="utf-8")
    (root / "one_ref.txt").write_text("ein hund rennt .\n", encoding="utf-8")
    (root / "not_utf8.txt").write_bytes(b"a dog runs .\n\xff\xfe caf\xe9\n")
    (root / "utf16.txt").write_bytes("a dog runs .\ntwo men .\n".encode("utf-16"))
    (root / "empty.txt").write_bytes(b"")
    (root / "bad.yaml").write_text("model: [unclosed\n", encoding="utf-8")
    (root / "list.yaml").write_text("- a\n- b\n", encoding="utf-8")
    (root / "unknown_key.yaml").write_text("model:\n  bogus_key: 1\n", encoding="utf-8")
    (root / "hf_junk").mkdir()
    (root / "hf_junk" / "config.json").write_text("{not json", encoding="utf-8")
    for kind in ("image", "audio"):
        train_media_model(root, kind)
    return root


def digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


CASES = {
    # ---- data loss
    "train over a finished model": (["train", "{config}", "-o", "{model}"], ["already holds a trained model", "--overwrite"]),
    "train into a file": (["train", "{config}", "-o", "{src}"], ["is a file"]),
    "test -o = --src": (["test", "{model}", "--src", "{src}", "--ref", "{ref}", "-o", "{src}"], ["destroy the input"]),
    "translate -o = -i": (["translate", "{model}", "-i", "{src}", "-o", "{src}"], ["destroy the input"]),
    "transcribe -o = the audio": (["transcribe", "{audio_model}", "{wav}", "-o", "{wav}"], ["destroy the input"]),
    "truncated .gz": (["translate", "{model}", "-i", "{truncated}", "-o", "{out}"], ["truncated.txt.gz", "ends early"]),
    "a .gz that is not gzip": (["translate", "{model}", "-i", "{plain_gz}", "-o", "{out}"], ["not a gzip file"]),
    "evaluate a truncated .gz": (["evaluate", "--hyp", "{truncated}", "--ref", "{ref}"], ["truncated.txt.gz", "ends early"]),
    "export onto the model": (["export", "{model}", "{model}", "--to", "ctranslate2"], ["being converted"]),
    "average onto its weights": (["average", "{model}", "-o", "{model}/model.safetensors"], ["exists", "--force"]),
    # ---- output paths
    "translate -o DIR": (["translate", "{model}", "-i", "{src}", "-o", "{dir}"], ["is a directory"]),
    "translate -o missing/x": (["translate", "{model}", "-i", "{src}", "-o", "{missing}/x.txt"], ["does not exist"]),
    "test -o DIR": (["test", "{model}", "--src", "{src}", "--ref", "{ref}", "-o", "{dir}"], ["is a directory"]),
    "average -o DIR": (["average", "{model}", "-o", "{dir}"], ["is a directory"]),
    "caption -o missing/x": (["caption", "{model}", "{binary}", "-o", "{missing}/x.txt"], ["does not exist"]),
    "caption -o DIR": (["caption", "{image_model}", "{png}", "-o", "{dir}"], ["is a directory"]),
    "export OUT_DIR a file": (["export", "{model}", "{src}", "--to", "hf"], ["OUT_DIR", "is a file"], 2),
    # ---- missing, empty, a directory
    "translate a missing model": (["translate", "{missing}"], ["model directory not found", "missing"]),
    "translate a file as the model": (["translate", "{src}"], ["MODEL_DIR", "is a file"], 2),
    "translate an empty directory": (["translate", "{empty_dir}"], ["not a complete model directory", "config.yaml"]),
    "translate -i missing": (["translate", "{model}", "-i", "{missing}"], ["input file not found", "missing"]),
    "translate -i DIR": (["translate", "{model}", "-i", "{dir}"], ["a_dir is a directory"]),
    "test --ref missing": (["test", "{model}", "--src", "{src}", "--ref", "{missing}"], ["missing"]),
    "evaluate --hyp missing": (["evaluate", "--hyp", "{missing}", "--ref", "{ref}"], ["input file not found", "missing"]),
    "evaluate --hyp DIR": (["evaluate", "--hyp", "{dir}", "--ref", "{ref}"], ["a_dir is a directory"]),
    "evaluate empty files": (["evaluate", "--hyp", "{empty}", "--ref", "{empty}"], ["empty.txt is empty"]),
    "average a missing model": (["average", "{missing}"], ["model directory not found", "missing"]),
    "average without checkpoints": (["average", "{empty_dir}"], ["no checkpoints", "empty_dir"]),
    "config missing": (["config", "{missing}"], ["config file not found", "missing"]),
    "train missing config": (["train", "{missing}"], ["config file not found", "missing"]),
    "train a directory as config": (["train", "{dir}"], ["CONFIG", "is a directory"], 2),
    "train missing data": (["train", "{config}", "--set", "data.train_src={missing}", "-o", "{new}"],
                           ["data file not found", "missing"]),
    "train empty data": (["train", "{config}", "--set", "data.train_src={empty}", "-o", "{new}"], ["empty.txt is empty"]),
    "export a missing model": (["export", "{missing}", "--to", "ctranslate2"], ["model directory not found"]),
    "export an empty directory": (["export", "{empty_dir}", "--to", "hf"], ["not a complete model directory"]),
    "export missing --weights": (["export", "{model}", "--to", "ctranslate2", "--weights", "{missing}"],
                                 ["weights file not found", "missing"]),
    "import-hf a missing directory": (["import-hf", "{missing}", "{new}"], ["HF_DIR", "does not exist"], 2),
    "import-hf an empty directory": (["import-hf", "{empty_dir}", "{new}"], ["not a transformers model directory"]),
    "caption a missing image": (["caption", "{image_model}", "{missing}"], ["image not found", "missing", "--skip-bad"]),
    "caption a directory": (["caption", "{image_model}", "{dir}"], ["a_dir", "is a directory"], 2),
    "serve a missing model": (["serve", "{missing}"], ["not a model directory", "missing"]),
    "serve an empty directory": (["serve", "{empty_dir}"], ["not a model directory", "config.yaml"]),
    # ---- the wrong kind of file: binary, not UTF-8, not YAML, mismatched
    "translate a binary file": (["translate", "{model}", "-i", "{binary}"], ["binary.bin line", "not text", "NUL"]),
    "translate UTF-16": (["translate", "{model}", "-i", "{utf16}", "-o", "{out}"], ["utf16.txt line 1", "UTF-16"]),
    "evaluate a binary file": (["evaluate", "--hyp", "{binary}", "--ref", "{ref}"], ["binary.bin line", "not text"]),
    "test mismatched lines": (["test", "{model}", "--src", "{src}", "--ref", "{one_ref}"],
                              ["src.txt has 2 lines", "one_ref.txt has 1", "line-parallel"]),
    "evaluate mismatched lines": (["evaluate", "--hyp", "{src}", "--ref", "{one_ref}"], ["2 lines", "one_ref.txt has 1"]),
    "train mismatched files": (["train", "{config}", "--set", "data.train_src={src}", "--set", "data.train_tgt={one_ref}",
                                "-o", "{new}"], ["src.txt has 2 lines", "one_ref.txt has 1"]),
    "train data not UTF-8": (["train", "{config}", "--set", "data.train_src={not_utf8}", "-o", "{new}"],
                             ["not_utf8.txt, line 2", "invalid UTF-8"]),
    "config binary": (["config", "{binary}"], ["cannot parse config file", "binary.bin", "not UTF-8"]),
    "config bad YAML": (["config", "{bad_yaml}"], ["bad.yaml", "line 2, column 1"]),
    "config not a mapping": (["config", "{list_yaml}"], ["list.yaml", "mapping"]),
    "config unknown key in file": (["config", "{unknown_key}"], ["unknown config key 'model.bogus_key'"]),
    "export --weights binary": (["export", "{model}", "--to", "ctranslate2", "--weights", "{binary}"],
                                ["cannot read weights", "binary.bin"]),
    "import-hf a broken config": (["import-hf", "{hf_junk}", "{new}"], ["hf_junk", "safetensors"]),
    "import-hf our own model dir": (["import-hf", "{model}", "{new}"], ["not a transformers model directory"]),
    "caption a binary file": (["caption", "{image_model}", "{binary}"], ["not an image", "binary.bin"]),
    "caption -i BINARY": (["caption", "{image_model}", "-i", "{binary}"], ["binary.bin line", "-i takes a list"]),
    "transcribe a binary file": (["transcribe", "{audio_model}", "{binary}"], ["cannot read audio file", "binary.bin"]),
    "transcribe an image": (["transcribe", "{audio_model}", "{png}"], ["cannot read audio file", ".png"]),
    # ---- the wrong kind of model
    "caption with a text model": (["caption", "{model}", "{binary}"], ["text sources", "seq2seq translate"]),
    "caption with an audio model": (["caption", "{audio_model}", "{wav}"], ["audio sources", "seq2seq transcribe"]),
    "transcribe with an image model": (["transcribe", "{image_model}", "{png}"], ["image sources", "seq2seq caption"]),
    "translate with an image model": (["translate", "{image_model}", "-i", "{src}"], ["image sources", "seq2seq caption"]),
    "translate with an audio model": (["translate", "{audio_model}", "-i", "{src}"], ["audio sources", "seq2seq transcribe"]),
    "test with an audio model": (["test", "{audio_model}", "--src", "{src}", "--ref", "{ref}"], ["seq2seq transcribe"]),
    "export an image model to CTranslate2": (["export", "{image_model}", "--to", "ctranslate2"], ["needs a text model"]),
    "export an audio model to HF": (["export", "{audio_model}", "--to", "hf"], ["needs a text model"]),
    # ---- zero, negative and huge values
    "model.layers=-3": (["config", "--set", "model.layers=-3"], ["model.layers", ">= 1", "-3"]),
    "training.lr=-1": (["config", "--set", "training.lr=-1"], ["training.lr", "positive"]),
    "model.d_model=0": (["config", "--set", "model.d_model=0"], ["model.d_model", ">= 1"]),
    "model.heads=0": (["config", "--set", "model.heads=0"], ["model.heads", ">= 1"]),
    "model.layers huge": (["train", "{config}", "--set", "model.layers=10000000000", "-o", "{new}"],
                          ["model:", "parameters", "memory"]),
    "model.layers=abc": (["config", "--set", "model.layers=abc"], ["model.layers", "integer", "abc"]),
    "unknown --set key": (["config", "--set", "model.bogus=1"], ["unknown config key 'model.bogus'"]),
    "training.max_steps=-1": (["train", "{config}", "--set", "training.max_steps=-1", "-o", "{new}"],
                              ["training.max_steps", ">= 0"]),
    "training.max_tokens=0": (["train", "{config}", "--set", "training.max_tokens=0", "-o", "{new}"],
                              ["training.max_tokens", ">= 1"]),
    "training.label_smoothing=1": (["config", "--set", "training.label_smoothing=1"], ["training.label_smoothing"]),
    "translate --beam 0": (["translate", "{model}", "-i", "{src}", "--beam", "0"], ["beam must be >= 1, got 0"]),
    "translate --beam -1": (["translate", "{model}", "-i", "{src}", "--beam", "-1"], ["beam must be >= 1, got -1"]),
    "translate --beam huge": (["translate", "{model}", "-i", "{src}", "--beam", "1000000000", "-o", "{out}"],
                              ["beam 1000000000 is too large", "at most"]),
    "translate --sample --nbest huge": (["translate", "{model}", "-i", "{src}", "--sample", "--nbest", "100000000"],
                                        ["nbest 100000000 is too large"]),
    "translate --nbest > --beam": (["translate", "{model}", "-i", "{src}", "--nbest", "3", "--beam", "2"],
                                   ["nbest (3) must be <= beam (2)"]),
    "translate --temperature 0": (["translate", "{model}", "-i", "{src}", "--sample", "--temperature", "0"],
                                  ["temperature must be > 0, got 0"]),
    "translate --batch-tokens 0": (["translate", "{model}", "-i", "{src}", "--batch-tokens", "0"], ["--batch-tokens"], 2),
    "caption --beam 0": (["caption", "{image_model}", "{png}", "--beam", "0"], ["beam must be >= 1, got 0"]),
    "transcribe --max-window-seconds 0": (["transcribe", "{audio_model}", "{wav}", "--max-window-seconds", "0"],
                                          ["--max-window-seconds"], 2),
    "evaluate --metrics unknown": (["evaluate", "--hyp", "{src}", "--ref", "{ref}", "--metrics", "bogus"], ["bogus"], 2),
    "average --last 0": (["average", "{model}", "--last", "0"], ["--last"], 2),
    "serve --port 70000": (["serve", "{model}", "--port", "70000"], ["--port", "70000"], 2),
    "serve --max-batch 0": (["serve", "{model}", "--max-batch", "0"], ["--max-batch"], 2),
    "serve --max-pixels 0": (["serve", "{image_model}", "--max-pixels", "0"], ["--max-pixels"], 2),
    "serve --api-key with a space": (["serve", "{model}", "--api-key", "a b"], ["API key"], 2),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_mistake_gets_one_line_exit_1_and_changes_no_file(sandbox, case):
    args, words, *usage_error = CASES[case]
    code = usage_error[0] if usage_error else 1
    names = {"config": "config.yaml", "model": "model", "src": "src.txt", "ref": "ref.txt", "one_ref": "one_ref.txt",
             "truncated": "truncated.txt.gz", "plain_gz": "plain.txt.gz", "binary": "binary.bin", "dir": "a_dir",
             "empty_dir": "empty_dir", "missing": "missing", "out": "out.txt", "new": "new_run", "empty": "empty.txt",
             "not_utf8": "not_utf8.txt", "utf16": "utf16.txt", "bad_yaml": "bad.yaml", "list_yaml": "list.yaml",
             "unknown_key": "unknown_key.yaml", "hf_junk": "hf_junk", "image_model": "image_model",
             "audio_model": "audio_model", "png": "image/1.png", "wav": "audio/1.wav"}
    paths = {key: sandbox / name for key, name in names.items()}
    before = digests(sandbox)
    result = CliRunner().invoke(cli, [a.format(**paths) for a in args])
    message = result.output.strip()
    assert result.exit_code == code, (case, result.exit_code, message)
    assert "Traceback" not in message, message
    # exit 1: the message is one line; exit 2 (click's usage errors): one "Error:" line after the usage hint
    lines = message.splitlines() if code == 1 else [line for line in message.splitlines() if line.startswith("Error")]
    assert len(lines) == 1, message
    for word in words:
        assert word in lines[0], (word, message)
    assert digests(sandbox) == before, "a file changed, appeared or vanished"
    assert not (sandbox / "new_run").exists() and not (sandbox / "missing").exists()


def test_invalid_utf8_in_a_source_is_replaced_with_one_warning_and_keeps_every_line(sandbox):
    """Documented (README): translate writes one line per input line; a byte that is not UTF-8 is replaced
    (U+FFFD) with one warning naming the file and line, not a refusal of the whole input."""
    result = CliRunner().invoke(cli, ["translate", str(sandbox / "model"), "-i", str(sandbox / "not_utf8.txt"),
                                      "--greedy"])
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 2
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning")]
    assert len(warnings) == 1 and "not_utf8.txt line 2" in warnings[0] and "U+FFFD" in warnings[0], result.stderr


def test_a_glossary_line_that_is_not_utf8_is_refused_naming_it(sandbox, tmp_path):
    """A replaced byte in a glossary would become a term the beam forces into the output: refused, naming the
    file and line, and nothing is written."""
    glossary = tmp_path / "terms.tsv"
    glossary.write_bytes(b"dog\tHund\n\xff\xfecat\tKa\xfftze\n")
    out = tmp_path / "out.txt"
    result = CliRunner().invoke(cli, ["translate", str(sandbox / "model"), "-i", str(sandbox / "src.txt"),
                                      "--glossary", str(glossary), "-o", str(out)])
    assert result.exit_code == 1, result.output
    assert f"glossary {glossary} line 2: invalid UTF-8 (byte 0): a glossary must be UTF-8" in result.stderr
    assert "Traceback" not in result.output and not out.exists()


def test_overwrite_replaces_a_finished_model_only_when_asked(sandbox, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(sandbox / "model", model)
    result = CliRunner().invoke(cli, ["train", str(sandbox / "config.yaml"), "-o", str(model), "--overwrite",
                                      "--set", "training.max_steps=2", "--set", "training.valid_every=2"])
    assert result.exit_code == 0, result.output
    assert (model / "model.safetensors").read_bytes() != (sandbox / "model" / "model.safetensors").read_bytes()


def test_zero_is_a_value_for_search_options(sandbox):
    """--max-len-a 0 --max-len-b 2 caps every output at 2 tokens: 0 is a value, not "unset"."""
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
