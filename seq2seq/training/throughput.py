"""How many training steps a time budget buys on this machine, from a short timed probe of the run itself.

Budgets are wall-clock minutes, so a machine three times slower trains three times fewer steps. A
recipe that picks its settings for the steps it will reach (e.g. smaller batches where it will train
only a few thousand) first probes the run it is about to start:

    probe = probe_run(cfg)            # the run's data, model, optimizer and loop, timed briefly
    steps = estimate_steps(cfg, probe)  # None when cfg has no time budget

The probe builds what training builds from `cfg` (the data, prepared and cached as training will find
it; the model; the `Trainer` with its placement, precision, optimizer and batch prefetching) and times:

* training steps of the run's own batches, in the order training takes them (their shapes, padding,
  clipping and optimizer step), after `warmup` untimed ones, which it also times for what the first
  steps of a run cost beyond the others (kernels built for new shapes);
* one validation, from a sample of the validation batches: the loss, and greedy decoding stopped at
  each sentence's reference length (a trained model's length; an untrained one would run to the limit);
* one checkpoint save.

The budget then holds `steps` with steps * step + (steps / valid_every) * validation + (steps /
checkpoint interval) * save + warm-up = budget (`Probe.steps_in`). Nothing the probe builds is kept
but the prepared data in the cache. A time-budgeted recipe logs at its start what the estimate means
for its result, against the steps its README's figures came from:

    log.info(speed_note(steps, 60, reference_steps=6000, reference="test_2016_flickr BLEU 40.30"))

benchmarks/probe.py runs the probe and then the run, and prints both.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from seq2seq.config import Config, TrainingConfig
from seq2seq.training.trainer import Trainer
from seq2seq.training.validation import ValidData

log = logging.getLogger(__name__)


@dataclass
class Probe:
    """What one probe measured, in seconds."""

    step: float  # a training step after the warm-up (the mean of the timed ones)
    warmup: float  # what the warm-up steps took beyond as many steps of `step`
    validation: float  # one validation (estimated from a sample of the validation batches); 0 without
    save: float  # one checkpoint save

    def steps_in(self, cfg: TrainingConfig, seconds: float) -> int:
        """The optimizer steps `seconds` of training hold with cfg's validation and checkpoint intervals."""
        saves_every = min(cfg.checkpoint_every or cfg.valid_every, cfg.valid_every)
        per_step = self.step + self.validation / cfg.valid_every + self.save / saves_every
        return max(0, int((seconds - self.warmup) / per_step))


def probe_run(cfg: Config, steps: int = 8, warmup: int = 3, valid_batches: int = 4,
              clock: Callable[[], float] = time.perf_counter) -> Probe:
    """Time cfg's run on this machine (see the module docstring): `warmup` untimed steps, then `steps`
    timed ones, one validation estimated from `valid_batches` of the validation batches spread over
    their lengths, and one save. The data is prepared as `seq2seq train` prepares it (and cached, so
    the run then reads it from the cache)."""
    from seq2seq.training.experiment import build_run  # (experiment builds what a run trains)

    with tempfile.TemporaryDirectory(prefix="seq2seq-probe-") as tmp:
        run_cfg = dataclasses.replace(cfg, training=dataclasses.replace(
            cfg.training, output_dir=str(Path(tmp) / "model"), tensorboard=False, max_time_minutes=None,
            max_steps=10**9))
        trainer = build_run(run_cfg)
        source = trainer._steps()
        try:
            start = clock()
            for _ in range(warmup):
                trainer._train_step(next(source).batches)
            trainer._settle()  # (a host read: on a GPU, waits for the steps)
            middle = clock()
            for _ in range(steps):
                trainer._train_step(next(source).batches)
            trainer._settle()
            end = clock()
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()
        step = (end - middle) / steps
        validation = _validation_seconds(trainer, valid_batches, clock)
        start_save = clock()
        trainer.save(best=True)
        save = clock() - start_save
    probe = Probe(step=step, warmup=max(0.0, middle - start - warmup * step), validation=validation, save=save)
    log.info("throughput probe: %.3f s a step of this run's batches (the first %d: %.1f s more), a validation "
             "%.1f s, a save %.2f s", probe.step, warmup, probe.warmup, probe.validation, probe.save)
    return probe


