#!/usr/bin/env python
"""Multi30K recipe: train, average checkpoints, pick decoding settings on val, score test_2016_flickr.

    python recipes/multi30k/run.py --data-dir ../shared/data/multi30k               # en->de
    python recipes/multi30k/run.py --data-dir ../shared/data/multi30k --tgt fr      # en->fr
    python recipes/multi30k/run.py --data-dir ../shared/data/multi30k --src de --tgt en
    python recipes/multi30k/run.py --download data/multi30k                         # fetch first

Every choice after training (which checkpoints to average, the length penalty) is made on the
validation set and written into the model directory (the chosen weights as model.safetensors, the
beam and length penalty as config.yaml's decoding defaults), so `seq2seq translate/test OUT` decode
as the report did; test_2016_flickr is decoded once, that way, for the report. Scores are sacreBLEU
on detokenized, cased output (default 13a tokenizer), signatures printed. At its start the script
says how many steps this machine should train in the budget against those behind the README's figures.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import logging
import sys
import time
import urllib.request
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from seq2seq.storage.atomic import atomic_path, write_json_atomic  # noqa: E402
from seq2seq.storage.model_dir import ModelDir  # noqa: E402
from seq2seq.storage.weights import save_weights  # noqa: E402
from seq2seq.config import Seq2SeqError  # noqa: E402
from seq2seq.data import DataError, read_lines  # noqa: E402
from seq2seq.training.experiment import run_training  # noqa: E402
from seq2seq.config import Config, load_config  # noqa: E402
from seq2seq.training.throughput import estimate_steps, speed_note  # noqa: E402
from seq2seq.text.metrics import format_scores, score  # noqa: E402
from seq2seq.inference.translator import Translator  # noqa: E402

log = logging.getLogger("recipe")
PUBLIC_RAW = "https://github.com/multi30k/dataset/raw/master/data/task1/raw"
SPLITS = ("train", "val", "test_2016_flickr")


MAX_LENPEN = 10.0  # a bound for the climb only

# The settings follow the machine's speed, as `machine_settings(steps)` of the steps of the config's
# batch its budget holds (the throughput probe's estimate, or --steps). From FAST_STEPS up: the config
# as it is (measured at 4,200 to 8,400 steps). Below: half the batch, so twice the updates in the same
# time, at a peak learning rate of SLOW_LR, without subword sampling (it pays off only in longer runs);
# the config's warmup, but never more than MAX_WARMUP_SHARE of the updates; validation and checkpoints
# at the same shares of the updates as in the settings measured at 2,240 steps (4,480 updates: every
# 2,000 and 400), so a slower machine validates and keeps checkpoints at the same points of its run.
# Chosen on val at 2,240 and 1,120 steps (the AVX2 stand-in's speed and half of it; README "Slow
# machines"): at 1,120 a quarter of the batch (4,480 updates) and a warmup of 18% of the updates both
# lost to half the batch with the 800-update warmup, 36% of that run.
FAST_STEPS = 3000
SLOW_LR = 2e-3
MAX_WARMUP_SHARE = 800 / 2240
VALID_SHARE, CHECKPOINT_SHARE = 2000 / 4480, 400 / 4480
ADAPTED = ("training.max_tokens", "training.lr", "training.warmup_steps", "training.valid_every",
           "training.checkpoint_every", "data.subword_alpha")


def same_tokens_updates(steps: int, config_tokens: int, tokens: int) -> int:
    """`steps` steps of the config's batch (`config_tokens`) as updates of a batch of `tokens`."""
    return round(steps * config_tokens / tokens)


def machine_settings(steps: int, cfg: Config, step_budget: bool = False) -> list[str]:
    """The overrides for a machine whose budget holds `steps` optimizer steps of cfg's batch (see
    FAST_STEPS above): none from FAST_STEPS up. With `step_budget` (--steps: what such a machine
    trains, on any machine) they also set training.max_steps to the updates of the half-size batch."""
    if steps >= FAST_STEPS:
        return []
    tokens = cfg.training.max_tokens // 2
    updates = same_tokens_updates(steps, cfg.training.max_tokens, tokens)  # half the batch: twice the updates

    def interval(share: float, unit: int) -> int:  # a share of the updates, in whole units
        return unit * max(1, round(updates * share / unit))

    adapted = [f"training.max_tokens={tokens}", f"training.lr={SLOW_LR:g}",
               f"training.warmup_steps={min(cfg.training.warmup_steps, interval(MAX_WARMUP_SHARE, 100))}",
               f"training.valid_every={interval(VALID_SHARE, 100)}",
               f"training.checkpoint_every={interval(CHECKPOINT_SHARE, 50)}", "data.subword_alpha=null"]
    return adapted + ([f"training.max_steps={updates}"] if step_budget else [])


