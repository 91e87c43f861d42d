#!/usr/bin/env python
"""Digit-strings recipe: handwritten strings of 1-8 MNIST digits -> a ResNet-style CNN + Transformer
image encoder and the Transformer decoder -> character error rate and exact match on strings
written by people the model never saw.

    python recipes/digit_strings/run.py --mnist ../shared/data/mnist --output-dir runs/digit_strings
    python recipes/digit_strings/run.py --mnist hf --output-dir runs/digit_strings   # ylecun/mnist
    python recipes/digit_strings/run.py --mnist DIR --output-dir OUT --skip-train   # re-score a model

Steps: (1) compose the strings (recipes/digit_strings/strings.py; seeded, reused when already
there) into DATA_DIR (default OUTPUT_DIR/data); (2) train with the config (default
recipes/digit_strings/config.yaml) within its time budget into OUTPUT_DIR/model; (3) choose the
decoding (greedy, beam, or beam rescored with the CTC head at a few weights) on val exact match, then read the val and test strings with
`seq2seq.Captioner` and report per split: CER (character edit distance / reference characters),
exact match, and exact match per string length; results in OUTPUT_DIR/recipe_results.json,
readings in OUTPUT_DIR/<split>.hyp.txt, learning curves in OUTPUT_DIR/model/curves.png. The chosen
decoding is written into the model directory's defaults first (config.yaml; metadata.json's
`decoding_chosen_on` says so), so `seq2seq caption OUTPUT_DIR/model` reads as the report did. At its
start the script logs the steps behind the README's figures (REFERENCE), for comparison.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import strings  # noqa: E402

from seq2seq.config import Seq2SeqError  # noqa: E402
from seq2seq.config import load_config  # noqa: E402
from seq2seq.storage.atomic import write_json_atomic  # noqa: E402
from seq2seq.storage.model_dir import ModelDir  # noqa: E402
from seq2seq.text.metrics import cer  # noqa: E402
from seq2seq.training.experiment import run_training  # noqa: E402
from seq2seq.training.throughput import speed_note  # noqa: E402

log = logging.getLogger("recipe")
SPLITS = ("val", "test")
# The steps behind the README's figures ("Results", run nP: 5,424 steps in 15.0 minutes) and their result.
REFERENCE = (5424, "15 minutes, test CER 1.78%, exact match 93.1%")


def read_split(data: Path, split: str) -> tuple[list[str], list[str]]:
    """(image paths, digit strings) of one split's table."""
    paths, texts = [], []
    for line in (data / f"{split}.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        image, text = line.split("\t")
        paths.append(str(data / image))
        texts.append(text)
    return paths, texts


def evaluate(hyps: list[str], refs: list[str]) -> dict:
    """CER (%), exact match (%) and exact match per reference length. Spaces in a reading are
    ignored: a string is its digits."""
    hyps = ["".join(h.split()) for h in hyps]
    by_length: dict[int, list[bool]] = defaultdict(list)
    for h, r in zip(hyps, refs):
        by_length[len(r)].append(h == r)
    return {"strings": len(refs), "cer": cer(hyps, refs),
            "exact_match": 100 * sum(h == r for h, r in zip(hyps, refs)) / len(refs),
            "exact_by_length": {n: round(100 * sum(ok) / len(ok), 1) for n, ok in sorted(by_length.items())},
            "strings_by_length": {n: len(ok) for n, ok in sorted(by_length.items())}}


def argument_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mnist", required=True, help="directory of MNIST's four IDX files, or 'hf' (ylecun/mnist)")
    p.add_argument("--output-dir", type=Path, default=ROOT / "runs" / "digit_strings")
    p.add_argument("--data-dir", type=Path, default=None, help="where the strings go (default: OUTPUT_DIR/data)")
    p.add_argument("--config", type=Path, default=HERE / "config.yaml")
    p.add_argument("--minutes", type=float, default=None, help="training budget (default: the config's)")
    p.add_argument("--train-strings", type=int, default=60_000)
    p.add_argument("--val-strings", type=int, default=1_000)
    p.add_argument("--test-strings", type=int, default=2_000)
    p.add_argument("--seed", type=int, default=1, help="string composer seed")
    p.add_argument("--skip-train", action="store_true", help="reuse the trained model in OUTPUT_DIR/model")
    p.add_argument("--beam", type=int, default=5, help="beam size of the beam candidate")
    p.add_argument("--set", dest="overrides", action="append", default=[], help="config override")
    return p


def train(args: argparse.Namespace, data: Path, model_dir: Path) -> None:
    """Train with the config (the strings, OUTPUT_DIR/model, --set, --minutes) unless --skip-train."""
    overrides = [f"data.train={data / 'train.tsv'}", f"data.valid={data / 'val.tsv'}",
                 f"training.output_dir={model_dir}", *args.overrides]
    if args.minutes is not None:
        overrides.append(f"training.max_time_minutes={args.minutes}")
    cfg = load_config(args.config, overrides)
    if cfg.training.threads:
        import torch

        torch.set_num_threads(cfg.training.threads)
    if not args.skip_train:
        log.info(speed_note(None, cfg.training.max_time_minutes, *REFERENCE))
        result = run_training(cfg, resume=ModelDir(model_dir).train_state() is not None, config_source=str(args.config))
        log.info("trained %d steps in %.1f min", result["step"], result["elapsed_s"] / 60)


def choose_decoding(captioner, data: Path, beam: int, limits: dict) -> tuple[dict[str, dict], dict[str, float], str]:
    """Greedy, beam, and (a hybrid CTC/attention model) beam rescored with the CTC head at a few
    weights, chosen on val exact match (the first of equals wins: greedy): the candidates, their val
    exact match, the chosen one's name."""
    attention_only = {"ctc_weight": 0.0}
    candidates = {"greedy": {"beam": 1, **attention_only},
                  f"beam {beam}": {"beam": beam, "early_stopping": False, **attention_only}}
    if captioner.loaded.config.training.ctc_weight:  # hybrid CTC/attention: rescored with the CTC head
        for w in (0.3, 0.5, 0.7, 1.0):
            candidates[f"beam {beam}, ctc_weight {w}"] = {"beam": beam, "early_stopping": False, "ctc_weight": w}
    val_paths, val_refs = read_split(data, "val")
    val_search = {}
    for name, options in candidates.items():
        val_search[name] = evaluate(captioner.caption(val_paths, **options, **limits), val_refs)["exact_match"]
        log.info("val exact match with %s: %.2f%%", name, val_search[name])
    chosen = max(candidates, key=lambda k: val_search[k])  # max keeps the first of equals: greedy
    log.info("chosen on val: %s", chosen)
    return candidates, val_search, chosen


def score_splits(captioner, data: Path, out: Path, report: dict) -> None:
    """val and test read once with the captioner's defaults (its model directory's decoding): the
    readings written to OUT, the scores (and decoding time) added to `report`, a few misses logged."""
    for split in SPLITS:
        paths, refs = read_split(data, split)
        t = time.perf_counter()
        hyps = captioner.caption(paths)
        report[split] = evaluate(hyps, refs) | {"decode_seconds": round(time.perf_counter() - t, 1)}
        (out / f"{split}.hyp.txt").write_text("\n".join(hyps) + "\n", encoding="utf-8")
        for path, hyp, ref in [(p, h, r) for p, h, r in zip(paths, hyps, refs) if "".join(h.split()) != r][:3]:
            log.info("%s miss: %s  read %r, written %r", split, Path(path).name, hyp, ref)


def print_table(report: dict, chosen: str, out: Path, model_dir: Path) -> None:
    lengths = list(report["test"]["exact_by_length"])
    print(f"\n{'split':<6} {'strings':>7} {'CER':>6} {'exact':>7}   exact match by length " + " ".join(f"{n:>5}" for n in lengths))
    for split in SPLITS:
        r = report[split]
        print(f"{split:<6} {r['strings']:>7} {r['cer']:>5.2f}% {r['exact_match']:>6.2f}%   {'':>22}"
              + " ".join(f"{r['exact_by_length'].get(n, float('nan')):>5.1f}" for n in lengths))
    print(f"decoding (chosen on val): {chosen}; steps {report['steps']}, training {report['training_minutes']} min, "
          f"total {report['total_minutes']} min; results: {out / 'recipe_results.json'}; "
          f"curves: {model_dir / 'curves.png'}")


def main() -> None:
    args = argument_parser().parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")

    out = args.output_dir
    data = args.data_dir or out / "data"
    model_dir = out / "model"
    t0 = time.perf_counter()
    sizes = {"train": args.train_strings, "val": args.val_strings, "test": args.test_strings}
    strings.generate(data, args.mnist, sizes, seed=args.seed)
    log.info("strings ready in %s (%.0f s)", data, time.perf_counter() - t0)
    train(args, data, model_dir)

    from seq2seq.inference.generator import Captioner

    captioner = Captioner.load(model_dir, device="cpu")
    limits = {"max_len_a": 0.0, "max_len_b": strings.LENGTHS[1] + 8}
    candidates, val_search, chosen = choose_decoding(captioner, data, args.beam, limits)
    report: dict = {"decoding": chosen, "val_search": val_search, "sizes": sizes, "mnist": args.mnist}
    ModelDir(model_dir).set_decoding("recipes/digit_strings/run.py", **candidates[chosen], **limits)
    captioner = Captioner.load(model_dir, device="cpu")  # with those defaults, as `seq2seq caption` loads it
    score_splits(captioner, data, out, report)
    meta = ModelDir(model_dir).metadata()
    report.update(parameters=meta.get("parameters"), training_minutes=meta.get("training_minutes"),
                  steps=meta.get("step"), total_minutes=round((time.perf_counter() - t0) / 60, 1))
    write_json_atomic(out / "recipe_results.json", report)
    print_table(report, chosen, out, model_dir)


if __name__ == "__main__":
    try:
        main()
    except (Seq2SeqError, FileNotFoundError, ValueError) as e:  # bad data, config or model: one line
        sys.exit(f"error: {e}")
