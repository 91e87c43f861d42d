#!/usr/bin/env python
"""What an ensemble costs at decoding time: one model directory decoded as 1, 2 and 4 members.

    python benchmarks/ensemble_cost.py --model-dir runs/multi30k_en_de [--threads 1] [--limit 300]

Identical members give identical hypotheses, so every row does the same search and the ratio is the
cost of the members alone (each runs its own encoder, decoder and key/value cache). Beam 5 on the
first `--limit` sentences of test_2016_flickr; each row the faster of `--repeats` runs, as a ratio to
one member in the same run. Quality of real ensembles: benchmarks/ensemble.py.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from common import DATA, machine_info, read_gz

from seq2seq.inference.translator import Translator


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", required=True)
    p.add_argument("--data-dir", type=Path, default=DATA)
    p.add_argument("--members", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--limit", type=int, default=300)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    import torch

    torch.set_num_threads(args.threads)
    print(machine_info(args.threads))
    src = read_gz(args.data_dir / "test_2016_flickr.en.gz", args.limit)
    seconds: dict[int, float] = {}
    for _ in range(args.repeats):
        for n in args.members:
            translator = Translator.load([args.model_dir] * n, device=args.device)
            translator.translate(src[:16], beam=args.beam)  # warm-up
            start = time.perf_counter()
            translator.translate(src, beam=args.beam)
            seconds[n] = min(seconds.get(n, float("inf")), time.perf_counter() - start)
    print(f"\nbeam {args.beam}, {len(src)} sentences, the faster of {args.repeats} runs")
    for n in args.members:
        print(f"{n} member{'s' if n > 1 else ' '}  {seconds[n]:7.2f} s  {seconds[n] / seconds[args.members[0]]:5.2f}x")


if __name__ == "__main__":
    main()
