#!/usr/bin/env python
"""Back-translation recipe: a small parallel corpus plus target-language monolingual text -> a better
forward model (Sennrich et al. 2016; Edunov et al. 2018; Caswell et al. 2019).

    python recipes/backtranslation/run.py --train train.en train.de --mono mono.de \\
        --valid val.en val.de --test test.en test.de --output-dir runs/bt_en_de

Steps, each a `seq2seq` command (printed as it runs; a step whose result is there is skipped, and a
stopped training or back-translation continues where it stopped when the script is run again):

1. the reverse model (de -> en) on the parallel corpus;
2. `seq2seq back-translate` of the monolingual file with it (--method beam | sample | noised-beam,
   tagged <BT> unless --no-tag);
3. the forward model (en -> de) on the real pairs plus the synthetic ones (data.corpora, the synthetic
   corpus with its tag and --bt-weight), and, unless --no-baseline, on the real pairs alone;
4. `seq2seq test` of each forward model on the test set (BLEU, chrF), and a summary table.

Training runs use --config (default configs/multi30k_en_de.yaml) with the data paths replaced, for
--minutes each (or --steps); --set adds any override (e.g. a smaller model for a quick look).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "recipes"))

from jobs import budget, run_main, train_model, training_arguments  # noqa: E402
from jobs import command as seq2seq  # noqa: E402
from jobs import score as test  # noqa: E402

log = logging.getLogger("recipe")


def train(args: argparse.Namespace, out: Path, data: list[str]) -> float:
    """Train --config into `out` with these data overrides and the budget (`jobs.train_model`: a finished
    model is kept, a stopped run goes on); returns the wall time in seconds."""
    return train_model(args.config, out, [*data, *budget(args), *args.overrides], run=seq2seq)


def single_corpus(src: Path, tgt: Path) -> list[str]:
    return [f"data.train_src={src.resolve()}", f"data.train_tgt={tgt.resolve()}"]


def valid(src: Path, tgt: Path) -> list[str]:
    return [f"data.valid_src={src.resolve()}", f"data.valid_tgt={tgt.resolve()}"]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", nargs=2, type=Path, required=True, metavar=("SRC", "TGT"), help="the parallel corpus")
    p.add_argument("--mono", type=Path, required=True, help="monolingual text in the target language")
    p.add_argument("--valid", nargs=2, type=Path, required=True, metavar=("SRC", "TGT"))
    p.add_argument("--test", nargs=2, type=Path, required=True, metavar=("SRC", "TGT"))
    p.add_argument("--output-dir", type=Path, default=Path("runs/backtranslation"))
    p.add_argument("--method", choices=["beam", "sample", "noised-beam"], default="beam",
                   help="how to back-translate (default: beam, the best with a small parallel corpus: "
                        "recipes/backtranslation/README.md; sample or noised-beam pay with millions of pairs)")
    p.add_argument("--no-tag", action="store_true", help="leave the synthetic sources untagged")
    p.add_argument("--bt-weight", type=float, default=1.0, help="the synthetic corpus's sampling weight")
    p.add_argument("--no-baseline", action="store_true", help="do not train the forward model on the real pairs alone")
    p.add_argument("--config", type=Path, default=ROOT / "configs" / "multi30k_en_de.yaml")
    training_arguments(p, 30.0, "each training run", "--bt-option", "back-translate", "--topk=10")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    out, args.config = args.output_dir.resolve(), args.config.resolve()
    (src, tgt), (vsrc, vtgt), (tsrc, ttgt) = ([p.resolve() for p in pair] for pair in (args.train, args.valid, args.test))
    times: dict[str, float] = {}

    times["reverse"] = train(args, out / "reverse", single_corpus(tgt, src) + valid(vtgt, vsrc))
    tag = [] if args.no_tag else ["--tag"]
    start = time.perf_counter()
    seq2seq("back-translate", out / "reverse", "-i", args.mono.resolve(), "-o", out / "bt", "--method", args.method,
            "--weight", args.bt_weight, *tag, "--no-progress", *args.command_options)
    times["back-translate"] = time.perf_counter() - start
    summary = json.loads((out / "bt" / "summary.json").read_text(encoding="utf-8"))
    real = {"train_src": str(src.resolve()), "train_tgt": str(tgt.resolve())}
    corpora = json.dumps([real, summary["corpus"]])  # JSON is YAML: one --set value
    reserved = ['data.reserved=["<BLANK>"]'] if args.method == "noised-beam" else []
    forward = ["data.train_src=null", "data.train_tgt=null", f"data.corpora={corpora}", *reserved, *valid(vsrc, vtgt)]
    times["forward+bt"] = train(args, out / "forward_bt", forward)
    results = {"forward+bt": test(out / "forward_bt", tsrc, ttgt, out / "test.forward_bt.hyp")}
    if not args.no_baseline:
        times["baseline"] = train(args, out / "baseline", single_corpus(src, tgt) + valid(vsrc, vtgt))
        results["baseline"] = test(out / "baseline", tsrc, ttgt, out / "test.baseline.hyp")
    report = {"method": args.method, "tagged": not args.no_tag, "synthetic_pairs": summary["counts"],
              "test": results, "seconds": {k: round(v, 1) for k, v in times.items()}}
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    for name, scores in results.items():
        log.info("%-11s test BLEU %6.2f  chrF %6.2f", name, scores["bleu"], scores["chrf"])
    log.info("synthetic pairs: %d of %d monolingual lines; report: %s", summary["counts"]["pairs"],
             summary["counts"]["input_lines"], out / "report.json")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    run_main(main)
