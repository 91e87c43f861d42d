"""Synthetic voices for the spoken-digits recipe: recipes/speech_digits/synth.py (espeak-ng; skipped
where it is not installed) and make_data.py --synthetic (on sine WAVs written here in FSDD's naming,
so no espeak-ng is needed): synthetic voices go to train only, at the share asked for."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "speech_digits"
SPEAKERS = ["george", "jackson", "lucas", "nicolas", "yweweler"]
INDICES = (0, 5, 45)  # one recording per digit in FSDD's test (0-4), train (5-44) and val (45-49) ranges
VOICES = ["synth-en-us-m3-p45-s160", "synth-en-gb-f2-p60-s140", "synth-en-029-klatt-p30-s190"]


def load(name: str, module: str):
    spec = importlib.util.spec_from_file_location(module, RECIPE / name)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


@pytest.fixture(scope="module")
def make_data():
    return load("make_data.py", "make_data_synth_test")


@pytest.fixture(scope="module")
def synth():
    return load("synth.py", "synth_test")


def write_sines(folder: Path, names: list[str], takes, base_hz: float) -> None:
    """{digit}_{name}_{take}.wav: 0.05 s sines at 8 kHz, a different pitch per name and digit."""
    folder.mkdir(parents=True, exist_ok=True)
    t = np.arange(400) / 8000
    for k, name in enumerate(names):
        for digit in range(10):
            for take in takes:
                x = 0.3 * np.sin(2 * np.pi * (base_hz + 20 * k + 50 * digit) * t)
                sf.write(folder / f"{digit}_{name}_{take}.wav", x, 8000, subtype="PCM_16")


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("corpora")
    write_sines(root / "fsdd", SPEAKERS, INDICES, 200)
    write_sines(root / "synth", VOICES, range(2), 300)
    return root / "fsdd", root / "synth"


def read_tsv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def same_split(a: Path, b: Path, split: str) -> bool:
    """The split's TSV and every WAV it names are the same bytes in a and b."""
    if (a / f"{split}.tsv").read_bytes() != (b / f"{split}.tsv").read_bytes():
        return False
    return all((a / r["audio"]).read_bytes() == (b / r["audio"]).read_bytes() for r in read_tsv(a / f"{split}.tsv"))


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_synth_writes_fsdd_named_digits_once(synth, tmp_path):
    out = tmp_path / "voices"
    assert synth.main(["--out", str(out), "--voices", "2", "--takes", "1", "--sample-rate", "8000"]) == 0
    files = sorted(out.glob("*.wav"))
    assert len(files) == 20
    manifest = json.loads((out / "manifest.json").read_text())
    voices = {v["name"] for v in manifest["voices"]}
    assert len(voices) == 2 and manifest["args"]["takes"] == 1
    for f in files:
        digit, voice, take = f.stem.split("_")  # FSDD's {digit}_{speaker}_{index}
        assert digit.isdigit() and take == "0" and voice in voices and voice.startswith("synth-")
        x, rate = sf.read(f)
        assert rate == 8000 and x.ndim == 1 and 800 < len(x) < 16000  # 0.1-2 s once trimmed
        assert 0.85 < np.abs(x).max() < 0.95 and np.sqrt(np.mean(x ** 2)) > 0.05  # peak-normalised speech
    mtimes = {f.name: f.stat().st_mtime_ns for f in files}
    synth.main(["--out", str(out), "--voices", "2", "--takes", "1"])  # same arguments: reused
    assert {f.name: f.stat().st_mtime_ns for f in sorted(out.glob("*.wav"))} == mtimes
    synth.main(["--out", str(out), "--voices", "1", "--takes", "1"])  # another call's voices do not linger
    assert len(list(out.glob("*.wav"))) == 10


