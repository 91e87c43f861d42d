"""`seq2seq quickstart`: the built-in default job, needing no download.

1. generate a seeded English->German corpus (seq2seq.data.synthetic) into OUT/data/
2. train a small Transformer on it for a few minutes (the same `run_training` as `seq2seq train`),
   after saying what this machine's speed means for the result (a throughput probe's estimate of
   the steps in the budget against REFERENCE, the steps behind the README's lowest figure)
3. translate the held-out test set with beam search, print sacreBLEU BLEU/chrF and examples
4. leave OUT/model/, a model directory that `seq2seq translate` loads
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from pathlib import Path
from typing import TypedDict

import click

from seq2seq.config import ConfigError, DataConfig, ModelConfig, TrainingConfig
from seq2seq.training.experiment import run_training
from seq2seq.config import Config
from seq2seq.text.metrics import format_scores, score
from seq2seq.config.search import SearchConfig
from seq2seq.data.synthetic import make_splits, write_splits
from seq2seq.config import TokenizerConfig
from seq2seq.inference.generator import load_engine
from seq2seq.inference.translator import Translator
from seq2seq.training.throughput import estimate_steps, speed_note

log = logging.getLogger(__name__)
# The README's lowest figure ("What to expect on your CPU": 1 core, AVX2 only, seed 1) and its steps.
REFERENCE = (590, "3.5 minutes on 1 core with AVX2 only, held-out BLEU 95.9")
# A machine the probe finds too slow to train NEEDED_STEPS steps in DEFAULT_MINUTES trains a narrower
# model (SLOW_MODEL) with batches of SLOW_MAX_TOKENS tokens instead: a step takes about a quarter of
# the time, and per minute they learn more (benchmarks/README.md, "The quickstart at half the AVX2
# stand-in's speed"), for the time NEEDED_SLOW_STEPS of them take there: at least DEFAULT_MINUTES, at
# most LONGEST_MINUTES (the whole quickstart then stays within 8 minutes). The step counts: where
# validation BLEU passes 95 with a margin; the steps, not the minutes, decide it. Fast machines keep
# the settings above, unchanged.
DEFAULT_MINUTES = 3.5
# The two step counts are in the throughput probe's units (`seq2seq.training.throughput`, which times the
# run's own batches, validations and saves): about the steps trained (0.99x on the AVX2 stand-in). How they
# were derived is in benchmarks/README.md, "The throughput probe".
NEEDED_STEPS = 690
SLOW_MAX_TOKENS = 1000


class _SlowModel(TypedDict):
    """The model settings of a slow machine (`dataclasses.replace(cfg.model, **SLOW_MODEL)`)."""

    d_model: int
    ffn_dim: int


SLOW_MODEL: _SlowModel = {"d_model": 128, "ffn_dim": 512}
NEEDED_SLOW_STEPS = 1420
ENOUGH = 0.75  # a machine that gets this share of NEEDED_SLOW_STEPS within LONGEST_MINUTES still passes 95
LONGEST_MINUTES = 7.25


def training_minutes(steps: int | None, default: float = DEFAULT_MINUTES, needed: int = NEEDED_SLOW_STEPS,
                     longest: float = LONGEST_MINUTES) -> float:
    """The quickstart's training budget on a machine expected to train `steps` steps in `default`
    minutes (None: not probed): `default`, or the time `needed` steps take there, at most `longest`."""
    if steps is None or steps <= 0 or steps >= needed:
        return default
    return min(longest, default * needed / steps)


def budget_note(steps: int, minutes: float, base_steps: int | None = None, default: float = DEFAULT_MINUTES,
                needed: int = NEEDED_SLOW_STEPS) -> str:
    """What a slow machine's settings mean, said at the start: `steps` of SLOW_MAX_TOKENS tokens expected in
    `default` minutes (`base_steps` of the usual batches), `minutes` of training (`training_minutes`)."""
    expected = round(steps * minutes / default)
    why = "" if base_steps is None else (f" (about {base_steps:,} steps of the usual batches in {default:g} minutes, "
                                         f"fewer than the {NEEDED_STEPS:,} they need)")
    head = (f"a slow machine{why}: training a model of width {SLOW_MODEL['d_model']} with batches of "
            f"{SLOW_MAX_TOKENS:,} tokens (more updates a minute) for {minutes:.1f} minutes, about {expected:,} steps")
    if expected >= needed * ENOUGH:
        return f"{head} (the quickstart's quality needs about {needed:,}); the whole quickstart about {minutes + 0.75:.0f} minutes"
    return f"{head} of the {needed:,} the quickstart's quality needs, at the longest budget: expect lower scores"


def quickstart_config(data: dict[str, tuple[Path, Path]], model_dir: Path, minutes: float, device: str, seed: int) -> Config:
    """The settings, chosen on the validation split for BLEU after a few minutes on slow and fast CPUs.

    The budget is wall-clock time, so a slow machine runs fewer steps: the settings must learn fast
    per step and per second. A 2+2-layer model of width 192 takes about 1.7x as many steps per second
    as one of width 256 and learns as much per step here; a peak learning rate of 2e-3 reached after
    100 steps (not 1e-3 after 200, which was half of a slow machine's run); and a cooldown that
    anneals the rate to 0 over the last 30% of the time budget, wherever the machine got to by then.
    Measured choices: benchmarks/README.md ("The quickstart on slow and fast CPUs").
    """
    return Config(
        data=DataConfig(
            train_src=str(data["train"][0]), train_tgt=str(data["train"][1]),
            valid_src=str(data["valid"][0]), valid_tgt=str(data["valid"][1]),
            max_len=64, valid_max_sentences=200,
        ),
        tokenizer=TokenizerConfig(joint=True, model_type="unigram", vocab_size=1000),
        model=ModelConfig(d_model=192, heads=4, ffn_dim=768, layers=2, dropout=0.1, share_embeddings=True, tie_output=True),
        training=TrainingConfig(
            output_dir=str(model_dir), seed=seed, max_tokens=2000, lr=2e-3, warmup_steps=100, cooldown=0.3,
            max_steps=100_000, max_time_minutes=minutes, label_smoothing=0.1, valid_every=150,
            device=device, precision="auto", log_every=50, keep_last=3,
        ),
        decoding=SearchConfig(strategy="beam", beam=4, lenpen=1.0, max_len_a=1.5, max_len_b=10),
    )


def run_quickstart(output_dir: str | Path, minutes: float | None = None, device: str = "auto", seed: int = 1,
                   overwrite: bool = False) -> dict[str, float]:
    """Run the quickstart into output_dir; minutes None: the machine's budget (`training_minutes`)."""
    out = Path(output_dir)
    model_dir = out / "model"
    if model_dir.exists():
        if not overwrite:
            raise ConfigError(f"{model_dir} already exists; pass --overwrite or choose another --output-dir")
        shutil.rmtree(model_dir)
    t0 = time.perf_counter()
    splits = make_splits(seed=seed)
    files = write_splits(splits, out / "data")
    log.info("generated %s", ", ".join(f"{k}: {len(v):,} pairs" for k, v in splits.items()))

    cfg = quickstart_config(files, model_dir, minutes or DEFAULT_MINUTES, device, seed)
    steps = estimate_steps(cfg)
    if minutes is not None or steps is None or steps >= NEEDED_STEPS:
        log.info(speed_note(steps, cfg.training.max_time_minutes, *REFERENCE))
    else:  # a slow machine: its own settings, said at the start
        cfg = dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, max_tokens=SLOW_MAX_TOKENS),
                                  model=dataclasses.replace(cfg.model, **SLOW_MODEL))
        slow_steps = estimate_steps(cfg)
        assert slow_steps is not None  # cfg has a time budget (quickstart_config)
        budget = training_minutes(slow_steps, needed=NEEDED_SLOW_STEPS)
        cfg = dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, max_time_minutes=budget))
        log.info(budget_note(slow_steps, budget, steps))
    result = run_training(cfg, config_source="quickstart")

    translator = load_engine(model_dir, device, decodes=Translator)
    test_src = [en for en, _ in splits["test"]]
    test_ref = [de for _, de in splits["test"]]
    hyps = translator.translate(test_src)
    (out / "test.hyp.de").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    scores = score(hyps, [test_ref], metrics=("bleu", "chrf"))
    total = time.perf_counter() - t0

    click.echo("\nExamples from the held-out test set:")
    for en, ref, hyp in list(zip(test_src, test_ref, hyps))[:5]:
        click.echo(f"  EN   {en}\n  REF  {ref}\n  OURS {hyp}\n")
    click.echo(f"Held-out test set ({len(hyps)} sentences, beam {cfg.decoding.beam}):")
    click.echo(format_scores(scores))
    click.echo(
        f"\ntrained {result['step']} steps in {result['elapsed_s'] / 60:.1f} min; whole quickstart {total / 60:.1f} min\n"
        f"model directory: {model_dir}\n"
        f"try:  echo 'The young doctor sees forty-two small dogs.' | seq2seq translate {model_dir}\n"
        f"next: train on your own files with configs/example.yaml (README: 'Train on your own data')"
    )
    return {"bleu": scores["bleu"]["score"], "chrf": scores["chrf"]["score"], "minutes": total / 60}