# The README figures a machine's expected steps are compared with at the start (steps of the config's
# batch size in 60 minutes, and the result): README "Results", the 1.0x row; with `machine_settings`,
# the nearer of README "Slow machines"' two: the stand-in's speed (row b) and half of it.
REFERENCE = (6000, "60 minutes, test_2016_flickr BLEU 40.30")
SLOW_REFERENCES = ((1120, "half the AVX2 stand-in's speed, test_2016_flickr BLEU 35.20 with the slow-machine settings"),
                   (2240, "60 minutes, test_2016_flickr BLEU 39.62 with the slow-machine settings"))


def climb(value_at: Callable[[float], float], start: float, step: float, low: float, high: float) -> float:
    """The argument in [low, high] (on the grid start + k * step) where `value_at` peaks, found by
    climbing from `start` towards whichever neighbour is better until the next step is no better."""
    best, best_value = start, value_at(start)
    for direction in (+1, -1):
        x = round(best + direction * step, 6)
        while low <= x <= high and (value := value_at(x)) > best_value:
            best, best_value = x, value
            x = round(x + direction * step, 6)
        if best != start:
            break  # this direction improved; the other one starts from a worse neighbour
    return best


def download(target: Path, langs: tuple[str, ...]) -> None:
    """Fetch the raw splits from the dataset's public repository (needs network)."""
    target.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        for lang in langs:
            name = f"{split}.{lang}.gz"
            if not (target / name).exists():
                log.info("downloading %s", name)
                try:
                    with atomic_path(target / name) as tmp:  # never a half-written file to skip next time
                        urllib.request.urlretrieve(f"{PUBLIC_RAW}/{name}", tmp)
                except OSError as e:  # urllib's URLError and HTTPError are OSErrors
                    raise DataError(f"cannot download {PUBLIC_RAW}/{name}: {e}; "
                                    "pass --data-dir with a local copy instead") from None


def setting(cfg: Config, key: str) -> object:
    """The value of an override's key ("training.lr=0.002" -> cfg.training.lr)."""
    section, name = key.split("=")[0].split(".")
    return getattr(getattr(cfg, section), name)


def adapt_to_machine(config: Path, overrides: list[str], out: Path, step_budget: int | None = None) -> dict:
    """The settings for this machine's speed (`machine_settings`) of the steps its budget holds: the
    throughput probe's estimate (a short probe of the model), or `step_budget` (--steps) as given. A
    resumed run keeps the settings its own config.yaml says it started with, unprobed (a new --steps
    still sets its budget: a run branched from another, docs/multi30k-experiments.md). Returns
    {"estimated_steps", "overrides"}."""
    model_dir = ModelDir(out)
    cfg = load_config(config, overrides)
    if model_dir.train_state() is not None and model_dir.config_path.is_file():
        saved = model_dir.config()
        kept = [f"{key}={json.dumps(setting(saved, key))}" for key in ADAPTED]
        if step_budget is not None:  # steps of the config's batch, as updates of the batch the run trains with
            updates = same_tokens_updates(step_budget, cfg.training.max_tokens, saved.training.max_tokens)
            kept.append(f"training.max_steps={updates}")
        return {"estimated_steps": None, "overrides": kept}
    steps = step_budget if step_budget is not None else estimate_steps(cfg)
    adapted = machine_settings(steps, cfg, step_budget is not None) if steps is not None else []
    if adapted:
        log.info("a slow machine (%d steps of %d tokens in the budget, fewer than %d): training with %s", steps,
                 cfg.training.max_tokens, FAST_STEPS, " ".join(adapted))
    return {"estimated_steps": steps, "overrides": adapted}


@functools.lru_cache(maxsize=None)
def translator(model_dir: Path, weights: Path) -> Translator:
    return Translator.load(model_dir, device="cpu", weights=weights)


def decode(model_dir: Path, weights: Path, sources: list[str], beam: int, lenpen: float) -> list[str]:
    return translator(model_dir, weights).translate(sources, beam=beam, lenpen=lenpen)


def argument_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data" / "multi30k")
    p.add_argument("--download", type=Path, default=None, help="download the corpus into this directory first")
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--config", type=Path, default=ROOT / "configs" / "multi30k_en_de.yaml")
    p.add_argument("--output-dir", type=Path, default=None)
    p.add_argument("--minutes", type=float, default=None, help="training budget (default: the config's)")
    p.add_argument("--steps", type=int, default=None,
                   help="train for this many steps instead of a time budget: what a machine that runs STEPS "
                        "steps in the budget would do, e.g. to check the recipe on a faster or slower machine")
    p.add_argument("--skip-train", action="store_true", help="reuse a trained model directory")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--set", dest="overrides", action="append", default=[], help="config override")
    p.add_argument("--no-adapt", action="store_true",
                   help="keep the config's settings on a slow machine (see FAST_STEPS in this script)")
    return p


