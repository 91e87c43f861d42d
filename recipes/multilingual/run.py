#!/usr/bin/env python
"""One multilingual model against bilingual ones on Multi30K, and zero-shot translation (issue 41):

    python recipes/multilingual/run.py DATA_DIR [--output-dir runs/m30k_multilingual] [--steps 3000]

DATA_DIR holds Multi30K's train, val and test_2016_flickr in English, German and French (.gz or
plain). The experiment:

* three bilingual models, en->de, en->fr and de->en, `--steps` each;
* one multilingual model of the same size trained on the same three directions for the bilinguals'
  total budget (3 x --steps), a target-language tag (<2de>, <2fr>, <2en>) on every source, one
  joint tokenizer, corpora sampled at `--temperature`, validation BLEU per direction;
* test_2016_flickr BLEU and chrF of every direction, bilingual against multilingual (beam 5);
* the zero-shot direction de->fr (never trained: German is only ever a source into English, French
  only a target from English) against pivoting through English: de->en then en->fr with the
  multilingual model itself, and with the bilingual models.

Step budgets rather than time budgets, so runs sharing the CPU (`--jobs`, each on `--threads`
threads) do not change each other's results; each run's wall time is reported beside its scores.
Scores: OUTPUT_DIR/results.json and results.md. Run again after a stop to continue (finished steps are
skipped, a stopped training resumes).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "recipes"))

from jobs import Job, Trainer, find, markdown_table, schedule  # noqa: E402

log = logging.getLogger("recipe")

BILINGUAL = (("en", "de"), ("en", "fr"), ("de", "en"))  # the trained directions
ZERO_SHOT = ("de", "fr")
SETTINGS = ["data.subword_alpha=null", "training.cooldown_patience=null", "training.log_every=100"]


def name_of(src: str, tgt: str) -> str:
    return f"{src}-{tgt}"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", type=Path, help="the Multi30K directory (en, de, fr)")
    p.add_argument("--output-dir", type=Path, default=Path("runs/m30k_multilingual"))
    p.add_argument("--steps", type=int, default=3000,
                   help="each bilingual model's step budget (the multilingual model gets 3 times as many)")
    p.add_argument("--temperature", type=float, default=1.0,
                   help="data.sampling_temperature of the multilingual model (the corpora are the same size here)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=2, help="commands run at once")
    p.add_argument("--threads", type=int, default=1, help="CPU threads of each command")
    p.add_argument("--config", type=Path, default=ROOT / "configs" / "multi30k_en_de.yaml")
    p.add_argument("--set", dest="overrides", action="append", default=[], help="a config override of every training")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    out, data = args.output_dir.resolve(), args.data.resolve()
    trainer = Trainer(args.config.resolve(), out, [*SETTINGS, f"training.seed={args.seed}", *args.overrides],
                      args.threads)
    valid_every = [f"training.valid_every={max(args.steps // 5, 1)}"]
    test = lambda lang: find(data, "test_2016_flickr", lang)  # noqa: E731

    def bilingual(src: str, tgt: str) -> None:
        sets = [f"data.train_src={find(data, 'train', src)}", f"data.train_tgt={find(data, 'train', tgt)}",
                f"data.valid_src={find(data, 'val', src)}", f"data.valid_tgt={find(data, 'val', tgt)}", *valid_every]
        model = trainer.train(f"bi_{name_of(src, tgt)}", args.steps, sets)
        scores = trainer.score(model, test(src), test(tgt), model / f"test.{name_of(src, tgt)}.hyp")
        write_scores(model, {name_of(src, tgt): scores})

    def multilingual() -> None:
        corpora = [{"train_src": str(find(data, "train", s)), "train_tgt": str(find(data, "train", t)),
                    "src_lang": s, "tgt_lang": t} for s, t in BILINGUAL]
        valid_sets = [{"src": str(find(data, "val", s)), "tgt": str(find(data, "val", t)), "src_lang": s, "tgt_lang": t}
                      for s, t in BILINGUAL]
        sets = ["data.train_src=null", "data.train_tgt=null", "data.valid_src=null", "data.valid_tgt=null",
                f"data.corpora={json.dumps(corpora)}", f"data.valid_sets={json.dumps(valid_sets)}",
                f"data.sampling_temperature={args.temperature}",
                f"training.valid_every={max(args.steps * len(BILINGUAL) // 5, 1)}"]
        model = trainer.train("multi", args.steps * len(BILINGUAL), sets)
        scores = {name_of(s, t): trainer.score(model, test(s), test(t), model / f"test.{name_of(s, t)}.hyp",
                                               "--tgt-lang", t)
                  for s, t in [*BILINGUAL, ZERO_SHOT]}
        write_scores(model, scores)

    def pivot(kind: str) -> None:
        """de -> en -> fr through English: with the multilingual model, or the bilingual de->en and en->fr."""
        first, second = ((out / "multi", ["--tgt-lang", "en"]), (out / "multi", ["--tgt-lang", "fr"])) \
            if kind == "multi" else ((out / "bi_de-en", []), (out / "bi_en-fr", []))
        where = out / f"pivot_{kind}"
        where.mkdir(parents=True, exist_ok=True)
        english = trainer.translate(first[0], test("de"), where / "test.de-en.hyp", *first[1])
        scores = trainer.score(second[0], english, test("fr"), where / "test.de-en-fr.hyp", *second[1])
        write_scores(where, {"de-fr": scores})

    jobs = [Job(f"bi_{name_of(s, t)}", lambda s=s, t=t: bilingual(s, t), out / f"bi_{name_of(s, t)}" / "scores.json")
            for s, t in BILINGUAL]
    jobs.insert(1, Job("multi", multilingual, out / "multi" / "scores.json"))  # the longest run starts early
    jobs += [Job("pivot_multi", lambda: pivot("multi"), out / "pivot_multi" / "scores.json", after=("multi",)),
             Job("pivot_bi", lambda: pivot("bi"), out / "pivot_bi" / "scores.json", after=("bi_de-en", "bi_en-fr"))]
    seconds = schedule(jobs, args.jobs)
    report(out, jobs, seconds)


def write_scores(where: Path, scores: dict[str, dict[str, float]]) -> None:
    (where / "scores.json").write_text(json.dumps(scores) + "\n", encoding="utf-8")


def report(out: Path, jobs: list[Job], seconds: dict[str, float]) -> None:
    """results.json and results.md: test BLEU/chrF per direction, bilingual | multilingual | pivots."""
    path = out / "results.json"
    previous = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    runs = {job.name: json.loads(job.done.read_text(encoding="utf-8")) for job in jobs}
    minutes = {**previous.get("minutes", {}), **{k: round(v / 60, 1) for k, v in seconds.items()}}
    rows = []
    for src, tgt in [*BILINGUAL, ZERO_SHOT]:
        direction = name_of(src, tgt)
        if direction == name_of(*ZERO_SHOT):
            rows.append([f"{direction} (zero-shot)", f"pivot: {fmt(runs['pivot_bi']['de-fr'])}",
                         fmt(runs["multi"][direction]), f"pivot: {fmt(runs['pivot_multi']['de-fr'])}"])
        else:
            rows.append([direction, fmt(runs[f"bi_{direction}"][direction]), fmt(runs["multi"][direction]), ""])
    table = markdown_table(["test_2016_flickr", "bilingual BLEU / chrF", "multilingual BLEU / chrF",
                            "multilingual pivot"], rows)
    path.write_text(json.dumps({"scores": runs, "minutes": minutes}, indent=2) + "\n", encoding="utf-8")
    (out / "results.md").write_text(table + "\nWall minutes per run: " + json.dumps(minutes) + "\n", encoding="utf-8")
    log.info("results: %s\n%s", out / "results.md", table)


def fmt(scores: dict[str, float]) -> str:
    return f"{scores['bleu']:.2f} / {scores['chrf']:.2f}"


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
