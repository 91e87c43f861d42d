"""A refactor's check: two checkouts decode the same sentences, interleaved; same outputs, same speed?

    git worktree add /tmp/base HEAD                      # the code before the change
    python benchmarks/refactor_ab.py --base /tmp/base --model-dir runs/terminology/plain \\
        --data-dir ../shared/data/multi30k --rounds 7

Each round runs one process per checkout (base, then this one; the next round the other way round),
each loading --model-dir and translating the first --limit sentences of val.en on one thread: beam 5,
beam 5 with one constraint per sentence (the reference's longest word), and greedy. A digest of every
output text and score tells whether the two checkouts decode bit-identically; the table gives each
mode's median and best seconds per checkout and their ratio (this checkout / base).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("beam5", "constrained", "greedy")

# The timed part, run in a fresh process with the checkout first on sys.path.
CHILD = r"""
import gzip, hashlib, json, sys, time
import torch
torch.set_num_threads(1)
from seq2seq.inference.translator import Translator
model_dir, data_dir, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = Translator.load(model_dir, device="cpu")
src = [l.rstrip("\n") for l in gzip.open(f"{data_dir}/val.en.gz", "rt", encoding="utf-8")][:limit]
ref = [l.rstrip("\n") for l in gzip.open(f"{data_dir}/val.de.gz", "rt", encoding="utf-8")][:limit]
constraints = [[max(r.split(), key=len).strip(".,")] for r in ref]
t.translate(src[:10], beam=5)  # warm-up
times, outputs = {}, []
for name, options in (("beam5", dict(beam=5)), ("constrained", dict(beam=5, constraints=constraints)),
                      ("greedy", dict(greedy=True))):
    start = time.perf_counter()
    results = t.translate_nbest(src, **options)
    times[name] = time.perf_counter() - start
    outputs.append([(h[0].text, h[0].score) if h else None for h in results])
print(json.dumps({**times, "digest": hashlib.md5(repr(outputs).encode()).hexdigest()}))
"""


def run_once(tree: Path, args: argparse.Namespace) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(args.model_dir.resolve()), str(args.data_dir.resolve()),
                          str(args.limit)], cwd=tree, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"the checkout {tree} failed to decode: {last}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", type=Path, required=True, help="the checkout to compare with (e.g. a git worktree)")
    p.add_argument("--model-dir", type=Path, required=True, help="a trained text model directory")
    p.add_argument("--data-dir", type=Path, required=True, help="Multi30K: val.{en,de}.gz")
    p.add_argument("--limit", type=int, default=250, help="sentences of val")
    p.add_argument("--rounds", type=int, default=5, help="processes per checkout (interleaved)")
    p.add_argument("--json", type=Path, default=None, help="also write the table's figures here")
    args = p.parse_args(argv)
    trees = {"base": args.base.resolve(), "this": ROOT}
    runs: dict[str, list[dict]] = {"base": [], "this": []}
    for r in range(args.rounds):
        for name in (("base", "this") if r % 2 == 0 else ("this", "base")):
            runs[name].append(run_once(trees[name], args))
    digests = {name: {run["digest"] for run in got} for name, got in runs.items()}
    identical = len(digests["base"] | digests["this"]) == 1
    print(f"{args.limit} sentences of val, {args.rounds} rounds, one thread; outputs and scores "
          f"{'bit-identical' if identical else 'DIFFER'} between the checkouts\n")
    print("| mode | base median s | this median s | ratio | base best s | this best s | ratio |")
    print("|---|---|---|---|---|---|---|")
    table = {}
    for mode in MODES:
        b, t = [x[mode] for x in runs["base"]], [x[mode] for x in runs["this"]]
        row = {"base_median": statistics.median(b), "this_median": statistics.median(t),
               "base_best": min(b), "this_best": min(t)}
        table[mode] = row
        print(f"| {mode} | {row['base_median']:.2f} | {row['this_median']:.2f} | "
              f"{row['this_median'] / row['base_median']:.3f} | {row['base_best']:.2f} | {row['this_best']:.2f} | "
              f"{row['this_best'] / row['base_best']:.3f} |")
    if args.json:
        args.json.write_text(json.dumps({"identical": identical, "modes": table}, indent=1), encoding="utf-8")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
