#!/usr/bin/env python
"""Terminology recipe: Multi30K models trained with terms on their sources, the share chosen on val.

    python recipes/terminology/run.py ../shared/data/multi30k --output-dir runs/terminology
    python recipes/terminology/run.py ../shared/data/multi30k --shares 0.3 --base-forms --output-dir runs/lemmas
    python recipes/terminology/run.py ../shared/data/multi30k --shares 0.5 --pick rare --output-dir runs/rare
    python recipes/terminology/run.py ../shared/data/multi30k --shares 0.5 --pick rare \
        --terms-set data.terminology.resample=true --terms-set data.terminology.substitute=0.5 \
        --terms-set data.terminology.substitute_with=compounds --output-dir runs/resampled

Steps (each skipped when its result is there, a stopped training resumed; --jobs at a time):

1. the plain model: configs/multi30k_en_de.yaml for --steps steps (seed --seed);
2. one model per --shares value: the same, with `data.terminology.share` (and `base_forms` with
   --base-forms, `pick`, and any other --terms-set override): a share of the training sources annotated
   with words of their own targets, appended after <term> (docs/terminology.md). The annotated corpus is
   built and cached by the data preparation itself;
3. benchmarks/terminology.py on val for each share (terms from the val references that the plain
   model misses, rarest first): the share whose output with its terms (annotated and guaranteed by the
   beam: `--terms both`, the default of such a model) has the best val BLEU is chosen;
4. benchmarks/terminology.py on the test set with the chosen model; report.json holds every table.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "recipes"))

from jobs import Job, Trainer, find, run_main, schedule  # noqa: E402

log = logging.getLogger("recipe")
CHOSEN_BY = "terms model, both"  # the row whose val BLEU chooses the share


def benchmark(model: Path, plain: Path, data: Path, split: str, out: Path, base_forms: bool, threads: int | None,
              limit: int | None = None) -> dict:
    """benchmarks/terminology.py of `model` against `plain` on `split`, its rows written to `out` (JSON)."""
    command = [sys.executable, str(ROOT / "benchmarks" / "terminology.py"), "--model-dir", str(model),
               "--plain-dir", str(plain), "--data-dir", str(data), "--split", split, "--json", str(out)]
    command += (["--base-forms"] if base_forms else []) + (["--threads", str(threads)] if threads else [])
    command += ["--limit", str(limit)] if limit else []
    log.info("$ %s", " ".join(command[1:]))
    subprocess.run(command, check=True, cwd=ROOT)
    return json.loads(out.read_text(encoding="utf-8"))


def bleu_of(result: dict, system: str) -> float:
    return float(next(r for r in result["rows"] if r["system"] == system)["BLEU"])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data_dir", type=Path, help="Multi30K: {train,val,test_2016_flickr}.{en,de}.gz")
    p.add_argument("--output-dir", type=Path, default=Path("runs/terminology"))
    p.add_argument("--shares", type=float, nargs="+", default=[0.3, 0.6], help="data.terminology.share values")
    p.add_argument("--base-forms", action="store_true", help="annotate with base forms; give terms as lemmas")
    p.add_argument("--pick", choices=("random", "rare"), default="random",
                   help="data.terminology.pick: which target words annotate a pair (rare: the rarest first)")
    p.add_argument("--steps", type=int, default=4000, help="training steps of every model")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--config", type=Path, default=ROOT / "configs" / "multi30k_en_de.yaml")
    p.add_argument("--test", default="test_2016_flickr")
    p.add_argument("--jobs", type=int, default=2, help="trainings side by side")
    p.add_argument("--threads", type=int, default=None, help="CPU threads of each training and benchmark")
    p.add_argument("--limit", type=int, default=None, help="benchmark only the first N sentences (a smoke run)")
    p.add_argument("--set", dest="overrides", action="append", default=[], help="config override of every model")
    p.add_argument("--terms-set", dest="terms_overrides", action="append", default=[],
                   help="config override of the models trained with terms only (not the plain one), e.g. "
                        "data.terminology.resample=true")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    data, out = args.data_dir.resolve(), args.output_dir.resolve()
    files = {f"data.{side}": find(data, split, lang) for side, split, lang in (
        ("train_src", "train", "en"), ("train_tgt", "train", "de"), ("valid_src", "val", "en"),
        ("valid_tgt", "val", "de"))}
    find(data, args.test, "en")
    trainer = Trainer(args.config.resolve(), out, [f"{k}={v}" for k, v in files.items()] +
                      [f"training.seed={args.seed}", *args.overrides], args.threads)
    models = {"plain": []}
    for share in args.shares:
        models[f"share{share:g}"] = [f"data.terminology.share={share}",
                                     f"data.terminology.base_forms={str(args.base_forms).lower()}",
                                     f"data.terminology.pick={args.pick}", *args.terms_overrides]
    jobs = [Job(name, lambda name=name, sets=sets: trainer.train(name, args.steps, sets),
                out / name / "model.safetensors") for name, sets in models.items()]
    schedule(jobs, args.jobs)

    report: dict = {"steps": args.steps, "base_forms": args.base_forms, "val": {}}
    for name in models:
        if name != "plain":
            report["val"][name] = benchmark(out / name, out / "plain", data, "val", out / f"{name}.val.json",
                                            args.base_forms, args.threads, args.limit)
    chosen = max(report["val"], key=lambda name: bleu_of(report["val"][name], CHOSEN_BY))
    log.info("chosen on val: %s (val BLEU with its terms %.2f)", chosen, bleu_of(report["val"][chosen], CHOSEN_BY))
    report["chosen"] = chosen
    report["test"] = benchmark(out / chosen, out / "plain", data, args.test, out / f"{chosen}.test.json",
                               args.base_forms, args.threads, args.limit)
    (out / "report.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(f"\nchosen on val: {chosen}; report: {out / 'report.json'}")


if __name__ == "__main__":
    run_main(main)
