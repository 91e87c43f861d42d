#!/usr/bin/env python
"""Run a command on one CPU core slowed down by a given factor: a slower machine, emulated (issue 44).

    python benchmarks/slow_core.py --slowdown 1.5 -- seq2seq quickstart -o runs/qs_slow
    python benchmarks/slow_core.py --slowdown 2 --avx2 --core 0 -- python benchmarks/...

The command is pinned to `--core` beside a busy loop pinned to the same core. Linux's scheduler (CFS)
shares a core between runnable tasks in proportion to their weights, which follow the nice value
(nice 0: 1024, each step about 1.25x less); so a busy loop of weight w leaves a nice-0 command the share
1024 / (1024 + w) of the core, and a slowdown f needs w = 1024 (f - 1): nice 0 for 2x (half speed),
nice 3 (weight 526) for 1.51x. The loop never sleeps, so its share does not drift as a loop that
alternates spinning and sleeping does (the scheduler favours a task waking from sleep: such a loop
took more than half the core here). A CPU quota (cgroup cpu.cfs_quota_us) was tried first and did not
slow the command as asked on this project's VMs.

Check the emulation before trusting it: `--probe` prints the quickstart's throughput probe (seconds
per training step) alone on the core and under the emulation, a few repeats each. `--avx2` forces the
instruction set down to AVX2 (the README's AVX2-laptop stand-in), for the probe and the command.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "CT2_FORCE_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
# CFS's weight of each nice value, -5..10 (kernel/sched/core.c, sched_prio_to_weight)
WEIGHTS = {-5: 3121, -4: 2501, -3: 1991, -2: 1586, -1: 1277, 0: 1024, 1: 820, 2: 655, 3: 526, 4: 423,
           5: 335, 6: 272, 7: 215, 8: 172, 9: 137, 10: 110}
PROBE = """
import statistics, tempfile
from pathlib import Path
from seq2seq.data.synthetic import make_splits, write_splits
from seq2seq.training.quickstart import quickstart_config
from seq2seq.training.throughput import probe_run
d = Path(tempfile.mkdtemp())
files = write_splits(make_splits(n_train=2000, n_valid=100, n_test=10, seed=1), d / "data")
cfg = quickstart_config(files, d / "m", 3.5, "cpu", 1)
probe_run(cfg, steps=2, warmup=1)
xs = [probe_run(cfg, steps=3).step for _ in range(REPEATS)]
print(" ".join(f"{x:.2f}" for x in xs), "median", round(statistics.median(xs), 3))
"""


def loop_nice(slowdown: float) -> int:
    """The nice value whose busy loop leaves a nice-0 command 1/slowdown of the core (the nearest weight)."""
    if slowdown <= 1:
        raise SystemExit(f"error: --slowdown must be > 1, got {slowdown}")
    want = WEIGHTS[0] * (slowdown - 1)
    return min(WEIGHTS, key=lambda nice: abs(WEIGHTS[nice] - want))


def core_share(nice: int | None) -> float:
    """The share of the core a nice-0 command gets beside a busy loop at `nice` (None: no loop, all of it)."""
    return 1.0 if nice is None else WEIGHTS[0] / (WEIGHTS[0] + WEIGHTS[nice])


def run_slowed(command: list[str], core: int, nice: int | None, env: dict[str, str]) -> int:
    """`command` pinned to `core`, beside a busy loop at `nice` pinned there too (None: no loop)."""
    loop = None
    if nice is not None:
        loop = subprocess.Popen(["taskset", "-c", str(core), "nice", "-n", str(nice),
                                 "sh", "-c", "while :; do :; done"])
    try:
        return subprocess.call(["taskset", "-c", str(core), *command], env=env)
    finally:
        if loop is not None:
            loop.kill()
            loop.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--slowdown", type=float, required=True, help="how many times slower than the core alone (> 1)")
    p.add_argument("--core", type=int, default=0)
    p.add_argument("--avx2", action="store_true", help="force the instruction set down to AVX2")
    p.add_argument("--probe", action="store_true", help="time the quickstart's probe alone and emulated, then stop")
    p.add_argument("--repeats", type=int, default=6, help="probe repeats (--probe)")
    p.add_argument("command", nargs="*", help="the command (after --)")
    args = p.parse_args()
    nice = loop_nice(args.slowdown)
    share = core_share(nice)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", **(AVX2 if args.avx2 else {})}
    print(f"core {args.core}: a busy loop at nice {nice} leaves the command {share:.1%} of it "
          f"(a {1 / share:.2f}x slowdown)", file=sys.stderr, flush=True)
    if args.probe:
        probe = [sys.executable, "-c", PROBE.replace("REPEATS", str(args.repeats))]
        for name, loop in (("alone", None), (f"{1 / share:.2f}x slower", nice)):
            print(f"probe, {name}: ", end="", flush=True)
            run_slowed(probe, args.core, loop, {**env, "PYTHONPATH": str(ROOT)})
        return
    if not args.command:
        p.error("give the command after --, or --probe")
    raise SystemExit(run_slowed(args.command, args.core, nice, env))


if __name__ == "__main__":
    main()
