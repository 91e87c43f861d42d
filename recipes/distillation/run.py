#!/usr/bin/env python
"""Sequence-level knowledge distillation recipe (Kim & Rush 2016; Kasai et al. 2021): a trained teacher
(a model directory, or several: an ensemble) -> a student that decodes faster with about its quality.

    python recipes/distillation/run.py --teacher runs/multi30k_en_de --train-src train.en --train-tgt train.de \\
        --valid val.en val.de --test test.en test.de --output-dir runs/distill_en_de

Steps, each a `seq2seq` command (printed as it runs; a step whose result is there is skipped, and a
stopped distillation or training continues where it stopped when the script is run again):

1. `seq2seq distill` of the training sources with the teacher (beam 5), checked against the student
   config (--student-config, default configs/student_fast.yaml: 6 encoder layers, 2 decoder layers);
2. the student trained on the teacher's outputs (with --train-tgt, the real pairs too: Gordon & Duh 2019)
   with the teacher's tokenizer, for --minutes (or --steps);
3. `seq2seq test` of the teacher (beam 5), the student (beam 5) and the student (greedy) on the test
   set: BLEU, chrF, and sentences per second, in three rounds that each decode with all three on this
   machine, the fastest run of each counted; a summary table and report.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "recipes"))

from jobs import budget, run_main, train_model, training_arguments  # noqa: E402
from jobs import command as seq2seq  # noqa: E402
from jobs import rounded_scores, scores_and_speed  # noqa: E402

log = logging.getLogger("recipe")


def timed_tests(systems: dict[str, tuple[list[Path], Path, tuple[str, ...]]], src: Path, ref: Path,
                repeats: int = 3) -> dict[str, dict]:
    """`seq2seq test` scores and speed of each system (name: models, hypothesis file, search options),
    the best of `repeats` rounds: sentences per second of the translation (what `seq2seq test` measures,
    model loading excluded) and of the whole command (loading included, the same overhead for teacher and
    student). Each round runs every system once, so a machine that slows down or speeds up (another
    process starting, a core going idle) does so for all of them alike."""
    decoding = {name: 0.0 for name in systems}
    whole = {name: float("inf") for name in systems}
    results: dict[str, dict] = {}
    for _ in range(repeats):
        for name, (models, hyp, search) in systems.items():
            start = time.perf_counter()
            results[name] = scores_and_speed(models, src, ref, hyp, *search)
            whole[name] = min(whole[name], time.perf_counter() - start)
            decoding[name] = max(decoding[name], results[name]["decoding"]["sentences_per_second"])
    return {name: {**rounded_scores(r), "sentences_per_second": decoding[name],
                   "sentences_per_second_with_loading": round(r["decoding"]["sentences"] / whole[name], 1)}
            for name, r in results.items()}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--teacher", nargs="+", type=Path, required=True,
                   help="teacher model directory (several: an ensemble)")
    p.add_argument("--train-src", type=Path, required=True, help="the training sources to distill")
    p.add_argument("--train-tgt", type=Path, default=None,
                   help="their real translations: the student trains on the teacher's and these real pairs together")
    p.add_argument("--valid", nargs=2, type=Path, default=None, metavar=("SRC", "TGT"),
                   help="validation files (default: the teacher's)")
    p.add_argument("--test", nargs=2, type=Path, required=True, metavar=("SRC", "TGT"))
    p.add_argument("--output-dir", type=Path, default=Path("runs/distillation"))
    p.add_argument("--student-config", type=Path, default=ROOT / "configs" / "student_fast.yaml")
    training_arguments(p, 60.0, "the student's training", "--distill-option", "distill", "--beam=4")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    out = args.output_dir.resolve()
    teachers = [t.resolve() for t in args.teacher]
    student_config = args.student_config.resolve()
    tsrc, ttgt = (x.resolve() for x in args.test)

    real = None if args.train_tgt is None else (str(args.train_src.resolve()), str(args.train_tgt.resolve()))
    start = time.perf_counter()
    seq2seq("distill", *teachers, "-i", args.train_src.resolve(), "-o", out / "distilled", "--student-config",
            student_config, "--no-progress", *(["--references", real[1]] if real else []), *args.command_options)
    seconds = {"distill": round(time.perf_counter() - start, 1)}

    from seq2seq.cli.synthetic import student_command
    from seq2seq.config import load_config

    command = shlex.split(student_command(load_config(student_config), str(student_config), str(teachers[0]),
                                          str(out / "distilled"), real))
    sets = [command[i + 1] for i, word in enumerate(command) if word == "--set"]
    if args.valid is not None:
        sets += [f"data.valid_src={args.valid[0].resolve()}", f"data.valid_tgt={args.valid[1].resolve()}"]
    student = out / "student"
    seconds["student_training"] = round(train_model(student_config, student, [*sets, *budget(args), *args.overrides],
                                                    run=seq2seq), 1)

    results = timed_tests({
        "teacher beam 5": (teachers, out / "test.teacher.hyp", ("--beam", "5")),
        "student beam 5": ([student], out / "test.student.hyp", ("--beam", "5")),
        "student greedy": ([student], out / "test.student_greedy.hyp", ("--greedy",)),
    }, tsrc, ttgt)
    teacher, student = results["teacher beam 5"], results["student beam 5"]
    speedup = student["sentences_per_second"] / teacher["sentences_per_second"]
    with_loading = student["sentences_per_second_with_loading"] / teacher["sentences_per_second_with_loading"]
    report = {"test": results, "student_speedup_beam5": round(speedup, 2),
              "student_speedup_beam5_with_loading": round(with_loading, 2), "seconds": seconds,
              "distilled_pairs": json.loads((out / "distilled" / "summary.json").read_text())["counts"]}
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    for name, r in results.items():
        log.info("%-15s BLEU %6.2f  chrF %6.2f  %8.1f sentences/s (%.1f with loading)", name, r["bleu"], r["chrf"],
                 r["sentences_per_second"], r["sentences_per_second_with_loading"])
    log.info("student/teacher speed at beam 5: %.2fx (%.2fx with loading); report: %s", speedup, with_loading,
             out / "report.json")


if __name__ == "__main__":
    run_main(main)
