#!/usr/bin/env python
"""Kill soak: a training run killed with SIGKILL at random moments always resumes and ends as if never killed.

    python benchmarks/kill_soak.py                      # 24 kills (default), ~5 min on 2 cores
    python benchmarks/kill_soak.py --kills 40 --seed 2

1. A reference run: `seq2seq train` of a small model on a generated corpus (seq2seq.data.synthetic),
   uninterrupted, with frequent validation (BLEU decoding) and checkpoints.
2. The same run in a fresh directory (a round), started as `seq2seq train ... --resume` again and
   again and killed with SIGKILL each time, at moments of three kinds in turn, until it finishes;
   rounds follow one another until --kills kills in all:
   * during a checkpoint write: as soon as a new temporary file (`.*.tmp`, `train_state.new/`) appears;
   * during validation: a random moment after the log line of a step that validates;
   * at a random moment of what is left of the run (start-up, tokenizer training, steps, saves).
   After every kill the directory must hold no corrupt file: train_state/ (if any) loads whole
   (weights, optimizer state, progress), every checkpoint and model.safetensors load, and the next
   start must resume (never refuse the directory, never start over once a state was saved).
3. Each round's final weights, best weights, logged history (log.csv: every step and loss) and
   final training loss are compared with the reference run's, and no temporary file may be left. The tolerance is the one of tests/test_train.py's exact resume (weights within
   atol 1e-6 + rtol 1e-5, losses equal to the logged 4 decimals): a resumed run replays exactly.

Prints one line per kill and a summary; exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import csv
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import machine_info  # noqa: E402

CONFIG = """\
data:
  train_src: {data}/train.en
  train_tgt: {data}/train.de
  valid_src: {data}/valid.en
  valid_tgt: {data}/valid.de
tokenizer:
  vocab_size: 400
model:
  d_model: 64
  heads: 4
  ffn_dim: 128
  layers: 2
training:
  seed: 7
  max_tokens: 1024
  lr: 0.002
  warmup_steps: 20
  max_steps: {steps}
  valid_every: {valid_every}
  checkpoint_every: {checkpoint_every}
  keep_last: 3
  log_every: {valid_every}
  device: cpu
  threads: 1
  precision: fp32
  valid_bleu: true
"""


def write_corpus(out: Path, n_train: int, seed: int) -> None:
    from seq2seq.data.synthetic import make_splits, write_splits

    write_splits(make_splits(n_train=n_train, n_valid=60, n_test=10, seed=seed), out)


def start(config: Path, out_dir: Path) -> tuple[subprocess.Popen, queue.Queue]:
    """`seq2seq train CONFIG -o OUT --resume` with its stderr lines on a queue."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "seq2seq", "train", str(config), "-o", str(out_dir), "--resume"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in proc.stderr:  # type: ignore[union-attr]
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return proc, lines


def writing(out_dir: Path, before: set[Path]) -> bool:
    """Is a save in progress (a temporary file that was not there at the start, or the new train state)?"""
    return (out_dir / "train_state.new").exists() or bool(
        (set(out_dir.glob(".*.tmp")) | set((out_dir / "checkpoints").glob(".*.tmp"))) - before)


