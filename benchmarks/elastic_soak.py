#!/usr/bin/env python
"""Elastic soak: a torchrun job of two launchers survives N random worker kills and ends as if never killed.

    python benchmarks/elastic_soak.py                   # 10 kills (default), ~3 min on 2 cores
    python benchmarks/elastic_soak.py --kills 20 --seed 2 --collective-timeout 20
    python benchmarks/elastic_soak.py --kills 3 --lose-launcher   # then a launcher lost: 2 processes -> 1

1. A reference run: one `seq2seq train` process, uninterrupted, of a tiny model on a generated corpus
   (seq2seq.data.synthetic), with the soak's global batch (training.accum_steps 2).
2. The soak: two torchrun launchers on this machine (two "nodes": `--nnodes=2 --nproc-per-node=1
   --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:PORT --max-restarts=K`, gloo), the documented elastic
   command (`seq2seq train CONFIG --resume`). After each (re)start, once the run has trained
   checkpoint_every + j steps past the step it resumed from (j random below checkpoint_every), the worker
   of a random launcher is killed with SIGKILL. Each kill must be followed by a new round of workers that
   resumes from the last complete checkpoint: the time from the kill to the first step trained again is
   the recovery time, and the steps lost are those trained since that checkpoint (at most
   checkpoint_every: the kill waits until the last checkpoint step's save is on disk; a save still being
   written when rank 0 dies is lost with it). A recovery not seen within 2 x training.collective_timeout_s + 60 s is a hang.
   With --lose-launcher (`--nnodes=1:2`), the second launcher is then lost whole (agent and worker: a
   machine gone): the first must go on alone, a round of one process that logs the changed world size.
3. At the end: both launchers exit 0, the final weights equal the reference's to the tolerance of
   tests/test_distributed.py (2 processes against 1: rtol 1e-4, atol 2e-5), and no process of the job is
   left running (every process is killed in the end, whatever happened).

Prints one line per kill and a summary; exits 1 if any check failed. The helpers (`launch`, `Launcher`,
`job_processes`) are what tests/test_elastic.py launches its jobs with.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
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
  vocab_size: 300
model:
  d_model: 32
  heads: 2
  ffn_dim: 64
  layers: 1
  dropout: 0.0
  share_embeddings: true
training:
  output_dir: {out}
  seed: 7
  max_tokens: 300
  accum_steps: 2
  lr: 0.003
  warmup_steps: 2
  max_steps: {steps}
  valid_every: {steps}
  checkpoint_every: {checkpoint_every}
  keep_last: 2
  log_every: 1
  device: cpu
  threads: 1
  valid_bleu: false
  best_metric: loss
  collective_timeout_s: {timeout}
"""
RTOL, ATOL = 1e-4, 2e-5  # tests/test_distributed.py: 2 gloo processes against 1, the same global batch
STEP = re.compile(r"step (\d+): loss ")
RESUMED = re.compile(r"resumed from \S+ at step (\d+)")


def write_corpus(out: Path, n_train: int = 400, seed: int = 3) -> None:
    from seq2seq.data.synthetic import make_splits, write_splits

    write_splits(make_splits(n_train=n_train, n_valid=40, n_test=0, seed=seed), out)


def write_config(path: Path, data: Path, out: Path, steps: int, checkpoint_every: int, timeout: float) -> Path:
    path.write_text(CONFIG.format(data=data, out=out, steps=steps, checkpoint_every=checkpoint_every,
                                  timeout=timeout), encoding="utf-8")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@dataclass
class Launcher:
    """One torchrun launcher (a "node"): its elastic agent's process, the log file of the agent and its
    workers (stdout and stderr), and the network namespace it runs in (None: this machine's)."""

    index: int
    proc: subprocess.Popen
    log: Path
    netns: str | None = None
    read: int = 0  # how much of the log `new_lines` has returned

    def workers(self) -> list[int]:
        """The worker processes the agent runs now (torchrun starts each in a session of its own)."""
        return children(self.proc.pid)

    def kill_worker(self) -> int | None:
        """SIGKILL the agent's first worker; its pid, or None when it has none now."""
        for pid in self.workers():
            try:
                os.kill(pid, signal.SIGKILL)
                return pid
            except ProcessLookupError:
                continue
        return None

    def new_lines(self) -> list[str]:
        text = self.log.read_text(encoding="utf-8", errors="replace")
        end = text.rfind("\n") + 1
        lines, self.read = text[self.read:end].splitlines(), max(self.read, end)
        return lines

    def stop(self) -> None:
        """SIGKILL the workers, then the agent (and whatever else is in its process group), and reap it."""
        for pid in self.workers():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)


