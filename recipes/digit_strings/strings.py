"""Handwritten digit strings composed from MNIST: seeded 32x192 grey images of 1-8 digits, each
labelled with its digits ("40172").

    python recipes/digit_strings/strings.py --mnist ../shared/data/mnist --out runs/digit_strings/data

Where the digits come from (`read_mnist`): a directory with MNIST's four IDX files (gzipped or
not, their original names), or `--mnist hf` for the Hugging Face dataset `ylecun/mnist` (the same
images, through `datasets`, for users with network).

Splits never share a digit image, and the test split never shares a writer with the others:

* train: strings from MNIST training images 0-54,999;
* val:   strings from MNIST training images 55,000-59,999 (to choose settings on; MNIST does not
  record its writers, so these are other images of the training writers);
* test:  strings from the 10,000 MNIST test images, written by people none of whose digits are in
  the training set (LeCun et al.: the test set's writers are disjoint from the training set's).

How a string is drawn (`compose`): its length is uniform over 1-8; each digit is cut to its ink's
bounding box and scaled to the string's height (16-28 px, drawn per string, each digit jittered by
+-12%); the gap between neighbours is the string's spacing (-2 to 7 px: touching to well apart) plus
+-2 px per gap; each digit sits 0-2 px up or down; a string wider than the canvas is shrunk to fit,
and the whole string is placed at a random horizontal offset. Dark ink on a white canvas. Every
split draws from its own seeded generator (seed, split), so the same arguments write the same
files.

Writes OUT/images/<split>/NNNNNN.png and OUT/<split>.tsv (columns `image`, `text`; paths relative to
the table) and OUT/manifest.json (the arguments; files are reused when it matches).
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
from pathlib import Path

import numpy as np
from PIL import Image

HEIGHT, WIDTH = 32, 192
LENGTHS = (1, 8)
VAL_SHARE = 12  # the last 1/12 of MNIST's training images (55,000-59,999) make the val strings
SPLIT_SEEDS = {"train": 0, "val": 1, "test": 2}

log = logging.getLogger("digit_strings")


# --------------------------------------------------------------------------------------------
# MNIST
# --------------------------------------------------------------------------------------------


def _read_idx(path: Path) -> np.ndarray:
    """One IDX file (gzipped or not) as a numpy array: uint8 [N, 28, 28] images or [N] labels."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError(f"{path} is not an unsigned-byte IDX file")
    dims = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims))
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims)
    if body.size != int(np.prod(shape)):
        raise ValueError(f"{path}: header says {shape}, the file holds {body.size} values")
    return body.reshape(shape)


def _find(directory: Path, stem: str) -> Path:
    for name in (stem, stem + ".gz"):
        if (directory / name).is_file():
            return directory / name
    raise FileNotFoundError(f"{directory} has no {stem}[.gz] (MNIST's original IDX files are expected)")


def read_mnist(source: str | Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"train": (images uint8 [60000, 28, 28], labels [60000]), "test": (... [10000] ...)}: white
    ink on black, as MNIST stores it. `source`: a directory of the IDX files, or "hf" (`ylecun/mnist`
    through `datasets`; needs network the first time)."""
    if str(source) == "hf":
        from datasets import load_dataset

        ds = load_dataset("ylecun/mnist")
        return {split: (np.stack([np.asarray(im, dtype=np.uint8) for im in ds[split]["image"]]),
                        np.asarray(ds[split]["label"], dtype=np.uint8)) for split in ("train", "test")}
    directory = Path(source)
    if not directory.is_dir():
        raise FileNotFoundError(f"MNIST directory not found: {directory}")
    out = {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = _read_idx(_find(directory, f"{prefix}-images-idx3-ubyte"))
        labels = _read_idx(_find(directory, f"{prefix}-labels-idx1-ubyte"))
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise ValueError(f"{directory}: {prefix} images {images.shape} do not match labels {labels.shape}")
        out[split] = (images, labels)
    return out


def split_pool(mnist: dict[str, tuple[np.ndarray, np.ndarray]], split: str) -> tuple[np.ndarray, np.ndarray]:
    """The digit images (and labels) a split's strings are drawn from (see the module docstring)."""
    images, labels = mnist["test" if split == "test" else "train"]
    val_start = len(images) - len(images) // VAL_SHARE
    if split == "train":
        return images[:val_start], labels[:val_start]
    if split == "val":
        return images[val_start:], labels[val_start:]
    return images, labels


# --------------------------------------------------------------------------------------------
# Composing strings
# --------------------------------------------------------------------------------------------


