#!/usr/bin/env python
"""Does the throughput probe predict the loop? Probe a time-budgeted run, train it, compare the steps.

    python benchmarks/probe.py                                       # the quickstart's run (3.5 minutes)
    python benchmarks/probe.py --config configs/multi30k_en_de.yaml --minutes 10
    python benchmarks/probe.py --config configs/multi30k_en_de.yaml --minutes 6 --set training.device=cuda

The probe (`seq2seq.training.throughput.probe_run`) times the run's own steps, a validation and a save;
`estimate_steps` turns them into the steps the budget holds. The run is then trained as `seq2seq train`
would train it, in a temporary directory, and the steps it trained are set against the estimate: the
target is within 20% (issue 58). Prints the machine, the probe's figures, the estimate, the run's steps
and their ratio, and exits 1 when the ratio is outside [0.8, 1.2].
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks.common import machine_info  # noqa: E402
from seq2seq.config import Config, load_config  # noqa: E402
from seq2seq.training.experiment import run_training  # noqa: E402
from seq2seq.training.throughput import estimate_steps, probe_run  # noqa: E402


def quickstart_config(out: Path, minutes: float, device: str) -> Config:
    from seq2seq.data.synthetic import make_splits, write_splits
    from seq2seq.training.quickstart import quickstart_config as config

    files = write_splits(make_splits(seed=1), out / "data")
    return config(files, out / "model", minutes, device, seed=1)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", type=Path, default=None, help="a config file (default: the quickstart's run)")
    p.add_argument("--minutes", type=float, default=3.5, help="the training budget")
    p.add_argument("--device", default="auto")
    p.add_argument("--set", dest="overrides", action="append", default=[], help="config override")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("datasets").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="probe-bench-") as tmp:
        out = Path(tmp)
        if args.config is None:
            cfg = quickstart_config(out, args.minutes, args.device)
        else:
            cfg = load_config(args.config, [f"training.max_time_minutes={args.minutes}",
                                            f"training.output_dir={out / 'model'}", f"training.device={args.device}",
                                            "training.max_steps=10000000", *args.overrides])
        cfg = dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, max_time_minutes=args.minutes))
        started = time.perf_counter()
        probe = probe_run(cfg)
        probe_seconds = time.perf_counter() - started
        estimated = estimate_steps(cfg, probe)
        result = run_training(cfg)
    trained = result["step"]
    ratio = trained / estimated if estimated else float("nan")
    print(f"\n{machine_info(cfg.training.threads or torch.get_num_threads())}")
    print(f"run: {args.config or 'the quickstart'} {' '.join(args.overrides)}, {args.minutes:g} minutes, "
          f"device {args.device}")
    print(f"probe ({probe_seconds:.1f} s): a step {probe.step:.3f} s, warm-up {probe.warmup:.1f} s more, "
          f"a validation {probe.validation:.1f} s, a save {probe.save:.2f} s")
    print(f"estimated {estimated:,} steps; trained {trained:,} in {result['elapsed_s'] / 60:.2f} min "
          f"(stopped: {result['stop_reason']}): {ratio:.2f}x the estimate")
    return 0 if 0.8 <= ratio <= 1.2 else 1


if __name__ == "__main__":
    sys.exit(main())