def check_directory(out_dir: Path) -> tuple[int | None, list[str]]:
    """(the step train_state/ holds or None, problems): every file a resume or a user reads must load."""
    from seq2seq.storage.model_dir import ModelDir
    from seq2seq.storage.weights import load_weights
    from seq2seq.training.run_state import load_objects
    from seq2seq.storage.atomic import read_json

    problems = []
    model_dir = ModelDir(out_dir)
    state = model_dir.train_state()
    step = None
    try:
        if state is not None:
            load_weights(state / "model.safetensors")
            load_objects(state)
            step = read_json(state / "state.json")["step"]
        for path in [*(out_dir / "checkpoints").glob("step_*.safetensors"), out_dir / "model.safetensors"]:
            if path.exists():
                load_weights(path)
        if state is None and (out_dir / "model.safetensors").exists():
            problems.append("model.safetensors without train_state/: a restart would take it for a finished model")
    except Exception as e:  # noqa: BLE001 - any failure to load is what this soak looks for
        problems.append(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    return step, problems


def history(out_dir: Path) -> list[dict[str, str]]:
    with open(out_dir / "log.csv", encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def soak_round(config: Path, soaked: Path, reference: Path, run_seconds: float, args: argparse.Namespace,
               rng: random.Random, kinds: list[str], kills_before: int) -> tuple[list[str], int, int]:
    """One training run started again and again (killed each time, up to --kills in all) until it
    finishes; then compared with the reference. Returns (failures, kills, starts)."""
    import torch

    from seq2seq.storage.weights import load_weights

    failures: list[str] = []
    kills, starts = 0, 0
    last_step: int | None = None
    while True:
        before = set(soaked.glob(".*.tmp")) | set((soaked / "checkpoints").glob(".*.tmp"))
        proc, lines = start(config, soaked)
        starts += 1
        total = kills_before + kills
        kind = kinds[total % len(kinds)] if total < args.kills else None
        began = time.time()
        left = 1.0 - (last_step or 0) / args.steps  # the share of the run still to do
        deadline = began + 2.0 + rng.uniform(0.0, 0.9) * left * run_seconds  # ~2 s to start a process
        killed = False
        while proc.poll() is None and kind is not None:
            if kind == "checkpoint write":
                killed = writing(soaked, before)
            elif kind == "random moment":
                killed = time.time() >= deadline
            else:  # validation: a random moment after the log line of a step that validates
                try:
                    line = lines.get(timeout=0.005) or ""
                except queue.Empty:
                    line = ""
                if "step " in line and ": loss " in line:
                    step = int(line.split("step ", 1)[1].split(":", 1)[0])
                    if step % args.valid_every == 0 and step < args.steps:
                        time.sleep(rng.uniform(0.0, 0.4))  # validation decodes 60 sentences: ~0.5 s
                        killed = True
            if killed:
                proc.send_signal(signal.SIGKILL)
                break
            if kind != "validation":
                time.sleep(0.002)
        code = proc.wait()
        if not killed:
            if code != 0:
                tail = [item for item in iter(lines.get, None) if item]
                failures.append(f"exit {code} instead of resuming: {tail[-1] if tail else ''}")
            break
        kills += 1
        step, problems = check_directory(soaked)
        if last_step is not None and step is None:
            problems.append(f"train_state/ was at step {last_step}, now gone")
        if last_step is not None and step is not None and step < last_step:
            problems.append(f"train_state/ went back from step {last_step} to {step}")
        last_step = step if step is not None else last_step
        failures += [f"kill {kills_before + kills} ({kind}): {problem}" for problem in problems]
        print(f"kill {kills_before + kills:2d} ({kind}, {time.time() - began:4.1f} s after the start): train_state "
              f"at step {'-' if step is None else step}{'; ' + '; '.join(problems) if problems else ''}")
    if failures:
        return failures, kills, starts
    ref_log, soak_log = history(reference), history(soaked)
    if [r["step"] for r in ref_log] != [r["step"] for r in soak_log]:
        failures.append("log.csv steps differ")
    for a, b in zip(ref_log, soak_log):
        for key in ("train_loss", "valid_loss", "valid_bleu"):
            if a.get(key) and b.get(key) and abs(float(a[key]) - float(b[key])) > 1e-4:
                failures.append(f"step {a['step']}: {key} {a[key]} (reference) vs {b[key]} (killed)")
    worst = 0.0
    for name in ("train_state/model.safetensors", "model.safetensors"):
        ref, got = load_weights(reference / name), load_weights(soaked / name)
        worst = max(worst, max((ref[k] - got[k]).abs().max().item() for k in ref))
        if any(not torch.allclose(ref[k], got[k], atol=1e-6, rtol=1e-5) for k in ref):
            failures.append(f"{name} differs from the reference")
    leftovers = [str(p.relative_to(soaked)) for p in [*soaked.glob(".*.tmp"), *soaked.glob("train_state.*")]]
    if leftovers:
        failures.append(f"left behind: {leftovers}")
    final = [r for r in ref_log if r.get("train_loss")][-1]
    final_soak = [r for r in soak_log if r.get("train_loss")][-1]
    print(f"round done after {kills} kills: final training loss {final_soak['train_loss']} (reference "
          f"{final['train_loss']}), largest weight difference {worst:.1e}, {len(failures)} failures")
    return failures, kills, starts


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=24)
    p.add_argument("--steps", type=int, default=300, help="training steps of the run")
    p.add_argument("--valid-every", type=int, default=30)
    p.add_argument("--checkpoint-every", type=int, default=10)
    p.add_argument("--n-train", type=int, default=3000, help="generated training pairs")
    p.add_argument("--seed", type=int, default=1, help="seed of the kill moments")
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/seq2seq-kill-soak"))
    args = p.parse_args()

    import shutil

    print(machine_info(1))
    shutil.rmtree(args.work_dir, ignore_errors=True)
    data = args.work_dir / "data"
    write_corpus(data, args.n_train, seed=3)
    config = args.work_dir / "config.yaml"
    config.write_text(CONFIG.format(data=data, steps=args.steps, valid_every=args.valid_every,
                                    checkpoint_every=args.checkpoint_every), encoding="utf-8")

    reference = args.work_dir / "reference"
    t = time.time()
    proc, _ = start(config, reference)
    if proc.wait() != 0:
        print("the reference run failed")
        return 1
    run_seconds = time.time() - t
    print(f"reference run: {args.steps} steps in {run_seconds:.1f} s (process start included)")

    rng = random.Random(args.seed)
    kinds = ["checkpoint write", "validation", "random moment"]
    failures: list[str] = []
    kills, starts, rounds = 0, 0, 0
    while kills < args.kills:  # rounds: each a fresh directory, killed until it finishes, then compared
        rounds += 1
        soaked = args.work_dir / f"killed_{rounds}"
        round_failures, round_kills, round_starts = soak_round(config, soaked, reference, run_seconds, args, rng, kinds,
                                                               kills)
        kills += round_kills
        starts += round_starts
        failures += [f"round {rounds}: {f}" for f in round_failures]

    print(f"{kills} kills in {rounds} rounds ({starts} starts); {len(failures)} failures")
    for failure in failures[:20]:
        print("  " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