def machine_line(cfg: Config, machine: dict) -> str | None:
    """What this machine's speed means for the result (`speed_note`): the estimated steps (or a step
    budget's, --steps), of the config's batch, against the README reference of the settings it trains
    with; None where nothing was estimated (a resumed run)."""
    steps = machine["estimated_steps"]
    if steps is None:
        return None
    nearest = min(SLOW_REFERENCES, key=lambda reference: abs(math.log(steps / reference[0])))
    reference = nearest if machine["overrides"] else REFERENCE
    return speed_note(steps, cfg.training.max_time_minutes, *reference)


def run_config(p: argparse.ArgumentParser, args: argparse.Namespace, data: Path, out: Path) -> tuple[Config, dict]:
    """The run's config (the data paths and the budget, this machine's settings, then --set, which wins)
    and what `adapt_to_machine` found (with --no-adapt, the estimate alone), its `machine_line`
    logged; --minutes with --steps, or --steps below 1: p.error."""
    paths = [
        f"data.train_src={data}/train.{args.src}.gz", f"data.train_tgt={data}/train.{args.tgt}.gz",
        f"data.valid_src={data}/val.{args.src}.gz", f"data.valid_tgt={data}/val.{args.tgt}.gz",
        f"training.output_dir={out}",
    ]
    if args.minutes is not None and args.steps is not None:
        p.error("give --minutes or --steps, not both")
    if args.steps is not None and args.steps < 1:
        p.error(f"--steps must be >= 1, got {args.steps}")
    budget = []
    if args.minutes is not None:
        budget.append(f"training.max_time_minutes={args.minutes}")
    if args.steps is not None:
        budget += [f"training.max_steps={args.steps}", "training.max_time_minutes=null"]
    user = [*paths, *args.overrides, *budget]
    machine = {"estimated_steps": None, "overrides": []}
    resumed = ModelDir(out).train_state() is not None
    finished = not resumed and ModelDir(out).weights_path.is_file()
    training = not (args.skip_train or finished)  # (training refuses to replace a finished model)
    if training and not args.no_adapt:
        machine = adapt_to_machine(args.config, user, out, args.steps)
    elif training and not resumed:
        machine["estimated_steps"] = args.steps or estimate_steps(load_config(args.config, user))
    # the adapted settings replace the step budget's max_steps (updates of a smaller batch); --set wins
    cfg = load_config(args.config, [*paths, *budget, *machine["overrides"], *args.overrides])
    line = machine_line(cfg, machine) if training else None
    if line:
        log.info(line)
    return cfg, machine


def bleu(hyps: list[str], refs: list[str]) -> float:
    return score(hyps, [refs], metrics=("bleu",))["bleu"]["score"]


def choose_weights(out: Path, val_src: list[str], val_ref: list[str], beam: int,
                   val_bleu: dict[str, float]) -> tuple[dict[str, Path], str]:
    """Which weights: the best checkpoint (training's, also after an earlier run of this script
    installed others), or the average of the last 5 or 10 (written beside it), whichever has the best
    val BLEU with lenpen 1.0 (recorded in `val_bleu`). Returns the candidates and the chosen one's name."""
    model_dir = ModelDir(out)
    kept = model_dir.checkpoints()
    candidates = {"best": model_dir.trained_weights_path()}
    for n in (5, 10):
        if len(kept) >= n:
            path = out / f"model.avg{n}.safetensors"
            save_weights(model_dir.average(n)[0], path)
            candidates[f"avg{n}"] = path
    for name, weights in candidates.items():
        val_bleu[f"{name} lenpen=1.0"] = bleu(decode(out, weights, val_src, beam, 1.0), val_ref)
        log.info("val BLEU %-5s beam %d lenpen 1.0: %.2f", name, beam, val_bleu[f"{name} lenpen=1.0"])
    return candidates, max(candidates, key=lambda k: val_bleu[f"{k} lenpen=1.0"])