def launch(index: int, config: Path, log_dir: Path, port: int, *, nnodes: str = "2", max_restarts: int = 2,
           host: str = "127.0.0.1", rdzv_id: str = "soak", netns: str | None = None,
           local_addr: str | None = None, rdzv_conf: str | None = None, env: dict[str, str] | None = None) -> Launcher:
    """Start one launcher of the elastic job: `torchrun --nnodes=NNODES --nproc-per-node=1 --rdzv-backend=c10d
    --rdzv-endpoint=HOST:PORT --max-restarts=K -m seq2seq train CONFIG --resume`, niced, in a process group
    of its own (inside `ip netns exec NETNS` when netns is given). rdzv_conf: torchrun's --rdzv-conf, e.g.
    is_host=true for the launcher that hosts the rendezvous store at an address that is not its hostname's."""
    cmd = [*(["ip", "netns", "exec", netns] if netns else []), "nice", "-n", "10", sys.executable, "-m",
           "torch.distributed.run", f"--nnodes={nnodes}", "--nproc-per-node=1", "--rdzv-backend=c10d",
           f"--rdzv-endpoint={host}:{port}", f"--rdzv-id={rdzv_id}", f"--max-restarts={max_restarts}",
           *([f"--local-addr={local_addr}"] if local_addr else []), *([f"--rdzv-conf={rdzv_conf}"] if rdzv_conf else []),
           "-m", "seq2seq", "train", str(config), "--resume"]
    log = log_dir / f"launcher{index}.log"
    with open(log, "w", encoding="utf-8") as f:  # (the child holds its own copy of the descriptor)
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT,
                                env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **(env or {})})
    return Launcher(index, proc, log, netns)