def _ink_box(digit: np.ndarray) -> np.ndarray:
    """The digit cut to the bounding box of its ink (pixels above 0); a blank image stays whole."""
    rows, cols = np.nonzero(digit.any(axis=1))[0], np.nonzero(digit.any(axis=0))[0]
    if not len(rows):
        return digit
    return digit[rows[0]: rows[-1] + 1, cols[0]: cols[-1] + 1]


def compose(digits: list[np.ndarray], rng: np.random.Generator, height: int = HEIGHT,
            width: int = WIDTH) -> np.ndarray:
    """MNIST digit images (uint8 [28, 28], white on black) -> one string image uint8 [height, width],
    dark ink on white (see the module docstring for the random choices)."""
    size = rng.uniform(16, 28) * height / 32
    spacing = rng.uniform(-2, 7) * height / 32
    pieces = []
    for digit in digits:
        ink = _ink_box(digit)
        h = max(2, round(size * rng.uniform(0.88, 1.12)))
        w = max(1, round(ink.shape[1] * h / ink.shape[0]))
        pieces.append(np.asarray(Image.fromarray(ink).resize((w, h), Image.Resampling.BILINEAR), dtype=np.float32))
    gaps = [spacing + rng.uniform(-2, 2) for _ in pieces[1:]]
    total = sum(p.shape[1] for p in pieces) + sum(gaps)
    shrink = min(1.0, (width - 2) / max(total, 1.0))
    canvas = np.zeros((height, width), dtype=np.float32)
    x = rng.uniform(0, max(0.0, width - 2 - total * shrink)) + 1
    for i, piece in enumerate(pieces):
        if shrink < 1.0:
            h, w = max(2, round(piece.shape[0] * shrink)), max(1, round(piece.shape[1] * shrink))
            piece = np.asarray(Image.fromarray(piece).resize((w, h), Image.Resampling.BILINEAR))
        h, w = piece.shape
        top = int(np.clip(round((height - h) / 2 + rng.uniform(-2, 2)), 0, height - h))
        left = int(np.clip(round(x), 0, width - w))
        region = canvas[top: top + h, left: left + w]
        np.maximum(region, piece, out=region)  # touching digits: the darker ink wins
        x += w + (gaps[i] * shrink if i < len(gaps) else 0)
    return (255 - np.clip(canvas, 0, 255)).round().astype(np.uint8)


def sample_strings(images: np.ndarray, labels: np.ndarray, n: int,
                   rng: np.random.Generator) -> list[tuple[np.ndarray, str]]:
    """n (image, text) pairs: lengths uniform over LENGTHS, digit images drawn by cycling through
    seeded permutations of the pool, so every image of the pool is used about equally often."""
    if not len(images):
        raise ValueError("no digit images to compose strings from")
    lengths = rng.integers(LENGTHS[0], LENGTHS[1] + 1, size=n)
    order = np.concatenate([rng.permutation(len(images)) for _ in range(int(lengths.sum()) // len(images) + 1)])
    out, k = [], 0
    for length in lengths:
        idx = order[k: k + length]
        k += length
        out.append((compose([images[i] for i in idx], rng), "".join(str(int(labels[i])) for i in idx)))
    return out


def generate(out: Path, mnist_source: str | Path, sizes: dict[str, int], seed: int = 1) -> None:
    """Write the splits (module docstring) into `out`, unless its manifest says they are there."""
    manifest = {"mnist": str(mnist_source), "sizes": sizes, "seed": seed, "height": HEIGHT, "width": WIDTH,
                "lengths": list(LENGTHS), "version": 1}
    manifest_path = out / "manifest.json"
    if manifest_path.is_file() and json.loads(manifest_path.read_text()) == manifest:
        log.info("digit strings already in %s", out)
        return
    mnist = read_mnist(mnist_source)
    for split, n in sizes.items():
        rng = np.random.default_rng([seed, SPLIT_SEEDS[split]])
        folder = out / "images" / split
        folder.mkdir(parents=True, exist_ok=True)
        rows = ["image\ttext"]
        for i, (image, text) in enumerate(sample_strings(*split_pool(mnist, split), n, rng)):
            name = f"images/{split}/{i:06d}.png"
            Image.fromarray(image).save(out / name, compress_level=1)
            rows.append(f"{name}\t{text}")
        (out / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
        log.info("%s: %d strings", split, n)
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mnist", required=True, help="directory of MNIST's IDX files, or 'hf' (ylecun/mnist)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--train", type=int, default=60_000)
    p.add_argument("--val", type=int, default=1_000)
    p.add_argument("--test", type=int, default=2_000)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    generate(args.out, args.mnist, {"train": args.train, "val": args.val, "test": args.test}, args.seed)


if __name__ == "__main__":
    main()
