"""Fine-tuning (`seq2seq train CONFIG --init-from MODEL_DIR`, seq2seq/training/finetune.py): the run starts from
the parent's weights and tokenizer with a fresh optimizer and schedule, refuses a config that does not
fit the parent with one message naming the problem, resumes, and works for text, image and audio models.
The parent of the text tests is the session's `tiny_model_dir`, which is only read."""

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
import yaml
from click.testing import CliRunner
from PIL import Image
from safetensors.torch import load_file

from seq2seq.cli import cli
from seq2seq.config import ConfigError
from seq2seq.training.experiment import run_training
from seq2seq.config import load_config

TRAIN = {"max_tokens": 1500, "lr": 0.001, "warmup_steps": 4, "device": "cpu", "threads": 1, "valid_bleu": False,
         "best_metric": "loss", "log_every": 1, "seed": 5}


def write_config(path: Path, cfg: dict) -> Path:
    path.write_text(yaml.safe_dump(cfg))
    return path


def text_config(tmp_path: Path, files: dict, out: str, **sections) -> Path:
    """A fine-tuning config: data and training only (model and tokenizer come from the parent)."""
    cfg = {"data": {"train_src": str(files["train.en"]), "train_tgt": str(files["train.de"]),
                    "valid_src": str(files["val.en"]), "valid_tgt": str(files["val.de"])},
           "training": {**TRAIN, "output_dir": str(tmp_path / out), "max_steps": 0, "valid_every": 2}}
    for name, values in sections.items():
        cfg.setdefault(name, {}).update(values)
    return write_config(tmp_path / f"{out}.yaml", cfg)


def train(*args: str):
    result = CliRunner().invoke(cli, ["train", *map(str, args)])
    return result


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = load_file(str(a)), load_file(str(b))
    assert wa.keys() == wb.keys()
    for name in wa:
        assert torch.equal(wa[name], wb[name]), name


def test_finetuning_starts_from_the_parents_weights_and_tokenizer(tmp_path, tiny_model_dir, multi30k_small):
    parent_meta = json.loads((tiny_model_dir / "metadata.json").read_text())
    parent_cfg = yaml.safe_load((tiny_model_dir / "config.yaml").read_text())
    before = {p.name: p.stat().st_mtime_ns for p in tiny_model_dir.iterdir()}

    # 0 steps: the run only validates, on the parent's own validation data, and saves
    cfg = load_config(text_config(tmp_path, multi30k_small, "ft0"))
    result = run_training(cfg, init_from=tiny_model_dir)
    out = tmp_path / "ft0"
    assert result["step"] == 0
    assert result["last"]["valid_loss"] == pytest.approx(parent_meta["best_score"], abs=1e-4)
    assert_same_weights(out / "model.safetensors", tiny_model_dir / "model.safetensors")
    assert (out / "spm.model").read_bytes() == (tiny_model_dir / "spm.model").read_bytes()
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["model"] == parent_cfg["model"]  # the config had no model section: the parent's shape
    assert json.loads((out / "metadata.json").read_text())["init_from"] == str(tiny_model_dir.resolve())

    # a few steps through the CLI: a fresh step count and schedule (warmup from 0), then it translates
    config = text_config(tmp_path, multi30k_small, "ft", training={"max_steps": 3})
    result = train(config, "--init-from", tiny_model_dir)
    assert result.exit_code == 0, result.output
    rows = _log(tmp_path / "ft")
    assert [r["step"] for r in rows] == [1, 2, 3]
    # the new run's own warmup (4 steps) from step 0: the lr after steps 1, 2, 3 is lr * (step + 1) / 4
    assert [r["lr"] for r in rows] == pytest.approx([0.0005, 0.00075, 0.001])
    parent_rows = [r for r in _log(tiny_model_dir) if r["train_loss"] is not None]
    assert rows[0]["train_loss"] < parent_rows[-1]["train_loss"] + 0.2 < parent_rows[0]["train_loss"]  # it goes on
    assert (tmp_path / "ft" / "spm.model").read_bytes() == (tiny_model_dir / "spm.model").read_bytes()
    translated = CliRunner().invoke(cli, ["translate", str(tmp_path / "ft"), "--greedy"], input="A dog runs.\n")
    assert translated.exit_code == 0 and len(translated.output.splitlines()) == 1
    assert {p.name: p.stat().st_mtime_ns for p in tiny_model_dir.iterdir()} == before  # the parent is untouched


