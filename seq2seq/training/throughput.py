"""How many training steps a time budget buys on this machine, from a short timed probe.

Budgets are wall-clock minutes, so a machine three times slower trains three times fewer steps. A
recipe that picks its settings for the steps it will reach (e.g. smaller batches where it will train
only a few thousand) first times a few full-size training steps of its own model, on random tokens,
with the precision, CPU variants and thread count that training will use:

    steps = estimate_steps(cfg)      # None when cfg has no time budget

The probe costs a few steps (seconds on a laptop); nothing it builds is kept. A time-budgeted recipe
logs at its start what the estimate means for its result, against the steps its README's figures
came from:

    log.info(speed_note(steps, 60, reference_steps=6000, reference="test_2016_flickr BLEU 40.30"))
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from typing import Callable

import torch

from seq2seq.accel.device import autocast_context
from seq2seq.config import Config, ConfigError
from seq2seq.model.transformer import Seq2SeqTransformer
from seq2seq.model.encoders.base import source_kind
from seq2seq.text.tokenizer import PAD_ID
from seq2seq.training.loss import sequence_loss
from seq2seq.training.optim import build_optimizer
from seq2seq.training.placement import place

log = logging.getLogger(__name__)

# The share of the budget spent in steps like the probe's. Validation, checkpoints and the data pipeline
# take a little time, but real batches also cost a little less than the probe's full, unpadded one: on the
# Multi30K recipe's AVX2 one-core stand-in the probe took 1.65-1.70 s a step and training ran 2,240 steps
# (1.61 s each) in 60 minutes, so the estimate with a share of 1 (about 2,140) is 5% low.
# On the 2-core AVX-512 machine (bf16) it estimates 9,161 steps where runs with validation made 5,000-8,330:
# validation takes a larger share of a fast machine's hour. A recipe compares the estimate with a
# threshold far from both (the Multi30K recipe: 3,000 steps).
STEP_SHARE = 1.0


def probe_step_seconds(cfg: Config, steps: int = 3, sentence_len: int = 16,
                       clock: Callable[[], float] = time.perf_counter) -> float:
    """Median wall-clock seconds of one optimizer step of cfg's text model on a full batch
    (training.max_tokens target tokens, as sentences of `sentence_len` tokens on both sides), after
    one untimed step that warms up the kernels. Text models only: a media encoder's cost depends on
    its inputs, which a probe of random tokens cannot stand in for."""
    if source_kind(cfg.model.encoder).reads_files:
        raise ConfigError(f"the throughput probe times text models only, not model.encoder.type "
                          f"{cfg.model.encoder.type!r}")
    vocab = cfg.tokenizer.vocab_size
    model_cfg = dataclasses.replace(cfg.model, src_vocab_size=vocab, tgt_vocab_size=vocab, pad_id=PAD_ID)
    generator = torch.Generator().manual_seed(0)
    model = Seq2SeqTransformer(model_cfg)
    placement = place(model, cfg.training, PAD_ID)
    optimizer = build_optimizer(model, cfg.training)
    rows = max(1, cfg.training.max_tokens // sentence_len)

    def tokens() -> torch.Tensor:
        return torch.randint(1, vocab, (rows, sentence_len), generator=generator).to(placement.device)

    src, tgt_in, tgt_out = tokens(), tokens(), tokens()
    times = []
    for i in range(steps + 1):
        start = clock()
        optimizer.zero_grad(set_to_none=True)
        with autocast_context(placement.device, placement.precision):
            loss = sequence_loss(model, src, tgt_in, tgt_out, PAD_ID, cfg.training.label_smoothing)
        (loss / tgt_out.numel()).backward()
        optimizer.step()
        if placement.device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = clock() - start
        if i:  # the first step builds kernels and caches
            times.append(elapsed)
    return statistics.median(times)


def estimate_steps(cfg: Config, step_seconds: float | None = None) -> int | None:
    """The optimizer steps cfg's time budget (training.max_time_minutes) holds on this machine, capped
    by training.max_steps; None without a time budget. `step_seconds` defaults to a probe."""
    minutes = cfg.training.max_time_minutes
    if minutes is None:
        return None
    if step_seconds is None:
        step_seconds = probe_step_seconds(cfg)
    steps = int(minutes * 60 * STEP_SHARE / step_seconds)
    log.info("throughput probe: %.2f s per step of %d tokens; the %g-minute budget holds about %d steps",
             step_seconds, cfg.training.max_tokens, minutes, steps)
    return min(steps, cfg.training.max_steps)


# How far from the README's steps a machine may be and still expect the README's figures: the step
# counts themselves vary this much between runs of one machine (other jobs, validation time).
NEAR = 0.1


def speed_note(steps: int | None, minutes: float | None, reference_steps: int, reference: str) -> str:
    """One line for the start of a time-budgeted recipe: the steps this machine is expected to train
    (`steps` in a budget of `minutes`; minutes None: a step budget of `steps`) against the
    `reference_steps` the README's figures (`reference`, e.g. "test BLEU 40.30") came from, and what
    that means for the scores. steps None: this machine's speed was not measured (the probe times
    text models only), and the line says what to compare instead."""
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