def choose_lenpen(out: Path, chosen: str, weights: Path, val_src: list[str], val_ref: list[str], beam: int,
                  val_bleu: dict[str, float]) -> float:
    """The length penalty for the chosen weights: a climb on val from 1.0 in steps of 0.4, in the
    direction that helps, until BLEU stops improving (an under-trained model, e.g. on a slow machine,
    stops early and wants a larger one: the search has no fixed upper edge). Every value tried is
    recorded in `val_bleu`."""
    def val_bleu_at(alpha: float) -> float:
        key = f"{chosen} lenpen={alpha:g}"
        if key not in val_bleu:
            val_bleu[key] = bleu(decode(out, weights, val_src, beam, alpha), val_ref)
            log.info("val BLEU %-5s beam %d lenpen %.1f: %.2f", chosen, beam, alpha, val_bleu[key])
        return val_bleu[key]

    val_bleu[f"{chosen} lenpen=1"] = val_bleu.pop(f"{chosen} lenpen=1.0")
    lenpen = climb(val_bleu_at, start=1.0, step=0.4, low=0.0, high=MAX_LENPEN)
    best_val = val_bleu_at(lenpen)
    log.info("chosen on val: weights %s, beam %d, lenpen %.1f (val BLEU %.2f)", chosen, beam, lenpen, best_val)
    return lenpen


def install_choices(out: Path, candidates: dict[str, Path], chosen: str, beam: int, lenpen: float) -> None:
    """The choices made on val become the model directory's defaults: the chosen weights its
    model.safetensors (training's best kept as model.best.safetensors), beam and lenpen its decoding."""
    model_dir = ModelDir(out)
    model_dir.install_weights(candidates[chosen])
    weights = f"{chosen} ({candidates[chosen].name})"
    if model_dir.best_weights_path.is_file():
        weights += f", installed as {model_dir.WEIGHTS}; training's best is {model_dir.BEST_WEIGHTS}"
    model_dir.set_decoding("recipes/multi30k/run.py", weights=weights, beam=beam, lenpen=lenpen)
    log.info("model directory defaults: weights %s, beam %d, lenpen %g (as `seq2seq translate/test %s` "
             "decode)", chosen, beam, lenpen, out)


def score_splits(args: argparse.Namespace, data: Path, out: Path, report: dict) -> None:
    """val and test_2016_flickr decoded as `seq2seq test OUT` decodes them (the directory's weights
    and decoding defaults, which `install_choices` set): the hypotheses written to OUT, the scores
    printed and added to `report`."""
    defaults = Translator.load(out, device="cpu")
    for split in ("val", "test_2016_flickr"):
        src = read_lines(data / f"{split}.{args.src}.gz")
        ref = read_lines(data / f"{split}.{args.tgt}.gz")
        hyps = defaults.translate(src)
        (out / f"{split}.hyp.{args.tgt}").write_text("\n".join(hyps) + "\n", encoding="utf-8")
        scores = score(hyps, [ref], metrics=("bleu", "chrf", "ter"))
        print(f"\n== {split} ({args.src}->{args.tgt}, {len(hyps)} sentences) ==\n{format_scores(scores)}")
        report[split] = {k: {"score": v["score"], "signature": v["signature"]} for k, v in scores.items()}


def main() -> None:
    p = argument_parser()
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("datasets").setLevel(logging.WARNING)

    data = args.data_dir
    if args.download:
        download(args.download, (args.src, args.tgt))
        data = args.download
    out = args.output_dir or ROOT / "runs" / f"multi30k_{args.src}_{args.tgt}"
    cfg, machine = run_config(p, args, data, out)

    t0 = time.perf_counter()
    if not args.skip_train:
        result = run_training(cfg, resume=ModelDir(out).train_state() is not None, config_source=str(args.config))
        log.info("trained %d steps in %.1f min", result["step"], result["elapsed_s"] / 60)

    # every choice on val, then the report: val and test_2016_flickr with the chosen settings
    val_src = read_lines(data / f"val.{args.src}.gz")
    val_ref = read_lines(data / f"val.{args.tgt}.gz")
    val_bleu: dict[str, float] = {}
    candidates, chosen = choose_weights(out, val_src, val_ref, args.beam, val_bleu)
    lenpen = choose_lenpen(out, chosen, candidates[chosen], val_src, val_ref, args.beam, val_bleu)
    install_choices(out, candidates, chosen, args.beam, lenpen)
    report = {"pair": f"{args.src}-{args.tgt}", "weights": chosen, "beam": args.beam, "lenpen": lenpen,
              "val_search": val_bleu}
    score_splits(args, data, out, report)
    meta = ModelDir(out).metadata()
    report.update(parameters=meta.get("parameters"), training_minutes=meta.get("training_minutes"),
                  steps=meta.get("step"), total_minutes=round((time.perf_counter() - t0) / 60, 1))
    if not args.skip_train:
        report["machine"] = machine  # what the throughput probe found, and the settings it chose
    write_json_atomic(out / "recipe_results.json", report)
    print(f"\nresults: {out / 'recipe_results.json'}; learning curves: {out / 'curves.png'}")


if __name__ == "__main__":
    try:
        main()
    except Seq2SeqError as e:  # bad data, config or checkpoint: one line, exit code 1
        sys.exit(f"error: {e}")
