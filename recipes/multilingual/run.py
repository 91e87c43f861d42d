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
  multilingual model itself, and with the bilingual models;
* with `--language-tag decoder` (or `both`), the multilingual model with its tag as the decoder's
  first token (`data.language_tag: decoder`), the same data and budget: "multi_decoder".
  `--no-bilingual` leaves out the bilingual models and their pivot (e.g. to compare the two tag
  positions alone).

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
sys.path[:0] = [str(ROOT / "recipes"), str(Path(__file__).resolve().parent)]  # jobs.py; language_id.py

from jobs import Job, Trainer, find, markdown_table, run_main, schedule  # noqa: E402
from language_id import language_shares  # noqa: E402

log = logging.getLogger("recipe")

BILINGUAL = (("en", "de"), ("en", "fr"), ("de", "en"))  # the trained directions
ZERO_SHOT = ("de", "fr")
MULTI = {"source": "multi", "decoder": "multi_decoder"}  # the multilingual model of each tag position
PIVOT_HYP = "test.de-en-fr.hyp"  # a pivot's French, in its pivot_* directory
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
    p.add_argument("--language-tag", choices=["source", "decoder", "both"], default="source",
                   help="where the multilingual model's target-language tag goes (both: one model each)")
    p.add_argument("--no-bilingual", action="store_true", help="train no bilingual models (and no pivot through them)")
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

    def multilingual(name: str, position: str) -> None:
        corpora = [{"train_src": str(find(data, "train", s)), "train_tgt": str(find(data, "train", t)),
                    "src_lang": s, "tgt_lang": t} for s, t in BILINGUAL]
        valid_sets = [{"src": str(find(data, "val", s)), "tgt": str(find(data, "val", t)), "src_lang": s, "tgt_lang": t}
                      for s, t in BILINGUAL]
        sets = ["data.train_src=null", "data.train_tgt=null", "data.valid_src=null", "data.valid_tgt=null",
                f"data.corpora={json.dumps(corpora)}", f"data.valid_sets={json.dumps(valid_sets)}",
                f"data.sampling_temperature={args.temperature}", f"data.language_tag={position}",
                f"training.valid_every={max(args.steps * len(BILINGUAL) // 5, 1)}"]
        model = trainer.train(name, args.steps * len(BILINGUAL), sets)
        scores = {name_of(s, t): trainer.score(model, test(s), test(t), model / f"test.{name_of(s, t)}.hyp",
                                               "--tgt-lang", t)
                  for s, t in [*BILINGUAL, ZERO_SHOT]}
        write_scores(model, scores)

    def pivot(kind: str) -> None:
        """de -> en -> fr through English: with a multilingual model, or the bilingual de->en and en->fr."""
        if kind.startswith("multi"):
            to_english, to_french = [out / kind, "--tgt-lang", "en"], [out / kind, "--tgt-lang", "fr"]
        else:
            to_english, to_french = [out / "bi_de-en"], [out / "bi_en-fr"]
        where = out / f"pivot_{kind}"
        where.mkdir(parents=True, exist_ok=True)
        english = trainer.translate(to_english[0], test("de"), where / "test.de-en.hyp", *to_english[1:])
        scores = trainer.score(to_french[0], english, test("fr"), where / PIVOT_HYP, *to_french[1:])
        write_scores(where, {"de-fr": scores})

    positions = ["source", "decoder"] if args.language_tag == "both" else [args.language_tag]
    multis = {MULTI[position]: position for position in positions}
    jobs = [Job(name, lambda n=name, p=position: multilingual(n, p), out / name / "scores.json")
            for name, position in multis.items()]  # the longest runs start first
    if not args.no_bilingual:
        jobs += [Job(f"bi_{name_of(s, t)}", lambda s=s, t=t: bilingual(s, t),
                     out / f"bi_{name_of(s, t)}" / "scores.json") for s, t in BILINGUAL]
        jobs.append(Job("pivot_bi", lambda: pivot("bi"), out / "pivot_bi" / "scores.json",
                        after=("bi_de-en", "bi_en-fr")))
    jobs += [Job(f"pivot_{name}", lambda n=name: pivot(n), out / f"pivot_{name}" / "scores.json", after=(name,))
             for name in multis]
    seconds = schedule(jobs, args.jobs)
    report(out, jobs, seconds)


def write_scores(where: Path, scores: dict[str, dict[str, float]]) -> None:
    (where / "scores.json").write_text(json.dumps(scores) + "\n", encoding="utf-8")


def report(out: Path, jobs: list[Job], seconds: dict[str, float]) -> None:
    """results.json and results.md: test BLEU/chrF per direction: bilingual | each multilingual model |
    pivots (columns of the runs made)."""
    path = out / "results.json"
    previous = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    runs = {job.name: json.loads(job.done.read_text(encoding="utf-8")) for job in jobs}
    minutes = {**previous.get("minutes", {}), **{k: round(v / 60, 1) for k, v in seconds.items()}}
    multis = [name for name in MULTI.values() if name in runs]
    bilingual = "pivot_bi" in runs
    header = ["test_2016_flickr", *(["bilingual BLEU / chrF"] if bilingual else []),
              *(f"{name} BLEU / chrF" for name in multis), *(f"{name} pivot" for name in multis)]
    rows = []
    for src, tgt in [*BILINGUAL, ZERO_SHOT]:
        direction = name_of(src, tgt)
        zero_shot = direction == name_of(*ZERO_SHOT)
        row = [f"{direction} (zero-shot)" if zero_shot else direction]
        if bilingual:
            bi = runs["pivot_bi"]["de-fr"] if zero_shot else runs[f"bi_{direction}"][direction]
            row.append(f"pivot: {fmt(bi)}" if zero_shot else fmt(bi))
        row += [fmt(runs[name][direction]) for name in multis]
        row += [f"pivot: {fmt(runs[f'pivot_{name}']['de-fr'])}" if zero_shot else "" for name in multis]
        rows.append(row)
    # Is a poor zero-shot score a poor French translation or another language? (language_id.py)
    hyps = {**({"bilingual": out / "pivot_bi" / PIVOT_HYP} if bilingual else {}),  # the table's columns, in order
            **{name: out / name / f"test.{name_of(*ZERO_SHOT)}.hyp" for name in multis},
            **{f"{name} pivot": out / f"pivot_{name}" / PIVOT_HYP for name in multis}}
    languages = {run: language_shares(path.read_text(encoding="utf-8").splitlines())
                 for run, path in hyps.items() if path.is_file()}
    rows.append([f"{name_of(*ZERO_SHOT)} outputs in French",
                 *(f"{languages[run].get(ZERO_SHOT[1], 0.0):.1f}%" if run in languages else "" for run in hyps)])
    table = markdown_table(header, rows)
    path.write_text(json.dumps({"scores": runs, "minutes": minutes, "zero_shot_languages": languages}, indent=2) + "\n",
                    encoding="utf-8")
    (out / "results.md").write_text(table + "\nWall minutes per run: " + json.dumps(minutes) + "\n", encoding="utf-8")
    log.info("results: %s\n%s", out / "results.md", table)


def fmt(scores: dict[str, float]) -> str:
    return f"{scores['bleu']:.2f} / {scores['chrf']:.2f}"


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    run_main(main)