def _log(model_dir: Path) -> list[dict]:
    import csv

    with open(model_dir / "log.csv") as f:
        return [{k: float(v) if v else None for k, v in row.items()} for row in csv.DictReader(f)]


@pytest.mark.parametrize("case, message", [
    ("shape", "model.d_model=128 (the model's: 64); model.layers=2 (the model's: 1)"),
    ("encoder", "the model has a text encoder (model.encoder.type: text) but the config asks for image"),
    ("tokenizer_file", "tokenizer.src_model="),
    ("tokenizer_size", "tokenizer.vocab_size=500 (the model's: 300)"),
    ("not_a_model", "not a complete model directory (config.yaml is missing)"),
])
def test_a_config_that_does_not_fit_the_parent_is_refused_with_one_message(tmp_path, tiny_model_dir, multi30k_small,
                                                                          case, message):
    sections, init_from = {}, tiny_model_dir
    if case == "shape":
        sections = {"model": {"d_model": 128, "layers": 2, "dropout": 0.3}}  # the dropout may change
    elif case == "encoder":
        sections = {"model": {"encoder": {"type": "image", "image_size": 32, "patch_size": 8}}}
    elif case == "tokenizer_file":
        other = tmp_path / "other.model"
        other.write_bytes(b"not the parent's tokenizer")
        sections = {"tokenizer": {"src_model": str(other)}}
    elif case == "tokenizer_size":
        sections = {"tokenizer": {"vocab_size": 500}}
    else:
        init_from = tmp_path / "empty"
        init_from.mkdir()
    config = text_config(tmp_path, multi30k_small, "ft", **sections)
    result = train(config, "--init-from", init_from)
    assert result.exit_code == 1
    assert message in result.output, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "ft").exists()  # refused before anything was written


def test_the_parents_own_settings_and_tokenizer_file_are_accepted(tmp_path, tiny_model_dir, multi30k_small):
    parent_cfg = yaml.safe_load((tiny_model_dir / "config.yaml").read_text())
    config = text_config(tmp_path, multi30k_small, "ft", model=parent_cfg["model"], tokenizer={
        **parent_cfg["tokenizer"], "src_model": str(tiny_model_dir / "spm.model")})
    cfg = load_config(config)
    from seq2seq.training import finetune

    cfg, parent = finetune.setup(cfg, tiny_model_dir, tmp_path / "ft", resume=False)
    assert parent is not None and cfg.model.d_model == 64
    assert cfg.tokenizer.src_model == str(tiny_model_dir.resolve() / "spm.model")
    with pytest.raises(ConfigError, match="fine-tuning keeps"):
        cfg = load_config(config, ["model.norm=post"])
        finetune.setup(cfg, tiny_model_dir, tmp_path / "ft", resume=False)


def test_resuming_a_finetuning_run_ends_where_an_uninterrupted_one_does(tmp_path, tiny_model_dir, multi30k_small):
    full = text_config(tmp_path, multi30k_small, "full", training={"max_steps": 4})
    assert train(full, "--init-from", tiny_model_dir).exit_code == 0
    part = text_config(tmp_path, multi30k_small, "part", training={"max_steps": 2})
    assert train(part, "--init-from", tiny_model_dir).exit_code == 0
    # resumed without --init-from: the run knows its parent (metadata.json) and keeps its tokenizer
    result = train(part, "--resume", "--set", "training.max_steps=3")
    assert result.exit_code == 0, result.output
    result = train(part, "--resume", "--init-from", tiny_model_dir, "--set", "training.max_steps=4")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "part" / "metadata.json").read_text())["step"] == 4
    for name in ("step_2.safetensors", "step_4.safetensors"):
        wa, wb = (load_file(str(tmp_path / run / "checkpoints" / name)) for run in ("full", "part"))
        for key in wa:
            torch.testing.assert_close(wa[key], wb[key], atol=1e-6, rtol=1e-5, msg=f"{name}: {key}")
    assert (tmp_path / "part" / "spm.model").read_bytes() == (tiny_model_dir / "spm.model").read_bytes()
    # --init-from another model on resume is refused
    other = tmp_path / "full"
    result = train(part, "--resume", "--init-from", other, "--set", "training.max_steps=5")
    assert result.exit_code == 1 and "was fine-tuned from" in result.output, result.output


