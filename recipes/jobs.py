"""What the recipes share: `seq2seq` commands (on a few CPU threads each where asked), scoring with
`seq2seq test`, training budgets, Multi30K files, and a small scheduler that runs independent
steps side by side.

An experiment is a list of `Job`s, each done when its result file exists (so a second run of the
recipe skips finished steps and a stopped training resumes), each after the jobs it needs;
`schedule` runs them `workers` at a time. `Trainer` trains a model directory with a step budget
and scores it with `seq2seq test` (sacreBLEU BLEU and chrF) on named test sets.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import shlex
import subprocess
import sys
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
log = logging.getLogger("recipe")


class RecipeStopped(Exception):
    """A recipe cannot go on; its message says why and what to fix (`run_main` prints it and exits 1)."""


def run_main(main: Callable[[], object]) -> None:
    """A recipe's entry point: `main()`, a `RecipeStopped` ending the process with its message (exit 1)."""
    try:
        main()
    except RecipeStopped as e:
        sys.exit(str(e))


def find(data: Path, split: str, lang: str) -> Path:
    """DATA/SPLIT.LANG(.gz); stops the recipe naming the file when it is missing."""
    for name in (f"{split}.{lang}.gz", f"{split}.{lang}"):
        if (data / name).is_file():
            return data / name
    raise RecipeStopped(f"recipe stopped: no {split}.{lang}(.gz) in {data}")


def read_lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def write_lines(path: Path, lines: list[str]) -> None:
    """Written whole or not at all (a temporary file renamed)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    tmp.replace(path)


def seq2seq(*args: object, threads: int | None = None) -> str:
    """Run one `seq2seq` command (on `threads` CPU threads where given); its stdout. RuntimeError when
    it fails (its own message is on stderr)."""
    command = [sys.executable, "-m", "seq2seq", *map(str, args)]
    env = dict(os.environ)
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    log.info("$ seq2seq %s", shlex.join(command[3:]))
    result = subprocess.run(command, stdout=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"`seq2seq {args[0]}` failed (exit {result.returncode}): {shlex.join(command[3:])}")
    return result.stdout


def command(*args: object) -> str:
    """`seq2seq(*args)` for a recipe that runs one step at a time: stops the recipe when it fails."""
    try:
        return seq2seq(*args)
    except RuntimeError as e:
        raise RecipeStopped(f"recipe stopped: {e}; fix what it said and run the recipe again to continue") from None


SCORED = ("bleu", "chrf")  # the metrics the recipes report


def scores_and_speed(model: Path | list[Path], src: Path, ref: Path, hyp: Path, *options: object,
                     threads: int | None = None) -> dict:
    """`seq2seq test --json` of a model (several: an ensemble) with these options, the SCORED metrics:
    {"bleu": {"score", "signature"}, "chrf": {...}, "decoding": {"sentences", "seconds", "sentences_per_second"}}."""
    models = model if isinstance(model, list) else [model]
    return json.loads(seq2seq("test", *models, "--src", src, "--ref", ref, "-o", hyp, "--metrics", ",".join(SCORED),
                              "--json", *options, threads=threads))


def rounded_scores(result: dict) -> dict[str, float]:
    """The SCORED metrics of a `scores_and_speed` result, to two decimals: {"bleu", "chrf"}."""
    return {name: round(result[name]["score"], 2) for name in SCORED}


def score(model: Path | list[Path], src: Path, ref: Path, hyp: Path, *options: object,
          threads: int | None = None) -> dict[str, float]:
    """`seq2seq test` of a model (several: an ensemble) with these options: {"bleu", "chrf"}."""
    return rounded_scores(scores_and_speed(model, src, ref, hyp, *options, threads=threads))


def budget(args: argparse.Namespace) -> list[str]:
    """The --set overrides of one training run's budget (--steps, else --minutes)."""
    if args.steps is not None:
        return ["training.max_steps=" + str(args.steps), "training.max_time_minutes=null"]
    return [f"training.max_time_minutes={args.minutes}"]


def training_arguments(p: argparse.ArgumentParser, minutes: float, trained: str, flag: str, command: str,
                       example: str) -> None:
    """--minutes, --steps and --set of the trainings, and `flag` passing options on to `seq2seq command`."""
    p.add_argument("--minutes", type=float, default=minutes, help=f"time budget of {trained}")
    p.add_argument("--steps", type=int, default=None, help="a step budget instead of --minutes")
    p.add_argument("--set", dest="overrides", action="append", default=[], help=f"config override of {trained}")
    p.add_argument(flag, dest="command_options", action="append", default=[],
                   help=f"an option for `seq2seq {command}`, e.g. {flag}={example} (repeatable)")


