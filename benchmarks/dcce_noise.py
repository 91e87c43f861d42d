#!/usr/bin/env python
"""How well dual conditional cross-entropy finds noise: clean pairs with noise injected at known rates,
scored by a forward and a backward model, the worst pairs removed.

    python benchmarks/dcce_noise.py --forward runs/quickstart/model --backward runs/quickstart-de-en/model \\
        [--src F --tgt F] [--limit 500] [--rate 0.05] [--threads 1]

The clean pairs: the first `--limit` of `--src`/`--tgt` (default: the quickstart's held-out test set
beside the forward model). Each noise kind replaces `--rate` of the targets (the others stay clean):

    misaligned   another pair's target
    copy         the source itself (untranslated)
    truncated    the first half of its words
    repeated     its first word six times (a looping output)
    partial      the target with half of another pair's target appended

The filter (`DualCrossEntropyFilter`, keep_share = the clean share) removes as many pairs as were
noised; printed: per kind, the share removed (recall), and the share of clean pairs removed, for
dcce and, beside it, for the forward model's cross-entropy alone (one model, per token).
"""

from __future__ import annotations

import argparse
import logging
import random
from pathlib import Path

from common import machine_info

from seq2seq.data.dcce import DcceScore, DualCrossEntropyFilter
from seq2seq.inference.scoring import DualScorer
from seq2seq.inference.translator import Translator
from seq2seq.text.lines import read_input_lines

KINDS = ("misaligned", "copy", "truncated", "repeated", "partial")


def noised(srcs: list[str], tgts: list[str], rate: float, seed: int) -> tuple[list[str], list[str | None]]:
    """The targets with `rate` of them noised per kind, and each pair's kind (None: clean)."""
    rng = random.Random(seed)
    n = len(tgts)
    order = list(range(n))
    rng.shuffle(order)
    per_kind = round(rate * n)
    kind: list[str | None] = [None] * n
    out = list(tgts)
    for j, name in enumerate(KINDS):
        for i in order[j * per_kind: (j + 1) * per_kind]:
            other = (i + 1 + rng.randrange(n - 1)) % n
            words = tgts[i].split()
            out[i] = {"misaligned": tgts[other],
                      "copy": srcs[i],
                      "truncated": " ".join(words[: max(1, len(words) // 2)]),
                      "repeated": " ".join([words[0]] * 6) if words else "",
                      "partial": tgts[i] + " " + " ".join(tgts[other].split()[: len(tgts[other].split()) // 2])}[name]
            kind[i] = name
    return out, kind


def report(name: str, keep: list[bool], kind: list[str | None]) -> None:
    cells = []
    for k in KINDS:
        rows = [i for i, x in enumerate(kind) if x == k]
        cells.append(f"{sum(not keep[i] for i in rows) / max(1, len(rows)):7.0%}")
    clean = [i for i, x in enumerate(kind) if x is None]
    lost = sum(not keep[i] for i in clean) / max(1, len(clean))
    print(f"{name:28} {' '.join(cells)} {lost:11.1%}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--forward", type=Path, required=True)
    p.add_argument("--backward", type=Path, required=True)
    p.add_argument("--src", type=Path, default=None, help="default: FORWARD/../data/test.en")
    p.add_argument("--tgt", type=Path, default=None, help="default: FORWARD/../data/test.de")
    p.add_argument("--limit", type=int, default=500)
    p.add_argument("--rate", type=float, default=0.05, help="share of the pairs noised, per kind")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    logging.basicConfig(level=logging.ERROR)
    import torch

    torch.set_num_threads(args.threads)
    print(machine_info(args.threads))
    data = args.forward.parent / "data"
    srcs = read_input_lines(str(args.src or data / "test.en"))[: args.limit]
    tgts = read_input_lines(str(args.tgt or data / "test.de"))[: args.limit]
    tgts, kind = noised(srcs, tgts, args.rate, args.seed)
    share = sum(k is None for k in kind) / len(kind)
    forward, backward = Translator.load(args.forward, device="cpu"), Translator.load(args.backward, device="cpu")
    dcce = DualCrossEntropyFilter(DualScorer(forward, backward), keep_share=share)
    scores = dcce.scores(srcs, tgts)
    print(f"\n{len(srcs)} pairs, {args.rate:.0%} noised per kind ({1 - share:.0%} in all); the best {share:.0%} kept")
    print(f"{'removed':28} {' '.join(f'{k:>7}' for k in KINDS)} {'clean lost':>11}")
    report("dcce (forward + backward)", dcce.decide(scores), kind)
    one_model = [DcceScore(s.h_forward, s.h_forward) for s in scores]  # the dcce of H, H is H: ranked by H_f alone
    report("forward cross-entropy only", dcce.decide(one_model), kind)


if __name__ == "__main__":
    main()
