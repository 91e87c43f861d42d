"""The spoken-digits recipe's AudioMNIST reader (recipes/speech_digits/make_data.py --corpus audiomnist),
on a handful of short WAVs written here in AudioMNIST's layout: data/NN/{digit}_{NN}_{index}.wav."""

from __future__ import annotations

import csv
import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

SPEAKERS = {"01": "male", "02": "female", "03": "male", "04": "female", "05": "male"}
INDICES = range(2)


@pytest.fixture(scope="module")
def make_data():
    path = Path(__file__).resolve().parents[1] / "recipes" / "speech_digits" / "make_data.py"
    spec = importlib.util.spec_from_file_location("make_data_audiomnist", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """An AudioMNIST clone in miniature: 5 speakers x 10 digits x 2 recordings of 0.05 s at 48 kHz,
    the meta file, and a notes.txt as data/36 has."""
    root = tmp_path_factory.mktemp("AudioMNIST")
    t = np.arange(2400) / 48000
    for speaker in SPEAKERS:
        (root / "data" / speaker).mkdir(parents=True)
        for digit in range(10):
            for index in INDICES:
                x = 0.3 * np.sin(2 * np.pi * (200 + 100 * digit) * t)
                sf.write(root / "data" / speaker / f"{digit}_{speaker}_{index}.wav", x, 48000, subtype="PCM_16")
    (root / "data" / "03" / "notes.txt").write_text("3_20 was copied\n")
    meta = {s: {"accent": "German", "age": "30", "gender": g} for s, g in SPEAKERS.items()}
    (root / "data" / "audioMNIST_meta.txt").write_text(json.dumps(meta, indent=4))
    return root


def read_tsv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def test_the_split_is_by_speaker_and_every_recording_is_read_once(make_data, corpus):
    recordings, split, summary = make_data.read_audiomnist(corpus, n_val=1, n_test=1, seed=1, rate=8000)
    files = sorted(corpus.glob("data/*/*.wav"))
    assert len(files) == 100 and len(recordings) == len(files)  # every file, once, keyed by its name
    assert set(recordings) == {(p.parent.name, int(p.name[0]), int(p.stem.split("_")[2])) for p in files}
    assert all(len(x) == 400 and x.dtype == np.float32 for x in recordings.values())  # 0.05 s at 8 kHz
    groups = [set(split[name]) for name in ("train", "val", "test")]
    assert [len(g) for g in groups] == [3, 1, 1]
    assert set.union(*groups) == set(SPEAKERS) and sum(len(g) for g in groups) == len(SPEAKERS)  # disjoint
    assert sum(summary[name]["recordings"] for name in split) == len(files)
    assert summary["test"]["gender"] in ({"female": 1}, {"male": 1})
    again = make_data.read_audiomnist(corpus / "data", n_val=1, n_test=1, seed=1, rate=8000)[1]  # its data/ folder
    assert again == split


def test_speaker_split_is_seeded_and_shares_the_groups_out(make_data):
    speakers = [f"{i:02d}" for i in range(1, 61)]
    gender = {s: "female" if i % 5 == 0 else "male" for i, s in enumerate(speakers)}  # 12 women, 48 men
    split = make_data.speaker_split(speakers, 6, 6, seed=1, group=gender)
    assert [len(split[k]) for k in ("train", "val", "test")] == [48, 6, 6]
    assert not set(split["train"]) & set(split["val"]) and not set(split["val"]) & set(split["test"])
    assert [sum(gender[s] == "female" for s in split[k]) for k in ("train", "val", "test")] == [10, 1, 1]
    assert make_data.speaker_split(speakers, 6, 6, seed=1, group=gender) == split
    assert make_data.speaker_split(speakers, 6, 6, seed=2, group=gender)["test"] != split["test"]
    with pytest.raises(SystemExit, match="cannot split 5 speakers"):
        make_data.speaker_split(speakers[:5], 3, 2, seed=1)


def test_utterances_come_from_their_splits_speakers_with_labels_from_the_names(make_data, corpus, tmp_path):
    argv = ["--corpus", "audiomnist", "--data-dir", str(corpus), "--out", str(tmp_path / "a"), "--n-train", "30",
            "--n-val", "6", "--n-test", "6", "--val-speakers", "1", "--test-speakers", "1"]
    summary = make_data.main(argv)
    seen = {}
    for split in ("train", "val", "test"):
        rows = read_tsv(tmp_path / "a" / f"{split}.tsv")
        assert len(rows) == {"train": 30, "val": 6, "test": 6}[split]
        speakers = set(summary["speakers"][split]["speakers"])
        for row in rows:
            recs = [r.split("_") for r in row["recordings"].split()]
            assert {s for _, s, _ in recs} == {row["speaker"]} and row["speaker"] in speakers
            assert row["text"] == " ".join(make_data.WORDS[int(d)] for d, _, _ in recs)  # digits from the names
            x, rate = sf.read(tmp_path / "a" / row["audio"])
            assert rate == 8000 and x.ndim == 1
        seen[split] = {row["speaker"] for row in rows}
    assert not seen["train"] & seen["val"] and not seen["train"] & seen["test"] and not seen["val"] & seen["test"]
    make_data.main(argv[:3] + [str(corpus / "data"), "--out", str(tmp_path / "b")] + argv[6:])  # data/ and seeded
    assert (tmp_path / "a" / "test.tsv").read_text() == (tmp_path / "b" / "test.tsv").read_text()


def test_a_wrong_directory_is_one_clear_error(make_data, corpus, tmp_path):
    (tmp_path / "empty").mkdir()
    for wrong in (tmp_path / "empty", corpus / "data" / "01"):
        with pytest.raises(SystemExit) as e:
            make_data.main(["--corpus", "audiomnist", "--data-dir", str(wrong), "--out", str(tmp_path / "o")])
        assert str(wrong) in str(e.value) and "{digit}_{NN}_{index}.wav" in str(e.value)
    bad = tmp_path / "bad"
    shutil.copytree(corpus, bad)
    (bad / "data" / "01" / "3_01_0.wav").rename(bad / "data" / "01" / "3_02_9.wav")
    with pytest.raises(SystemExit, match="named for speaker 02 but lies in folder 01"):
        make_data.audiomnist_files(bad / "data")


def test_download_clones_the_repository_once(make_data, corpus, tmp_path):
    """--download runs `git clone`; here from a local repository (no network), then reuses the copy."""
    origin = tmp_path / "origin"
    shutil.copytree(corpus, origin)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(origin)]
    subprocess.run(git + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "corpus"], check=True)
    target = tmp_path / "clone"
    assert make_data.download_audiomnist(target, url=origin.as_uri()) == target / "data"
    assert len(list(target.glob("data/*/*.wav"))) == 100
    assert make_data.download_audiomnist(target, url="file:///nowhere") == target / "data"  # already there
    with pytest.raises(SystemExit, match="cannot clone"):
        make_data.download_audiomnist(tmp_path / "other", url=(tmp_path / "nowhere").as_uri())
