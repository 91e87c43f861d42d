"""The digit-strings recipe's data (recipes/digit_strings/strings.py): MNIST IDX reading, string
composition, split pools, determinism; and the recipe script end to end on a tiny budget."""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from seq2seq.text.tokenizer import JOINT_MODEL, Tokenizer

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "digit_strings"


@pytest.fixture(scope="module")
def strings():
    spec = importlib.util.spec_from_file_location("digit_strings_module", RECIPE / "strings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_idx(path: Path, array: np.ndarray, gz: bool) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(n).to_bytes(4, "big") for n in array.shape)
    data = header + array.astype(np.uint8).tobytes()
    path.write_bytes(gzip.compress(data) if gz else data)


def fake_digit(label: int, rng: np.random.Generator) -> np.ndarray:
    """A 28x28 'digit': a white block whose width encodes the label (2 + 2 * label pixels)."""
    image = np.zeros((28, 28), dtype=np.uint8)
    top = int(rng.integers(2, 6))
    image[top: top + 18, 4: 4 + 2 + 2 * label] = 255
    return image


@pytest.fixture(scope="module")
def mnist_dir(tmp_path_factory):
    """MNIST's four files in its layout: train gzipped, test not (both are accepted)."""
    root = tmp_path_factory.mktemp("mnist")
    rng = np.random.default_rng(0)
    for prefix, n, gz in (("train", 200, True), ("t10k", 60, False)):
        labels = rng.integers(0, 10, size=n).astype(np.uint8)
        images = np.stack([fake_digit(int(label), rng) for label in labels])
        suffix = ".gz" if gz else ""
        write_idx(root / f"{prefix}-images-idx3-ubyte{suffix}", images, gz)
        write_idx(root / f"{prefix}-labels-idx1-ubyte{suffix}", labels, gz)
    return root


def test_read_mnist_reads_both_idx_forms_and_names_what_is_missing(strings, mnist_dir, tmp_path):
    mnist = strings.read_mnist(mnist_dir)
    images, labels = mnist["train"]
    assert images.shape == (200, 28, 28) and images.dtype == np.uint8 and labels.shape == (200,)
    assert mnist["test"][0].shape == (60, 28, 28)
    # the fake digits encode their label in their width: the arrays were read in order
    widths = (images[:, 10] > 0).sum(axis=1)
    assert (widths == 2 + 2 * labels.astype(int)).all()
    with pytest.raises(FileNotFoundError, match=r"has no t10k-images-idx3-ubyte\[\.gz\]"):
        (tmp_path / "partial").mkdir()
        for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
            (tmp_path / "partial" / name).write_bytes((mnist_dir / name).read_bytes())
        strings.read_mnist(tmp_path / "partial")
    (tmp_path / "bad").mkdir()
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (tmp_path / "bad" / name).write_bytes(b"not an idx file")
    with pytest.raises(ValueError, match="not an unsigned-byte IDX file"):
        strings.read_mnist(tmp_path / "bad")


def test_compose_keeps_the_digits_in_order_inside_the_canvas(strings):
    """Dark ink on white, every digit inside the canvas, left to right: the ink runs of a wide
    and a narrow block come out wide first, narrow second."""
    rng = np.random.default_rng(0)
    wide, narrow = np.zeros((28, 28), np.uint8), np.zeros((28, 28), np.uint8)
    wide[4:24, 2:22] = 255
    narrow[4:24, 12:15] = 255
    for seed in range(20):
        image = strings.compose([wide, narrow], np.random.default_rng(seed))
        assert image.shape == (32, 192) and image.dtype == np.uint8
        assert image[0].min() == 255 and image[:, 0].min() == 255  # margins stay white
        inked = (image < 128).any(axis=0)
        runs = np.flatnonzero(np.diff(np.concatenate([[0], inked.astype(int), [0]])))
        widths = runs[1::2] - runs[::2]
        if len(widths) == 2:  # apart (the spacing may make them touch)
            assert widths[0] > 3 * widths[1]
    eight = [wide] * 8  # eight wide digits, far wider than the canvas at full size: shrunk to fit
    image = strings.compose(eight, rng)
    assert (image < 128).any(axis=0)[1:-1].sum() > 100
    assert (image[:, -1] == 255).all()


def test_generate_is_seeded_splits_use_their_own_pools_and_texts_match(strings, mnist_dir, tmp_path):
    sizes = {"train": 30, "val": 10, "test": 12}
    a, b = tmp_path / "a", tmp_path / "b"
    strings.generate(a, mnist_dir, sizes, seed=3)
    strings.generate(b, mnist_dir, sizes, seed=3)
    for split, n in sizes.items():
        rows = (a / f"{split}.tsv").read_text().splitlines()
        assert rows[0] == "image\ttext" and len(rows) == n + 1
        assert (a / f"{split}.tsv").read_bytes() == (b / f"{split}.tsv").read_bytes()
        for row in rows[1:]:
            name, text = row.split("\t")
            assert 1 <= len(text) <= 8 and text.isdigit()
            assert (a / name).read_bytes() == (b / name).read_bytes()
            assert Image.open(a / name).size == (192, 32)
    assert json.loads((a / "manifest.json").read_text())["sizes"] == sizes
    before = (a / "images/train/000000.png").stat().st_mtime_ns
    strings.generate(a, mnist_dir, sizes, seed=3)  # the manifest matches: nothing rewritten
    assert (a / "images/train/000000.png").stat().st_mtime_ns == before

    mnist = strings.read_mnist(mnist_dir)
    pools = {split: strings.split_pool(mnist, split) for split in sizes}
    assert len(pools["train"][0]) + len(pools["val"][0]) == 200  # the training images, split in two
    assert pools["test"][0] is mnist["test"][0]
    rng = np.random.default_rng(0)
    sampled = strings.sample_strings(*pools["val"], 40, rng)
    used = sum(len(text) for _, text in sampled)
    assert used > len(pools["val"][0])  # the pool is cycled through, not sampled once


def test_recipe_runs_end_to_end_and_reports_per_length(mnist_dir, tmp_path):
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, str(RECIPE / "run.py"), "--mnist", str(mnist_dir), "--output-dir", str(out),
         "--train-strings", "64", "--val-strings", "16", "--test-strings", "16",
         "--set", "training.max_steps=4", "--set", "training.valid_every=2", "--set", "training.threads=1",
         "--set", "model.encoder.resnet_widths=[4, 8]", "--set", "model.d_model=32", "--set", "model.ffn_dim=64",
         "--set", "model.heads=2", "--set", "training.max_tokens=3072"],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "recipe_results.json").read_text())
    for split in ("val", "test"):
        r = report[split]
        assert r["strings"] == 16 and sum(r["strings_by_length"].values()) == 16
        assert 0 <= r["exact_match"] <= 100 and r["cer"] >= 0
        assert len((out / f"{split}.hyp.txt").read_text().splitlines()) == 16
    assert report["decoding"] in report["val_search"]
    # the decoding chosen on val is the model directory's default: `seq2seq caption` reads as the report did
    from seq2seq.inference.generator import Captioner
    from seq2seq.storage.model_dir import ModelDir

    choice = ModelDir(out / "model").decoding_choice()
    assert choice["chosen_on"] == "val" and choice["chosen_by"] == "recipes/digit_strings/run.py"
    images = [str(out / "data" / line.split("\t")[0])
              for line in (out / "data" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]]
    assert Captioner.load(out / "model", device="cpu").caption(images) == \
        (out / "test.hyp.txt").read_text(encoding="utf-8").splitlines()
    assert "the README's figures came from 5,424 steps" in result.stderr  # said at the start
    assert (out / "model" / "curves.png").stat().st_size > 0
    assert "exact match by length" in result.stdout
    # the config's tokenizer: one piece per digit, no word-start mark to merge with the first one
    tokenizer = Tokenizer.load(out / "model" / JOINT_MODEL)
    assert tokenizer.vocab_size == 14 and tokenizer.pieces("1019") == ["1", "0", "1", "9"]

    bad = subprocess.run([sys.executable, str(RECIPE / "run.py"), "--mnist", str(tmp_path / "nowhere"),
                          "--output-dir", str(tmp_path / "bad")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and bad.stderr.strip().splitlines() == [
        f"error: MNIST directory not found: {tmp_path / 'nowhere'}"]