def job_processes(marker: str) -> list[str]:
    """The processes (pid and command line) whose command line holds `marker` (e.g. the job's config path),
    this one excepted: what a job left running."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append(f"{proc.name}: {cmdline.strip()}")
    return found


@dataclass
class Progress:
    """What rank 0 logged so far, in either launcher's log: the last step trained, each round's resume step,
    and when (time.monotonic()) the last step line and the last resume line were read."""

    step: int = 0
    resumes: list[int] = field(default_factory=list)
    step_at: float = 0.0
    resumed_at: float = 0.0
    steps_since_resume: int = 0
    first_step_at: float | None = None

    def read(self, launchers: list[Launcher]) -> None:
        now = time.monotonic()
        for launcher in launchers:
            for line in launcher.new_lines():
                if m := RESUMED.search(line):
                    self.resumes.append(int(m.group(1)))
                    self.step, self.resumed_at, self.steps_since_resume = int(m.group(1)), now, 0
                elif m := STEP.search(line):
                    self.step, self.step_at = int(m.group(1)), now
                    self.first_step_at = self.first_step_at or now
                    self.steps_since_resume += 1


def weight_difference(reference: Path, other: Path) -> tuple[float, bool]:
    """(the largest absolute difference of the final weights of two model directories, whether all are
    within RTOL/ATOL)."""
    import torch

    from seq2seq.storage.weights import load_weights

    a, b = load_weights(reference / "train_state" / "model.safetensors"), load_weights(
        other / "train_state" / "model.safetensors")
    if a.keys() != b.keys():
        return float("inf"), False
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    return worst, all(torch.allclose(b[k], a[k], rtol=RTOL, atol=ATOL) for k in a)


def reference_run(config: Path) -> float:
    """Train `config` in one process, uninterrupted; its seconds."""
    t = time.monotonic()
    result = subprocess.run(["nice", "-n", "10", sys.executable, "-m", "seq2seq", "train", str(config)],
                            capture_output=True, text=True, cwd=ROOT, timeout=600,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    if result.returncode != 0:
        raise SystemExit(f"the reference run failed: {result.stderr.strip().splitlines()[-1:]}")
    return time.monotonic() - t


def saved_step(out_dir: Path) -> int:
    """The step of the complete train state in `out_dir` (-1 when there is none yet, or it is being swapped)."""
    from seq2seq.storage.model_dir import ModelDir

    try:
        step = ModelDir(out_dir).train_state_step()
    except (OSError, ValueError, KeyError):
        return -1
    return -1 if step is None else step


def lose_launcher(launchers: list[Launcher], progress: Progress, after: int, timeout: float,
                  failures: list[str]) -> None:
    """Lose the second launcher whole (agent and worker: a machine gone) once the run is past step `after`; the
    first must go on alone (`--nnodes=1:2`): a round of one process that resumes and says the global batch is
    kept."""
    deadline = time.monotonic() + 2 * timeout + 120
    while progress.step < after or progress.steps_since_resume == 0:
        if time.monotonic() > deadline or launchers[0].proc.poll() is not None:
            raise RuntimeError(f"no progress to step {after} before losing the second launcher")
        time.sleep(0.01)
        progress.read(launchers)
    lost_at, resumes, last = time.monotonic(), len(progress.resumes), progress.step
    launchers[1].stop()
    while len(progress.resumes) == resumes or progress.steps_since_resume == 0:
        if time.monotonic() > lost_at + 2 * timeout + 120:
            raise RuntimeError(f"the first launcher did not go on alone within {2 * timeout + 120:g} s")
        time.sleep(0.01)
        progress.read(launchers)
    alone = "resumed with 1 process(es) where the run was saved by 2" in launchers[0].log.read_text()
    print(f"second launcher lost at step {last}: the first went on alone from step {progress.resumes[-1]} after "
          f"{progress.step_at - lost_at:.1f} s{'' if alone else ' (without saying that the world changed)'}")
    if not alone:
        failures.append("the round of one process did not log the changed world size")


def soak(args: argparse.Namespace, work: Path) -> list[str]:
    """The soak (see the module docstring); its failures."""
    rng = random.Random(args.seed)
    every, timeout = args.checkpoint_every, args.collective_timeout
    config = work / "elastic.yaml"
    write_config(config, work / "data", work / "elastic", args.steps, every, timeout)
    port = free_port()
    nnodes = "1:2" if args.lose_launcher else "2"
    launchers = []
    for i in (0, 1):  # the first hosts the rendezvous store (it must outlive the job: --lose-launcher loses the second)
        launchers.append(launch(i, config, work, port, nnodes=nnodes, max_restarts=args.kills + 3, rdzv_id=f"soak{port}",
                                rdzv_conf=f"is_host={'true' if i == 0 else 'false'},last_call_timeout=2"))
        time.sleep(0.5)
    failures: list[str] = []
    progress = Progress()
    t0 = time.monotonic()
    try:
        first_start = None
        resume_from = 0
        for kill in range(1, args.kills + 1):
            target = resume_from + every + rng.randrange(every)
            if target >= args.steps:
                failures.append(f"kill {kill}: the run would end first (--steps {args.steps} is too few)")
                break
            deadline = time.monotonic() + 2 * timeout + 120
            # kill once past the target with the last checkpoint step's save complete on disk (a save in flight
            # when rank 0 dies is lost with it, and the steps lost would count from the one before)
            while progress.step < target or progress.steps_since_resume == 0 or \
                    progress.step - saved_step(work / "elastic") >= every:
                if any(p.proc.poll() is not None for p in launchers):
                    raise RuntimeError(f"a launcher exited ({[p.proc.poll() for p in launchers]}) before kill {kill}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no progress to step {target} within {2 * timeout + 120:g} s (a hang)")
                time.sleep(0.01)
                progress.read(launchers)
            if first_start is None:  # (from the launch: processes, data, tokenizer, model)
                first_start = (progress.first_step_at or progress.step_at) - t0
            victim = launchers[rng.randrange(2)]
            killed_at = time.monotonic()
            if victim.kill_worker() is None:
                raise RuntimeError(f"kill {kill}: launcher {victim.index} had no worker")
            resumes = len(progress.resumes)
            time.sleep(0.2)
            progress.read(launchers)
            last = progress.step
            hang_at = killed_at + 2 * timeout + 60
            while len(progress.resumes) == resumes or progress.steps_since_resume == 0:
                if time.monotonic() > hang_at:
                    raise RuntimeError(f"kill {kill}: no recovery within {2 * timeout + 60:g} s (a hang)")
                if all(p.proc.poll() is not None for p in launchers):
                    raise RuntimeError(f"kill {kill}: both launchers exited instead of restarting")
                time.sleep(0.01)
                progress.read(launchers)
            resume_from = progress.resumes[-1]
            recovery, lost = progress.step_at - killed_at, last - resume_from
            print(f"kill {kill:2d} (launcher {victim.index}'s worker at step {last}): resumed from step {resume_from}, "
                  f"{lost} steps lost, trained again after {recovery:.1f} s")
            if lost > every:
                failures.append(f"kill {kill}: {lost} steps lost (> checkpoint_every {every})")
            if recovery > 2 * timeout + first_start:
                failures.append(f"kill {kill}: recovery took {recovery:.1f} s (> 2 x {timeout:g} s + the first "
                                f"start's {first_start:.1f} s)")
        else:
            if args.lose_launcher:
                lose_launcher(launchers, progress, resume_from + every, timeout, failures)
            for p in launchers:
                try:
                    code = p.proc.wait(timeout=2 * timeout + 120)
                except subprocess.TimeoutExpired:
                    code = None
                if code != 0 and not (args.lose_launcher and p.index == 1):
                    failures.append(f"launcher {p.index} ended with {code}; its log: {p.log}")
        restarts = len(progress.resumes)
        print(f"{args.kills} kills, {restarts} restarts (rounds that resumed) in {time.monotonic() - t0:.1f} s")
    except RuntimeError as e:
        failures.append(str(e))
    finally:
        for p in launchers:
            p.stop()
    left = job_processes(str(config))
    if left:
        failures.append(f"{len(left)} processes left running: {left[:3]}")
    if not failures:
        worst, close = weight_difference(work / "reference", work / "elastic")
        print(f"final weights against the uninterrupted single process: largest difference {worst:.1e}")
        if not close:
            failures.append(f"final weights differ from the reference (largest {worst:.1e}, rtol {RTOL}, atol {ATOL})")
    print(f"{len(failures)} failures; 0 orphan processes" if not left else f"{len(failures)} failures")
    return failures


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--checkpoint-every", type=int, default=10)
    p.add_argument("--steps", type=int, default=0,
                   help="training steps of the run (default: enough for the kills, 2 x checkpoint_every each)")
    p.add_argument("--collective-timeout", type=float, default=10.0, help="training.collective_timeout_s")
    p.add_argument("--lose-launcher", action="store_true",
                   help="launch with --nnodes=1:2 and, after the kills, lose the second launcher whole: the job must "
                        "end with one process")
    p.add_argument("--seed", type=int, default=1, help="seed of the kill moments and victims")
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/seq2seq-elastic-soak"))
    args = p.parse_args()
    args.steps = args.steps or (args.kills + 1 + args.lose_launcher) * 2 * args.checkpoint_every

    import shutil

    print(machine_info(1))
    shutil.rmtree(args.work_dir, ignore_errors=True)
    args.work_dir.mkdir(parents=True)
    write_corpus(args.work_dir / "data")
    reference = write_config(args.work_dir / "reference.yaml", args.work_dir / "data", args.work_dir / "reference",
                             args.steps, args.checkpoint_every, args.collective_timeout)
    seconds = reference_run(reference)
    print(f"reference run: {args.steps} steps in one process in {seconds:.1f} s (process start included)")
    failures = soak(args, args.work_dir)
    for failure in failures[:20]:
        print("  " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