def test_synth_without_espeak_is_one_line(synth, tmp_path, monkeypatch):
    empty = tmp_path / "bin"
    empty.mkdir()
    env = {**os.environ, "PATH": str(empty)}
    r = subprocess.run([sys.executable, str(RECIPE / "synth.py"), "--out", str(tmp_path / "o")], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "apt-get install espeak-ng" in r.stderr and not (tmp_path / "o").exists()
    monkeypatch.setattr(synth.shutil, "which", lambda name: None)
    with pytest.raises(SystemExit, match="apt-get install espeak-ng"):
        synth.synthesize(tmp_path / "o")


def test_choose_voices_is_seeded_and_distinct(synth):
    voices = synth.choose_voices(["en-us", "en-gb"], ["m1", "f2", "klatt"], 8, seed=1)
    names = [v["name"] for v in voices]
    assert len(set(names)) == 8 and all("_" not in n and n.startswith("synth-") for n in names)
    assert {v["voice"] for v in voices[:6]} == {f"{b}+{v}" for b in ("en-us", "en-gb") for v in ("m1", "f2", "klatt")}
    assert all(20 <= v["pitch"] <= 80 and 130 <= v["speed"] <= 200 for v in voices)
    assert synth.choose_voices(["en-us", "en-gb"], ["m1", "f2", "klatt"], 8, seed=1) == voices
    assert synth.choose_voices(["en-us", "en-gb"], ["m1", "f2", "klatt"], 8, seed=2) != voices


@pytest.mark.parametrize("held_out", [None, "lucas"])
def test_synthetic_voices_only_in_train_at_the_share(make_data, corpora, tmp_path, held_out):
    fsdd, voices_dir = corpora
    argv = ["--data-dir", str(fsdd), "--n-train", "20", "--n-val", "6", "--n-test", "6"]
    argv += ["--test-speaker", held_out] if held_out else []
    make_data.main(argv + ["--out", str(tmp_path / "real")])
    summary = make_data.main(argv + ["--out", str(tmp_path / "mixed"), "--synthetic", str(voices_dir),
                                     "--synthetic-share", "0.3"])
    rows = read_tsv(tmp_path / "mixed" / "train.tsv")
    synthetic = [r for r in rows if r["speaker"].startswith("synth-")]
    assert len(rows) == 20 and len(synthetic) == 6  # 0.3 of 20
    assert [r["speaker"] for r in synthetic] == [sorted(VOICES)[i % 3] for i in range(6)]  # voices take turns
    real_speakers = [s for s in SPEAKERS if s != held_out]
    assert {r["speaker"] for r in rows if r not in synthetic} == set(real_speakers)
    for r in rows:
        recs = [name.split("_") for name in r["recordings"].split()]
        assert {s for _, s, _ in recs} == {r["speaker"]}  # one voice per utterance
        assert r["text"] == " ".join(make_data.WORDS[int(d)] for d, _, _ in recs)
    for split in ("val", "test"):  # real recordings only, and exactly what the run without the option wrote
        assert not any(r["speaker"].startswith("synth-") for r in read_tsv(tmp_path / "mixed" / f"{split}.tsv"))
        assert same_split(tmp_path / "real", tmp_path / "mixed", split)
    assert summary["synthetic"] == {"dir": str(voices_dir), "share": 0.3, "voices": sorted(VOICES), "recordings": 60}
    assert summary["train"]["synthetic_utterances"] == 6 and summary["train"]["synthetic_voices"] == sorted(VOICES)
    real = json.loads((tmp_path / "real" / "summary.json").read_text())
    assert "synthetic" not in real and "synthetic" not in real["args"] and "synthetic_share" not in real["args"]
    # Share 0: train too is the run without the option, byte for byte (the same random draws).
    make_data.main(argv + ["--out", str(tmp_path / "zero"), "--synthetic", str(voices_dir), "--synthetic-share", "0"])
    assert all(same_split(tmp_path / "real", tmp_path / "zero", split) for split in ("train", "val", "test"))


def test_synthetic_option_errors(make_data, corpora, tmp_path):
    fsdd, voices_dir = corpora
    argv = ["--data-dir", str(fsdd), "--out", str(tmp_path / "o")]
    with pytest.raises(SystemExit, match="needs --synthetic"):
        make_data.main(argv + ["--synthetic-share", "0.2"])
    with pytest.raises(SystemExit, match="between 0 and 1"):
        make_data.main(argv + ["--synthetic", str(voices_dir), "--synthetic-share", "1.5"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match="no synthetic recordings"):
        make_data.main(argv + ["--synthetic", str(tmp_path / "empty")])
    partial = tmp_path / "partial"
    write_sines(partial, ["synth-x"], range(1), 300)
    (partial / "7_synth-x_0.wav").unlink()
    with pytest.raises(SystemExit, match=r"synth-x has no train recordings of digits \[7\]"):
        make_data.main(argv + ["--synthetic", str(partial), "--n-train", "4", "--n-val", "2", "--n-test", "2"])


def test_run_passes_the_options_and_keeps_data_and_models_apart(corpora, tmp_path):
    """run.py: --synthetic reaches make_data, its utterances get their own folder, and a model trained
    on other data is not evaluated as if trained on these."""
    run = load("run.py", "run_synth_test")
    fsdd, voices_dir = corpora
    args = Namespace(data_dir=fsdd, corpus="fsdd", seed=1, n_train=10, n_val=4, n_test=4, synthetic=voices_dir,
                     synthetic_share=0.4, config=RECIPE / "config.yaml", set=[], minutes=None, retrain=False)
    name = run.data_dir_name(args)
    assert name.startswith("data-synthetic-0.4-") and name != run.data_dir_name(Namespace(**{**vars(args),
                                                                                              "synthetic_share": 0.5}))
    assert run.data_dir_name(Namespace(**{**vars(args), "synthetic": None})) == "data"
    data = run.build_data(args, tmp_path / name, "lucas", 8000)
    summary = json.loads((data / "summary.json").read_text())
    assert summary["args"]["synthetic"] == str(voices_dir) and summary["args"]["test_speaker"] == "lucas"
    assert summary["train"]["synthetic_utterances"] == 4
    assert f"--synthetic {voices_dir} --synthetic-share 0.4" in summary["args"]["argv"]
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "recipe_trained").write_text("1 min\n")  # a model trained on out/data, before
    with pytest.raises(SystemExit, match="was trained on .*data, not on .*data-synthetic-0.4-"):
        run.run_one(args, tmp_path, None)