# ---- image and audio ------------------------------------------------------------------------------

COLOURS = {"red": (220, 20, 20), "green": (20, 200, 20), "blue": (20, 20, 220)}
TONES = {"low": 300.0, "high": 1800.0}


def image_data(root: Path) -> dict:
    (root / "img").mkdir(parents=True)
    rows = ["image\tcaption"]
    for i, (name, rgb) in enumerate(list(COLOURS.items()) * 3):
        Image.new("RGB", (32, 32), rgb).save(root / "img" / f"{i}.png")
        rows.append(f"img/{i}.png\ta {name} square")
    (root / "data.tsv").write_text("\n".join(rows) + "\n")
    return {"data": {"train": str(root / "data.tsv"), "valid": str(root / "data.tsv")},
            "model": {"encoder": {"type": "image", "image_size": 32, "patch_size": 8}}}


def audio_data(root: Path) -> dict:
    (root / "wav").mkdir(parents=True)
    rows = ["audio\ttext"]
    rate = 8000
    for i, name in enumerate(list(TONES) * 4):
        t = np.arange(int(0.2 * rate)) / rate
        sf.write(root / "wav" / f"{i}.wav", (0.5 * np.sin(2 * np.pi * TONES[name] * t)).astype(np.float32), rate)
        rows.append(f"wav/{i}.wav\t{name}")
    (root / "data.tsv").write_text("\n".join(rows) + "\n")
    return {"data": {"train": str(root / "data.tsv"), "valid": str(root / "data.tsv")},
            "model": {"encoder": {"type": "audio", "sample_rate": rate, "n_fft": 256, "win_length": 200,
                                  "hop_length": 80, "n_mels": 20, "conv_channels": 8}}}


@pytest.mark.parametrize("kind", ["image", "audio"])
def test_image_and_audio_models_fine_tune_too(tmp_path, kind):
    base = (image_data if kind == "image" else audio_data)(tmp_path / "data")
    parent_cfg = {**base, "tokenizer": {"vocab_size": 24},
                  "model": {**base["model"], "d_model": 32, "heads": 2, "ffn_dim": 64, "layers": 1},
                  "training": {**TRAIN, "max_tokens": 400, "output_dir": str(tmp_path / "parent"), "max_steps": 3,
                               "valid_every": 3}}
    result = train(write_config(tmp_path / "parent.yaml", parent_cfg))
    assert result.exit_code == 0, result.output
    parent = tmp_path / "parent"
    parent_loss = json.loads((parent / "metadata.json").read_text())["best_score"]

    # the fine-tuning config names no model sizes and no tokenizer; the encoder type may be given
    ft_cfg = {"data": base["data"], "model": {"encoder": {"type": kind}},
              "training": {**TRAIN, "max_tokens": 400, "output_dir": str(tmp_path / "ft"), "max_steps": 0}}
    result = train(write_config(tmp_path / "ft.yaml", ft_cfg), "--init-from", parent)
    assert result.exit_code == 0, result.output
    ft = tmp_path / "ft"
    assert_same_weights(ft / "model.safetensors", parent / "model.safetensors")
    assert (ft / "spm.model").read_bytes() == (parent / "spm.model").read_bytes()
    assert json.loads((ft / "metadata.json").read_text())["best_score"] == pytest.approx(parent_loss, abs=1e-4)
    saved, parents = (yaml.safe_load((d / "config.yaml").read_text()) for d in (ft, parent))
    assert saved["model"] == parents["model"]

    other = "audio" if kind == "image" else "image"
    ft_cfg["model"]["encoder"]["type"] = other
    ft_cfg["training"]["output_dir"] = str(tmp_path / "ft2")
    result = train(write_config(tmp_path / "ft2.yaml", ft_cfg), "--init-from", parent)
    assert result.exit_code == 1 and f"the model has a {kind} encoder" in result.output, result.output