def train_model(config: Path, out: Path, sets: list[str], threads: int | None = None,
                run: Callable[..., str] | None = None) -> float:
    """`seq2seq train CONFIG -o OUT` with these --set overrides (budget included), on `threads` CPU threads:
    skipped when OUT holds a finished model (its weights and no train state, or a train state already at
    the `training.max_steps` of `sets`), continued with --resume when it holds a stopped run. Returns the
    wall seconds it trained (0 when skipped). `run` runs the command (default `seq2seq`, which raises
    RuntimeError when it fails; `command` stops the recipe)."""
    from seq2seq.storage.model_dir import ModelDir

    model_dir = ModelDir(out)
    state_step = model_dir.train_state_step()
    steps = [int(v) for k, _, v in (s.partition("=") for s in sets) if k == "training.max_steps" and v.isdigit()]
    done = state_step is not None and bool(steps) and state_step >= steps[-1]
    if model_dir.weights_path.is_file() and (state_step is None or done):
        log.info("%s is trained; skipping", out)
        return 0.0
    if threads:
        sets = [*sets, f"training.threads={threads}"]
    start = time.perf_counter()
    resume = ["--resume"] if state_step is not None else []
    (run or (lambda *a: seq2seq(*a, threads=threads)))(
        "train", config, "-o", out, *(x for s in sets for x in ("--set", s)), *resume)
    return time.perf_counter() - start


@dataclass
class Trainer:
    """Trains model directories under `out` from `config` with `settings` (--set overrides), each on
    `threads` CPU threads, and scores them."""

    config: Path
    out: Path
    settings: list[str]
    threads: int | None = None

    def train(self, name: str, steps: int, sets: list[str]) -> Path:
        """OUT/NAME trained for `steps` steps (`train_model`: a finished run is kept, a stopped one goes on)."""
        budget = [f"training.max_steps={steps}", "training.max_time_minutes=null"]
        train_model(self.config, self.out / name, [*sets, *self.settings, *budget], threads=self.threads)
        return self.out / name

    def score(self, model: Path, src: Path, ref: Path, hyp: Path, *options: object) -> dict[str, float]:
        """`seq2seq test` of `model` (beam 5 unless options say otherwise): {"bleu", "chrf"}."""
        return score(model, src, ref, hyp, "--beam", 5, *options, threads=self.threads)

    def translate(self, model: Path, src: Path, hyp: Path, *options: object) -> Path:
        self.run("translate", model, "-i", src, "-o", hyp, "--beam", 5, "--no-progress", *options)
        return hyp

    def run(self, *args: object) -> str:
        return seq2seq(*args, threads=self.threads)


@dataclass
class Job:
    """One step of an experiment: `run()` after the jobs named in `after`; done when `done` exists."""

    name: str
    run: Callable[[], object]
    done: Path
    after: tuple[str, ...] = field(default=())


def schedule(jobs: list[Job], workers: int) -> dict[str, float]:
    """Run the jobs whose results are missing, `workers` at a time, each after the jobs it needs, in list
    order among the ready ones; returns each run job's wall seconds. Stops the recipe at the first failure
    (the jobs running then finish first)."""
    pending = [j for j in jobs if not j.done.is_file()]
    finished = {j.name for j in jobs if j.done.is_file()}
    seconds: dict[str, float] = {}
    running: dict[Future, tuple[Job, float]] = {}
    failed: list[str] = []
    with ThreadPoolExecutor(workers) as pool:
        while (pending and not failed) or running:
            for job in [j for j in pending if set(j.after) <= finished][: workers - len(running)] if not failed else []:
                pending.remove(job)
                running[pool.submit(job.run)] = (job, time.perf_counter())
            if not running:
                raise RecipeStopped("recipe stopped: steps wait on steps that cannot run: "
                                    + ", ".join(j.name for j in pending))
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                job, start = running.pop(future)
                try:
                    future.result()
                except RuntimeError as e:
                    failed.append(str(e))
                    continue
                seconds[job.name] = round(time.perf_counter() - start, 1)
                finished.add(job.name)
                log.info("done: %s (%.1f min)", job.name, seconds[job.name] / 60)
    if failed:
        raise RecipeStopped(f"recipe stopped: {failed[0]}; fix what it said and run the recipe again to continue")
    return seconds


def markdown_table(header: list[str], rows: list[list[object]]) -> str:
    """A Markdown table; floats with two decimals."""
    cell = lambda v: f"{v:.2f}" if isinstance(v, float) else str(v)  # noqa: E731
    align = ["---"] + ["---:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
