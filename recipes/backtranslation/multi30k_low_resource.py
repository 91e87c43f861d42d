#!/usr/bin/env python
"""The low-resource Multi30K back-translation experiment (issue 42), one command:

    python recipes/backtranslation/multi30k_low_resource.py DATA_DIR [--output-dir runs/m30k_lowres] [--jobs 2]

DATA_DIR holds Multi30K (train/val/test_2016_flickr .en/.de, .gz or plain). The setting:

* 5,000 parallel pairs drawn from the training set (seeded: --seed);
* the German side of the other 24,000 training pairs as monolingual text (their English is never
  written anywhere, so no run can see it);
* the 5k-only en->de model, the de->en reverse model on the same 5k;
* back-translation of the 24k German with the reverse model by beam (5), unrestricted sampling and
  noised beam (Edunov et al. 2018), each used untagged and tagged <BT> (Caswell et al. 2019): six
  forward models on 5k real + 24k synthetic pairs;
* the full 29k parallel model as the upper bound.

Every training has the same step budget (--steps; the 5k-only ones --small-steps) and the same
settings (--set adds overrides), so the runs differ only in their data; step budgets, not time
budgets, so two runs sharing the CPU do not change each other's results. --jobs runs that many
commands at once, each on --threads CPU threads. Every run is scored on val and test_2016_flickr
(BLEU and chrF of beam 5, `seq2seq test`); the choice among the back-translation settings is made on
val and the chosen one's test figure is reported beside the gap it closes. OUTPUT_DIR/results.json
and results.md hold the table; run again after a stop to continue (finished steps are skipped).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "recipes"))

from jobs import Job, Trainer, find, markdown_table, read_lines, run_main, schedule, write_lines  # noqa: E402

log = logging.getLogger("recipe")

# The settings of every training (chosen for a 1-thread run of ~20 minutes; the slow-machine settings
# of recipes/multi30k with a smaller joint vocabulary for 5k pairs and a warmup that fits the budget).
SETTINGS = ["training.max_tokens=1600", "training.lr=0.002", "training.warmup_steps=300", "data.subword_alpha=null",
            "tokenizer.vocab_size=4000", "training.valid_every=200", "training.checkpoint_every=200",
            "training.cooldown_patience=null", "training.log_every=100"]

def split_corpus(data: Path, out: Path, pairs: int, seed: int, mono_lines: int | None) -> dict[str, Path]:
    """Write the seeded 5k parallel pairs and the German of the rest (the monolingual text) into `out`."""
    files = {"par.en": out / "parallel.en", "par.de": out / "parallel.de", "mono.de": out / "mono.de"}
    if all(p.is_file() for p in files.values()):
        return files
    out.mkdir(parents=True, exist_ok=True)
    en, de = read_lines(find(data, "train", "en")), read_lines(find(data, "train", "de"))
    order = list(range(len(en)))
    random.Random(seed).shuffle(order)
    chosen, rest = order[:pairs], order[pairs:][:mono_lines]
    write_lines(files["par.en"], [en[i] for i in chosen])
    write_lines(files["par.de"], [de[i] for i in chosen])
    write_lines(files["mono.de"], [de[i] for i in rest])
    log.info("split: %d parallel pairs, %d monolingual German lines (seed %d)", len(chosen), len(rest), seed)
    return files


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", type=Path, help="the Multi30K directory")
    p.add_argument("--output-dir", type=Path, default=Path("runs/m30k_lowres"))
    p.add_argument("--pairs", type=int, default=5000, help="parallel pairs drawn from the training set")
    p.add_argument("--mono-lines", type=int, default=None, help="at most this many monolingual lines (default: all)")
    p.add_argument("--seed", type=int, default=1, help="the seed of the draw and of every training")
    p.add_argument("--steps", type=int, default=1000, help="the step budget of each 29k-pair training")
    p.add_argument("--small-steps", type=int, default=800, help="the step budget of the 5k-pair trainings")
    p.add_argument("--jobs", type=int, default=2, help="commands run at once")
    p.add_argument("--threads", type=int, default=1, help="CPU threads of each command")
    p.add_argument("--config", type=Path, default=ROOT / "configs" / "multi30k_en_de.yaml")
    p.add_argument("--set", dest="overrides", action="append", default=[], help="a config override of every training")
    p.add_argument("--only", action="append", default=None,
                   help="run only these forward models (e.g. --only beam --only beam+tag); repeatable")
    p.add_argument("--real-weight", dest="real_weights", action="append", type=int, default=None,
                   help="the 5k real pairs' corpus weight in the mixed corpus (repetitions; default 1); repeatable: "
                        "each weight is one more forward model per variant, named +realW for W > 1")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    out, data = args.output_dir.resolve(), args.data.resolve()
    files = split_corpus(data, out / "data", args.pairs, args.seed, args.mono_lines)
    val = (find(data, "val", "en"), find(data, "val", "de"))
    test = (find(data, "test_2016_flickr", "en"), find(data, "test_2016_flickr", "de"))
    reverse = lambda pair: pair[::-1]  # noqa: E731 - de -> en
    trainer = Trainer(args.config.resolve(), out, [*SETTINGS, f"training.seed={args.seed}", *args.overrides],
                      args.threads)

    def train(name: str, steps: int, data_sets: list[str], direction: Callable = lambda pair: pair) -> None:
        """Train OUT/NAME and score it on val and test (en -> de; direction=reverse: de -> en)."""
        sets = [*data_sets, f"data.valid_src={direction(val)[0]}", f"data.valid_tgt={direction(val)[1]}"]
        model = trainer.train(name, steps, sets)
        scores = {split: trainer.score(model, *direction(pair), model / f"{split}.hyp")
                  for split, pair in (("val", val), ("test", test))}
        (model / "scores.json").write_text(json.dumps(scores) + "\n", encoding="utf-8")

    def plain(src: Path, tgt: Path) -> list[str]:
        return [f"data.train_src={src}", f"data.train_tgt={tgt}"]

    def back_translate(method: str) -> None:
        search = ["--seed", args.seed] if method == "sample" else ["--beam", 5]
        trainer.run("back-translate", out / "reverse", "-i", files["mono.de"], "-o", out / f"bt_{method}",
                    "--method", method, *search, "--no-progress")

    def forward(name: str, method: str, tagged: bool, real_weight: int) -> None:
        corpus = json.loads((out / f"bt_{method}" / "summary.json").read_text(encoding="utf-8"))["corpus"]
        corpus = {**corpus, "tag": "<BT>" if tagged else None}
        real = {"train_src": str(files["par.en"]), "train_tgt": str(files["par.de"]), "weight": real_weight}
        reserved = ['data.reserved=["<BLANK>"]'] if method == "noised-beam" else []
        sets = ["data.train_src=null", "data.train_tgt=null", f"data.corpora={json.dumps([real, corpus])}", *reserved]
        train(name, args.steps, sets)

    # Edunov et al.'s three methods untagged and Caswell et al.'s tagged beam first, the other tagged ones last
    variants = [("beam", False), ("beam", True), ("sample", False), ("noised-beam", False), ("sample", True),
                ("noised-beam", True)]
    if args.only:
        variants = [(m, t) for m, t in variants if f"{m}{'+tag' if t else ''}" in args.only]
    methods = {m for m, _ in variants}  # only the back-translations some variant uses are made

    def back_translation(method: str) -> Job:
        return Job(f"bt_{method}", lambda: back_translate(method), out / f"bt_{method}" / "summary.json",
                   after=("reverse",))

    en, de = find(data, "train", "en"), find(data, "train", "de")
    jobs = [
        Job("5k", lambda: train("5k", args.small_steps, plain(files["par.en"], files["par.de"])),
            out / "5k" / "scores.json"),
        Job("reverse", lambda: train("reverse", args.small_steps, plain(files["par.de"], files["par.en"]), reverse),
            out / "reverse" / "scores.json"),
        *(back_translation(m) for m in ("beam", "sample") if m in methods),
        Job("29k", lambda: train("29k", args.steps, plain(en, de)), out / "29k" / "scores.json"),
        *(back_translation(m) for m in ("noised-beam",) if m in methods),
    ]
    for weight in args.real_weights or [1]:
        for method, tagged in variants:
            name = f"fwd_{method}{'+tag' if tagged else ''}{f'+real{weight}' if weight != 1 else ''}"
            jobs.append(Job(name, lambda n=name, m=method, t=tagged, w=weight: forward(n, m, t, w),
                            out / name / "scores.json", after=(f"bt_{method}",)))

    seconds = schedule(jobs, args.jobs)
    report(out, jobs, seconds)


def report(out: Path, jobs: list[Job], seconds: dict[str, float]) -> None:
    """results.json (every run's scores, wall time, and the synthetic corpora's counts) and results.md."""
    path = out / "results.json"
    previous = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    results = {"runs": previous.get("runs", {}), "synthetic": {}}
    for job in jobs:
        if job.name.startswith("bt_"):
            results["synthetic"][job.name] = json.loads(job.done.read_text(encoding="utf-8"))["counts"]
            continue
        entry = {**results["runs"].get(job.name, {}), **json.loads(job.done.read_text(encoding="utf-8"))}
        if job.name in seconds:
            entry["train_and_score_seconds"] = seconds[job.name]
        results["runs"][job.name] = entry
    runs = results["runs"]
    bt = {k: v for k, v in runs.items() if k.startswith("fwd_")}
    if bt and "5k" in runs and "29k" in runs:
        best = max(bt, key=lambda k: bt[k]["val"]["bleu"])  # chosen on val
        low, high = runs["5k"]["test"]["bleu"], runs["29k"]["test"]["bleu"]
        results["chosen_on_val"] = best
        results["gap_closed"] = round((bt[best]["test"]["bleu"] - low) / (high - low), 3) if high != low else None
    path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    rows = [[name, r["val"]["bleu"], r["val"]["chrf"], r["test"]["bleu"], r["test"]["chrf"],
             round(r["train_and_score_seconds"] / 60, 1) if "train_and_score_seconds" in r else "?"]
            for name, r in runs.items()]
    lines = [markdown_table(["run", "val BLEU", "val chrF", "test BLEU", "test chrF", "minutes"], rows)]
    if results.get("gap_closed") is not None:
        lines.append(f"\nChosen on val: {results['chosen_on_val']}; it closes {results['gap_closed']:.0%} of the "
                     "5k -> 29k test BLEU gap.")
    (out / "results.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    log.info("results: %s\n%s", out / "results.md", "\n".join(lines))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    run_main(main)
