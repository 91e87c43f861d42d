#!/usr/bin/env python
"""Seeded synthetic scenes for the captioning recipe: 2-4 coloured shapes and captions that say
exactly what is where.

    python recipes/captioning/scenes.py OUT_DIR [--train 20000 --val 500 --test 500 --compositional 500]

A scene is a square canvas (dark grey of a random shade) cut into a 2x2 grid of cells; 2 to 4
distinct cells hold one object each: a shape (circle, square, triangle, diamond, cross), a colour
(red, green, blue, yellow, purple, orange; each drawn with a little random jitter around its base
RGB) and a size (small or large, each a range of radii), placed at a random point of its cell so
that it stays inside it. Objects never overlap, and everything a caption says can be read off the
image.

Captions (4 references per image, the first is the canonical one):

  0. canonical, reading order (top left, top right, bottom left, bottom right), each object placed
     relative to the one before:  "a large red circle, to its right a small blue square, and below
     it a small green triangle"
  1. the same chain backwards:    "a small green triangle, above it a small blue square, and to its
     left a large red circle"
  2. absolute positions:          "a large red circle in the top left, a small blue square in the
     top right and a small green triangle in the bottom right"
  3. counted, column by column:   "three shapes: a large red circle at the top left, a small green
     ..." (column-major order)

So the canonical caption is a deterministic function of the image (exact match is attainable), and
the paraphrases are extra references for BLEU and for "matches any reference".

Splits, written under OUT_DIR: `train`, `val`, `test` (i.i.d. held-out scenes), and
`compositional`: every scene there holds at least one of the colour-shape pairs in
`HELD_OUT_PAIRS`, which never occur in train, val or test (each colour and each shape is seen in
training, only not together). Each split is `images/<split>/NNNNN.png` plus

  <split>.tsv            image<TAB>caption, 4 rows per image (canonical first; what training reads)
  <split>.canonical.tsv  image<TAB>caption, the canonical caption only
  <split>.jsonl          {"image", "caption": [4 references], "objects": [...]} per image

with image paths relative to OUT_DIR. `manifest.json` records the settings; generating again
with the same settings reuses what is there.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from PIL import Image, ImageDraw

SHAPES = ("circle", "square", "triangle", "diamond", "cross")
COLOURS = {
    "red": (220, 40, 40),
    "green": (40, 175, 60),
    "blue": (50, 90, 235),
    "yellow": (235, 220, 40),
    "purple": (155, 60, 205),
    "orange": (245, 140, 25),
}
SIZES = {"small": (0.16, 0.2), "large": (0.3, 0.38)}  # radius as a fraction of the cell side
# Colour-shape pairs that only the compositional split shows: each colour once, each shape at least once.
HELD_OUT_PAIRS = (("red", "circle"), ("green", "square"), ("blue", "triangle"), ("yellow", "diamond"),
                  ("purple", "cross"), ("orange", "circle"))
CELLS = ("top left", "top right", "bottom left", "bottom right")  # reading order; cell = 2 * row + col
NUMBERS = {2: "two", 3: "three", 4: "four"}
VERSION = 1  # bump when the drawing or the captions change


@dataclass
class Obj:
    shape: str
    colour: str
    size: str
    cell: int  # index into CELLS
    x: float  # centre, pixels
    y: float
    r: float  # radius, pixels
    rgb: tuple[int, int, int]

    @property
    def phrase(self) -> str:
        return f"a {self.size} {self.colour} {self.shape}"


def relation(a: int, b: int) -> str:
    """Where cell b is as seen from cell a (b after a in reading order), as a phrase ending in 'it'."""
    (ra, ca), (rb, cb) = divmod(a, 2), divmod(b, 2)
    vertical = {-1: "above", 0: "", 1: "below"}[rb - ra]
    horizontal = {-1: "to its left", 0: "", 1: "to its right"}[cb - ca]
    if vertical and horizontal:
        return f"{vertical} it and {horizontal}"
    return f"{vertical} it" if vertical else horizontal


def chain(objs: list[Obj]) -> str:
    """First object, then each next one relative to the previous: 'a X, to its right a Y, and below it a Z'."""
    parts = [objs[0].phrase] + [f"{relation(p.cell, o.cell)} {o.phrase}" for p, o in zip(objs, objs[1:])]
    return ", ".join(parts[:-1]) + ", and " + parts[-1]


def captions(objs: list[Obj]) -> list[str]:
    """The 4 references of a scene; objs in reading order. The first is the canonical caption."""
    absolute = [f"{o.phrase} in the {CELLS[o.cell]}" for o in objs]
    by_column = sorted(objs, key=lambda o: (o.cell % 2, o.cell // 2))
    counted = ", ".join(f"{o.phrase} at the {CELLS[o.cell]}" for o in by_column)
    return [
        chain(objs),
        chain(objs[::-1]),
        ", ".join(absolute[:-1]) + " and " + absolute[-1],
        f"{NUMBERS[len(objs)]} shapes: {counted}",
    ]


def draw_shape(draw: ImageDraw.ImageDraw, o: Obj) -> None:
    x, y, r = o.x, o.y, o.r
    if o.shape == "circle":
        draw.ellipse((x - r, y - r, x + r, y + r), fill=o.rgb)
    elif o.shape == "square":
        s = r * 0.85  # a square of the circle's area-ish, so size reads the same across shapes
        draw.rectangle((x - s, y - s, x + s, y + s), fill=o.rgb)
    elif o.shape == "triangle":
        draw.polygon([(x, y - r), (x + r * 0.95, y + r * 0.75), (x - r * 0.95, y + r * 0.75)], fill=o.rgb)
    elif o.shape == "diamond":
        draw.polygon([(x, y - r), (x + r, y), (x, y + r), (x - r, y)], fill=o.rgb)
    elif o.shape == "cross":
        t = r * 0.36
        draw.rectangle((x - r, y - t, x + r, y + t), fill=o.rgb)
        draw.rectangle((x - t, y - r, x + t, y + r), fill=o.rgb)
    else:  # pragma: no cover
        raise ValueError(o.shape)


def sample_scene(rng: random.Random, canvas: int, compositional: bool) -> list[Obj]:
    """Objects in reading order. compositional: at least one held-out pair, else none."""
    n = rng.randint(2, 4)
    cells = sorted(rng.sample(range(4), n))
    held = set(HELD_OUT_PAIRS)
    allowed = [(c, s) for c in COLOURS for s in SHAPES if (c, s) not in held]
    pairs = [rng.choice(allowed) for _ in range(n)]
    if compositional:
        for k in rng.sample(range(n), rng.randint(1, n)):
            pairs[k] = rng.choice(HELD_OUT_PAIRS)
    side = canvas / 2
    objs = []
    for cell, (colour, shape) in zip(cells, pairs):
        size = rng.choice(tuple(SIZES))
        lo, hi = SIZES[size]
        r = rng.uniform(lo, hi) * side
        row, col = divmod(cell, 2)
        margin = r + 0.04 * side
        x = col * side + rng.uniform(margin, side - margin)
        y = row * side + rng.uniform(margin, side - margin)
        rgb = tuple(max(0, min(255, v + rng.randint(-18, 18))) for v in COLOURS[colour])
        objs.append(Obj(shape, colour, size, cell, round(x, 2), round(y, 2), round(r, 2), rgb))
    return objs


def render(objs: list[Obj], canvas: int, rng: random.Random) -> Image.Image:
    grey = rng.randint(15, 70)
    image = Image.new("RGB", (canvas, canvas), (grey, grey, grey))
    draw = ImageDraw.Draw(image)
    for o in objs:
        draw_shape(draw, o)
    return image


SPLIT_SEEDS = {"train": 1, "val": 2, "test": 3, "compositional": 4}


def write_split(out: Path, split: str, n: int, seed: int, canvas: int) -> None:
    rng = random.Random(seed * 1000 + SPLIT_SEEDS[split])
    (out / "images" / split).mkdir(parents=True, exist_ok=True)
    tsv, canonical, jsonl = ["image\tcaption"], ["image\tcaption"], []
    for i in range(n):
        objs = sample_scene(rng, canvas, compositional=split == "compositional")
        rel = f"images/{split}/{i:05d}.png"
        render(objs, canvas, rng).save(out / rel, optimize=False, compress_level=1)
        caps = captions(objs)
        tsv += [f"{rel}\t{c}" for c in caps]
        canonical.append(f"{rel}\t{caps[0]}")
        jsonl.append(json.dumps({"image": rel, "caption": caps, "objects": [asdict(o) for o in objs]}))
    (out / f"{split}.tsv").write_text("\n".join(tsv) + "\n", encoding="utf-8")
    (out / f"{split}.canonical.tsv").write_text("\n".join(canonical) + "\n", encoding="utf-8")
    (out / f"{split}.jsonl").write_text("\n".join(jsonl) + "\n", encoding="utf-8")


def generate(out: str | Path, sizes: dict[str, int], seed: int = 1, canvas: int = 128) -> Path:
    """Write every split under `out` (skipped when manifest.json already records these settings)."""
    out = Path(out)
    manifest = {"version": VERSION, "seed": seed, "canvas": canvas, "sizes": sizes,
                "held_out_pairs": [list(p) for p in HELD_OUT_PAIRS]}
    path = out / "manifest.json"
    if path.is_file() and json.loads(path.read_text(encoding="utf-8")) == manifest:
        return out
    out.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # written last: a half-generated directory is never "done"
    for split, n in sizes.items():
        write_split(out, split, n, seed, canvas)
    path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out_dir", type=Path)
    p.add_argument("--train", type=int, default=20000)
    p.add_argument("--val", type=int, default=500)
    p.add_argument("--test", type=int, default=500)
    p.add_argument("--compositional", type=int, default=500)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--canvas", type=int, default=128, help="image side in pixels")
    args = p.parse_args(argv)
    sizes = {"train": args.train, "val": args.val, "test": args.test, "compositional": args.compositional}
    generate(args.out_dir, sizes, args.seed, args.canvas)
    print(f"wrote {sum(sizes.values())} scenes to {args.out_dir}")


if __name__ == "__main__":
    try:
        main()
    except OSError as e:
        sys.exit(f"error: {e}")