def _validation_seconds(trainer: Trainer, sampled: int, clock: Callable[[], float]) -> float:
    """One validation's time, from `sampled` of the validation batches spread over their lengths (the
    batches are in length order), each decoded to its sentences' reference lengths: a trained model
    stops there, an untrained one would not stop before the length limit."""
    valid = trainer.valid
    if valid is None or not valid.batches:
        return 0.0
    batches = valid.batches
    chosen = sorted({round(i * (len(batches) - 1) / max(1, sampled - 1)) for i in range(min(sampled, len(batches)))})
    sample = ValidData([batches[i] for i in chosen], valid.references, valid.detokenize, forced=valid.forced)
    src_tokens = sum(_source_positions(batches[i]) for i in chosen)
    ratio = sum(batches[i].n_tgt_tokens for i in chosen) / max(1, src_tokens)
    search_cfg = trainer.search_cfg
    trainer.search_cfg = dataclasses.replace(search_cfg, max_len_a=ratio, max_len_b=0, min_len=0)
    trainer.valid = sample  # the sampled batches only: their share of the whole is scaled up below
    try:
        start = clock()
        trainer.validate()
        seconds = clock() - start
    finally:
        trainer.search_cfg, trainer.valid = search_cfg, valid
    share = sum(b.n_tgt_tokens for b in sample.batches) / sum(b.n_tgt_tokens for b in batches)
    return seconds / share if share else 0.0


def _source_positions(batch) -> int:
    """The real source positions of a text batch (rows otherwise: a media source's length is its own)."""
    src = batch.src
    if isinstance(src, torch.Tensor) and src.dim() == 2 and not src.is_floating_point():
        return int(src.ne(0).sum())
    return len(batch)


def estimate_steps(cfg: Config, probe: Probe | None = None) -> int | None:
    """The optimizer steps cfg's time budget (training.max_time_minutes) holds on this machine, capped
    by training.max_steps; None without a time budget. `probe` defaults to `probe_run(cfg)`."""
    minutes = cfg.training.max_time_minutes
    if minutes is None:
        return None
    if probe is None:
        probe = probe_run(cfg)
    steps = probe.steps_in(cfg.training, minutes * 60)
    log.info("the %g-minute budget holds about %d steps of %d tokens", minutes, steps, cfg.training.max_tokens)
    return min(steps, cfg.training.max_steps)


# How far from the README's steps a machine may be and still expect the README's figures: the step
# counts themselves vary this much between runs of one machine (other jobs, validation time).
NEAR = 0.1


def speed_note(steps: int | None, minutes: float | None, reference_steps: int, reference: str) -> str:
    """One line for the start of a time-budgeted recipe: the steps this machine is expected to train
    (`steps` in a budget of `minutes`; minutes None: a step budget of `steps`) against the
    `reference_steps` the README's figures (`reference`, e.g. "test BLEU 40.30") came from, and what
    that means for the scores. steps None: this machine's speed was not measured, and the line says what
    to compare instead."""
    came_from = f"the README's figures came from {reference_steps:,} steps ({reference})"
    if steps is None:
        return (f"this machine's speed is not probed before training for this model; {came_from}: "
                "expect lower scores if the training log ends with fewer steps")
    ratio = steps / reference_steps
    where = (f"this machine: about {steps:,} steps in the {minutes:g}-minute budget" if minutes is not None
             else f"this run: {steps:,} steps (a step budget)")
    expect = ("expect lower scores" if ratio < 1 - NEAR else
              "expect about the same scores" if ratio <= 1 + NEAR else "expect the same scores or better")
    return f"{where}; {came_from}: {ratio:.2f}x the steps, {expect}"


__all__ = ["Probe", "estimate_steps", "probe_run", "speed_note"]
