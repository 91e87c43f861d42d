"""Training: one clear loop with label smoothing, AdamW, warmup schedules, AMP, validation,
checkpoints and exact resume.

The trainer knows nothing about text: a batch's `src` goes to the model's encoder as it is, and
validation decodes with the shared search module and scores detokenized strings.

    for each step:
        accumulate `accum_steps` token-bucketed batches (loss = sum over tokens / tokens in the step)
        skip the step if the loss or gradient is not finite (abort after `max_bad_steps`)
        clip, optimizer step, schedule step
        every `valid_every` steps: validate, save (best, last K, resume state), log, plot

The batches of the next steps are drawn and collated on a background thread (`seq2seq.data.prefetch`,
training.prefetch steps ahead; in page-locked memory for a GPU, copied without waiting), and a
checkpoint is written by a thread of its own from a snapshot (`seq2seq.training.run_state`).

Where reading a value on the host stops the device (a GPU: `seq2seq.model.sync`), the step reads
nothing: the loss is summed on the device and read at the next log line, and a step whose loss or
gradient is not finite is skipped by the fused optimizer on the device (its update not applied); such
steps are counted, warned about and held against `max_bad_steps` at the next log line, validation or
save. Such a step still takes its step number (and its step of the schedule). On a CPU each step
checks at once, and a skipped step takes no number.

Under torchrun the same loop runs in every process with DistributedDataParallel (see
`seq2seq.training.distributed`): each process takes its share of a step's `accum_steps` batches, gradients
are all-reduced once per step (`no_sync` on the others), rank 0 alone validates and writes, and the
elapsed time and early stopping are decided once and shared, so all processes stop together.

The pieces live beside it: where the run computes (device, CPU variants, DDP, precision) in
`seq2seq.training.placement`, the optimizer and schedule in `seq2seq.training.optim`, validation in
`seq2seq.training.validation`, the run's checkpoints in `seq2seq.training.run_state`.
"""

from __future__ import annotations

import contextlib
import logging
import random
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, TypedDict

import torch
from tqdm import tqdm

from seq2seq.config.diagnostics import Seq2SeqError
from seq2seq.training import distributed

from seq2seq.data.batching import Batch, TokenBatchSampler
from seq2seq.data.prefetch import Prefetcher, Step, training_steps
from seq2seq.model import sync
from seq2seq.model.transformer import Seq2SeqTransformer
from seq2seq.training.run_state import Checkpoints, Progress, rng_state, set_rng_state
from seq2seq.config import TrainingConfig
from seq2seq.accel.device import autocast_context
from seq2seq.training.log_window import LogWindow
from seq2seq.training.validation import METRIC_KEYS, ValidData, is_better, validate
from seq2seq.training.loss import sequence_loss
from seq2seq.training.optim import build_optimizer, build_scheduler, plateau_budget, step_unless
from seq2seq.training.placement import place
from seq2seq.config.search import SearchConfig

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

log = logging.getLogger(__name__)

__all__ = ["Trainer", "TrainingAborted"]

# Trainer attributes saved in the resume state (state.json), with the sampler's position.
PROGRESS = ("step", "bad_steps", "elapsed", "best", "best_step", "validations_without_gain", "history",
            "plateau_step")


class TrainResult(TypedDict):
    """What `Trainer.train` returns: the last step, the best score and its step, why training stopped,
    the seconds trained and the last log row."""

    step: int
    best: float | None
    best_step: int
    stop_reason: str
    elapsed_s: float
    last: dict[str, float]


class TrainingAborted(Seq2SeqError, RuntimeError):
    """Training cannot go on (too many non-finite steps); the last good checkpoint is kept."""


class Trainer:
    """Trains `model` on batches of `sampler` (indices) collated by `collate`, into `out_dir`.

    On a CPU the model is switched in place to its CPU training variants (`seq2seq.accel.cpu`).
    """

    def __init__(
        self,
        model: Seq2SeqTransformer,
        cfg: TrainingConfig,
        sampler: TokenBatchSampler,
        collate: Callable[[list[int]], Batch],
        valid: ValidData | None,
        out_dir: str | Path,
        search_cfg: SearchConfig | None = None,
        pad_id: int = 0,
    ) -> None:
        self.cfg = cfg
        placement = place(model, cfg, pad_id)
        self.device, self.precision, self.world = placement.device, placement.precision, placement.world
        self.ddp, self.scaler = placement.ddp, placement.scaler
        self.model = model
        self.sampler, self.collate, self.valid = sampler, collate, valid
        self.out_dir = Path(out_dir)
        self.checkpoints = Checkpoints(out_dir, cfg.keep_last, cfg.best_metric)
        self.pad_id = pad_id
        self.search_cfg = search_cfg or SearchConfig(strategy="greedy")
        self.step = self.bad_steps = self.best_step = self.validations_without_gain = 0
        self.elapsed = 0.0  # seconds of training so far, across resumes
        self.best: float | None = None
        self.plateau_step: int | None = None  # where cfg.cooldown_patience started the cooldown
        self.history: list[dict[str, float]] = []
        self.window = LogWindow()  # the training loss since the last log line
        # Where host reads stop the device, the step reads nothing (see the module docstring).
        self.deferred = not sync.host_reads_are_free(self.device)
        self.optimizer = build_optimizer(model, cfg, fused=self.deferred)
        self.sampler_state = sampler.state_dict()  # the position after the last step trained
        self.scheduler = build_scheduler(self.optimizer, cfg, lambda: self.elapsed, lambda: self.max_steps)
        self.tensorboard = open_tensorboard(self.out_dir) if cfg.tensorboard and distributed.is_main() else None
        torch.manual_seed(cfg.seed)
        random.seed(cfg.seed)

    # ---- the loop ------------------------------------------------------------------------

    @property
    def max_steps(self) -> int:
        """The step budget: cfg.max_steps, shortened by a validation plateau (cfg.cooldown_patience)."""
        if self.plateau_step is None:
            return self.cfg.max_steps
        return plateau_budget(self.cfg, self.plateau_step, self.cfg.max_steps)

    def _steps(self) -> Iterator[Step]:
        """The steps' batches from the sampler's position: prepared training.prefetch steps ahead on a
        background thread (page-locked for a GPU), or on this thread with prefetch 0."""
        steps = training_steps(self.sampler, self.collate, self.cfg.accum_steps, self.cfg.max_epochs,
                               self.world, distributed.rank())
        if not self.cfg.prefetch:
            return steps
        return Prefetcher(steps, self.cfg.prefetch, prepare=Step.pinned if self.device.type == "cuda" else None)

    def train(self) -> TrainResult:
        """Train until max_steps, max_epochs, max_time_minutes or early stopping; validate and save
        at the end. Returns the step, best score and step, the stop reason and the last log row."""
        cfg = self.cfg
        start_elapsed, t0 = self.elapsed, time.perf_counter()
        window = self.window
        window.start = time.perf_counter()
        # The bar needs a terminal; elsewhere (CI, nohup, a pipe) the same figures go to the log.
        bar = tqdm(total=self.max_steps, initial=self.step, desc="train", unit="step", dynamic_ncols=True,
                   leave=False, disable=None if distributed.is_main() else True)
        self.model.train()
        steps = self._steps()
        try:
            while self.step < self.max_steps:
                step = next(steps, None)
                if step is None:
                    stop_reason = "max_epochs"  # (several processes drop a last, partial step)
                    break
                counted = self._train_step_or_explain(step.batches)
                self.sampler_state = step.sampler_state
                # One clock for all processes: the schedule's cooldown and the time budget must agree.
                self.elapsed = distributed.broadcast_float(start_elapsed + time.perf_counter() - t0, self.device)
                if not counted:  # skipped: nothing was learned, nothing to log or save
                    continue
                if self.step % cfg.log_every == 0:
                    self._log_training(window, bar)
                bar.update(1)
                out_of_time = cfg.max_time_minutes is not None and self.elapsed >= cfg.max_time_minutes * 60
                if self.step % cfg.valid_every == 0 or self.step >= self.max_steps or out_of_time:
                    if self._validate_and_save():
                        stop_reason = "early_stopping"
                        break
                    self.model.train()
                    bar.total = self.max_steps
                elif cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0:
                    self.save(best=False, background=True)
                if out_of_time:
                    stop_reason = "max_time"
                    break
            else:
                stop_reason = "plateau_cooldown" if self.max_steps < cfg.max_steps else "max_steps"
        finally:
            bar.close()
            if isinstance(steps, Prefetcher):
                steps.close()
            self.sampler.load_state_dict(self.sampler_state)  # back from running ahead
            if sys.exc_info()[0] is not None:  # finish a checkpoint being written; the error in flight wins
                with contextlib.suppress(Exception):
                    self.checkpoints.wait()
        if not self.history or self.history[-1].get("step") != self.step or "valid_loss" not in self.history[-1]:
            self._validate_and_save()
        self.checkpoints.wait()
        log.info("training stopped (%s) at step %d after %.1f min; best %s %.2f at step %d",
                 stop_reason, self.step, self.elapsed / 60, cfg.best_metric, self.best if self.best is not None else float("nan"), self.best_step)
        return {"step": self.step, "best": self.best, "best_step": self.best_step, "stop_reason": stop_reason,
                "elapsed_s": self.elapsed, "last": self.history[-1] if self.history else {}}

    def _train_step_or_explain(self, batches: list[Batch]) -> bool:
        """`_train_step`, with one clear line when the device runs out of memory."""
        try:
            return self._train_step(batches)
        except torch.cuda.OutOfMemoryError:
            shapes = ", ".join("x".join(map(str, b.shape)) for b in batches)
            raise TrainingAborted(
                f"the {self.device.type} device ran out of memory at step {self.step + 1} on a batch of {shapes} "
                f"(rows x source x target positions) with training.max_tokens={self.cfg.max_tokens}: lower "
                f"training.max_tokens (and raise training.accum_steps as much, to keep the batch size), or train a "
                f"smaller model. The last checkpoint is in {self.out_dir}") from None

    def _train_step(self, batches: list[Batch]) -> bool:
        """One optimizer step over the step's micro-batches, the same on every device: the gradients of the
        summed losses / the step's tokens, unscaled and clipped; the optimizer and the schedule stepped; the
        loss added to the log window. A step whose loss or gradient norm is not finite leaves the parameters
        as they were. Where the host reads values for free (a CPU) it checks at once: a non-finite step is
        skipped (and counted) there and takes no step number, and the call returns False. Elsewhere (a GPU)
        nothing is read: the device skips the update (`step_unless`; the fp16 scaler skips by itself), the
        step takes its number, and the window counts the skip at the next log line (`_settle`)."""
        total_tokens = distributed.sum_int(sum(b.n_tgt_tokens for b in batches), self.device)
        self.optimizer.zero_grad(set_to_none=True)
        on_step = getattr(getattr(self.model, "encoder", None), "on_train_step", None)
        if on_step is not None:  # e.g. a frozen pretrained backbone that starts training at step K
            on_step(self.step)
        loss_sum = self._accumulate_gradients(batches, total_tokens)
        if loss_sum is None:
            self._skip_step()
            return False
        self.scaler.unscale_(self.optimizer)
        max_norm = self.cfg.clip_norm if self.cfg.clip_norm else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        ok = torch.isfinite(loss_sum) & torch.isfinite(norm)
        if not self.deferred and not ok:  # (the scaler is a CUDA one: off where the host checks)
            self._skip_step()
            return False
        if self.scaler.is_enabled():
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            step_unless(self.optimizer, ~ok)
        self.scheduler.step()
        self.step += 1
        if self.deferred:
            self.window.add_on_device(loss_sum, total_tokens, ok)
        else:
            self.window.add(distributed.sum_float(loss_sum.item(), self.device) / total_tokens, total_tokens)
        return True

    def _gradient_sync(self, last: bool) -> contextlib.AbstractContextManager[None]:
        """Where a micro-batch's forward and backward run: under DDP, gradients are all-reduced with the
        step's `last` micro-batch only (`no_sync` before)."""
        return contextlib.nullcontext() if self.ddp is None or last else self.ddp.no_sync()

    def _micro_batch_loss(self, batch: Batch) -> torch.Tensor:
        """The summed loss of one micro-batch on the device (under DDP, through its wrapper)."""
        with autocast_context(self.device, self.precision):
            if self.ddp is None:
                return sequence_loss(self.model, batch.src, batch.tgt_in, batch.tgt_out, self.pad_id,
                                     self.cfg.label_smoothing, self.cfg.ctc_weight, batch.target_positions,
                                     batch.target_weights)
            return self.ddp(batch.src, batch.tgt_in, batch.tgt_out, batch.target_positions, batch.target_weights)

    def _accumulate_gradients(self, batches: list[Batch], total_tokens: int) -> torch.Tensor | None:
        """Backpropagate each micro-batch's summed loss / total_tokens (the step's tokens over all
        processes). Returns this process's summed loss, a 0-dim tensor on the device: float64 where the host
        checks each step (the sum Python floats would make, exactly), float32 elsewhere (MPS has no float64);
        None where the host saw a non-finite loss and stopped the step there (one process).

        Under DDP (this process's share of the step) the gradients are all-reduced, i.e. averaged, with the
        last micro-batch only (`no_sync` before), so each loss is also scaled by world_size; a non-finite loss
        is still backpropagated, so that the NaN reaches every process through the all-reduce and all of them
        skip the step together."""
        stop_at_non_finite = not self.deferred and self.ddp is None
        loss_sum = torch.zeros((), dtype=torch.float32 if self.deferred else torch.float64, device=self.device)
        for i, batch in enumerate(batches):
            with self._gradient_sync(last=i == len(batches) - 1):
                loss = self._micro_batch_loss(batch.to(self.device, non_blocking=True))
                if stop_at_non_finite and not torch.isfinite(loss):
                    return None
                self.scaler.scale(loss * self.world / total_tokens).backward()
            loss_sum = loss_sum + loss.detach().to(loss_sum.dtype)
        return loss_sum

    def _skip_step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.bad_steps += 1
        log.warning("non-finite loss or gradient at step %d: batch skipped (%d so far)", self.step + 1, self.bad_steps)
        self._check_bad_steps()

    def _settle(self) -> None:
        """Read what the deferred steps left on the device (one host read): their loss goes into the
        log window, and the steps the device skipped are counted, warned about and held against
        training.max_bad_steps. Nothing to do on a CPU."""
        bad = self.window.settle(self.device)
        if bad:
            self.bad_steps += bad
            log.warning("%d step(s) up to step %d had a non-finite loss or gradient: their updates were skipped "
                        "(%d so far)", bad, self.step, self.bad_steps)
            self._check_bad_steps()

    def _check_bad_steps(self) -> None:
        if self.bad_steps > self.cfg.max_bad_steps:
            raise TrainingAborted(
                f"{self.bad_steps} steps had a non-finite loss or gradient (limit training.max_bad_steps="
                f"{self.cfg.max_bad_steps}); try a lower training.lr or precision fp32. "
                f"The last good checkpoint is in {self.out_dir}"
            )

    # ---- validation and logging --------------------------------------------------------------

    def validate(self) -> dict[str, float]:
        """Validation loss/perplexity, and BLEU/chrF/WER/CER of greedy decoding if cfg.valid_bleu
        (see `seq2seq.training.validation.validate`); {} without a validation set."""
        if self.valid is None:
            return {}
        return validate(self.model, self.valid, self.device, self.precision, self.pad_id, self.search_cfg,
                        decode=self.cfg.valid_bleu)

    def _validate_and_save(self) -> bool:
        """Validate, save checkpoints and log. Returns True when early stopping says stop.

        Under torchrun rank 0 validates and decides; the others receive its bookkeeping."""
        self._settle()
        improved = False
        if distributed.is_main():
            metrics = self.validate()
            value = metrics.get(METRIC_KEYS[self.cfg.best_metric])
            improved = is_better(self.cfg.best_metric, value, self.best)
            if improved:
                self.best, self.best_step = value, self.step
                self.validations_without_gain = 0
            else:
                self.validations_without_gain += 1
                self._check_plateau()
            self._log(metrics)
            shown = " ".join(f"{k}={v:.3f}" for k, v in metrics.items())
            log.info("step %d: %s%s", self.step, shown, " (best)" if improved else "")
        shared = distributed.broadcast_object((improved, self.best, self.best_step, self.validations_without_gain,
                                               self.history, self.plateau_step))
        improved, self.best, self.best_step, self.validations_without_gain, self.history, self.plateau_step = shared
        self.save(best=improved, background=True)
        patience = self.cfg.patience
        return patience is not None and self.validations_without_gain >= patience

    def _check_plateau(self) -> None:
        """Start the cooldown now if cfg.cooldown_patience validations brought no improvement."""
        patience = self.cfg.cooldown_patience
        if patience is None or self.plateau_step is not None or self.validations_without_gain < patience:
            return
        self.plateau_step = self.step
        if self.max_steps < self.cfg.max_steps:
            log.info("no %s improvement in %d validation(s) since step %d: the learning rate now anneals to 0 "
                     "by step %d (training.cooldown_patience)", self.cfg.best_metric, patience, self.best_step,
                     self.max_steps)

    def _log_training(self, window: LogWindow, bar: tqdm) -> None:
        """Log the mean loss and tokens/s since the last log (to the bar, or the logger without one),
        and on a GPU the most memory it has held."""
        self._settle()
        if not window.tokens:
            return
        mean_loss, tok_s = window.take()
        lr = self.optimizer.param_groups[0]["lr"]
        memory = {}
        if self.device.type == "cuda":
            memory["gpu_mem_gib"] = torch.cuda.max_memory_allocated(self.device) / 2**30
        bar.set_postfix(loss=f"{mean_loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{tok_s:,.0f}",
                        **{"mem": f"{memory['gpu_mem_gib']:.1f}G" for _ in memory})
        if bar.disable:
            log.info("step %d: loss %.3f, lr %.2e, %s tokens/s, %.1f min%s", self.step, mean_loss, lr, f"{tok_s:,.0f}",
                     self.elapsed / 60, "".join(f", GPU memory {v:.1f} GiB at most" for v in memory.values()))
        self._log({"train_loss": mean_loss, "lr": lr, "tokens_per_s": tok_s, **memory})

    def _log(self, metrics: dict[str, float]) -> None:
        if self.tensorboard is not None:
            for key, value in metrics.items():
                self.tensorboard.add_scalar(key, value, self.step)
        row = {"step": self.step, "time_min": round(self.elapsed / 60, 3), **metrics}
        if self.history and self.history[-1]["step"] == self.step:
            self.history[-1].update(row)
        else:
            self.history.append(row)

    # ---- checkpoints -----------------------------------------------------------------------

    def save(self, best: bool, background: bool = False) -> None:
        """Last-K checkpoint, the best weights (if `best`), the resume state, the log and the plot;
        all atomic (see `seq2seq.training.run_state`); with `background`, written while training goes on
        (`wait_for_saves`)."""
        self._settle()
        rngs = distributed.gather_objects(rng_state())  # every process's random state, for an exact resume
        if not distributed.is_main():
            return
        objects: dict[str, object] = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                   "scaler": self.scaler.state_dict(), "rng": rngs[0]}
        if self.world > 1:
            objects["rng_ranks"] = rngs
        progress: Progress = {  # the PROGRESS attributes, in that order, then:
            "step": self.step, "bad_steps": self.bad_steps, "elapsed": self.elapsed, "best": self.best,
            "best_step": self.best_step, "validations_without_gain": self.validations_without_gain,
            "history": self.history, "plateau_step": self.plateau_step,
            "sampler": dict(self.sampler_state),  # (the sampler itself may be running ahead)
            "log_window": (self.window.tokens, self.window.loss),  # a resumed run logs the same means
            "world": self.world,  # (an elastic restart may resume with another number of processes)
        }
        self.checkpoints.save(self.model, objects, progress, best, background)
        if self.tensorboard is not None:
            self.tensorboard.flush()

    def wait_for_saves(self) -> None:
        """Wait until a save written in the background is on disk (raising its error if it failed)."""
        self.checkpoints.wait()

    def resume(self) -> bool:
        """Restore everything from train_state/. Returns False when there is nothing to resume."""
        loaded = self.checkpoints.load(self.model)
        if loaded is None:
            return False
        objects, progress = loaded
        kernels: list[dict[str, bool | None]] = [{k: g[k] for k in ("fused", "foreach", "capturable") if k in g}
                                                 for g in self.optimizer.param_groups]
        self.optimizer.load_state_dict(objects["optimizer"])
        for group, chosen in zip(self.optimizer.param_groups, kernels):  # this device's kernels, not the saver's
            group.update(chosen)
        self.scheduler.load_state_dict(objects["scheduler"])
        self.scaler.load_state_dict(objects["scaler"])
        ranks = objects.get("rng_ranks")
        set_rng_state(ranks[distributed.rank()] if ranks and len(ranks) == self.world else objects["rng"])
        saved_world = progress.get("world", len(ranks) if ranks else 1)
        if saved_world != self.world:
            self._log_world_change(saved_world)
        self.sampler.load_state_dict(progress["sampler"])
        self.sampler_state = self.sampler.state_dict()
        for name, value in progress.items():  # the PROGRESS attributes saved (older states lack plateau_step)
            if name in PROGRESS:
                setattr(self, name, value)
        self.window.tokens, self.window.loss = progress.get("log_window", (0, 0.0))
        return True

    def _log_world_change(self, saved_world: int) -> None:
        """Say how a run saved by `saved_world` processes goes on with this run's (e.g. an elastic restart with
        fewer or more nodes, torchrun --nnodes=MIN:MAX). The global batch stays training.accum_steps batches of
        training.max_tokens a step (`placement.place` refused the world if it does not divide them), so the run
        trains the same steps; the processes' random states restart from rank 0's."""
        accum = self.cfg.accum_steps
        log.info("resumed with %d process(es) where the run was saved by %d: the global batch stays %d batches of "
                 "%d tokens a step (training.accum_steps), now %d a process (was %d)%s", self.world, saved_world,
                 accum, self.cfg.max_tokens, accum // self.world, max(accum // saved_world, 1),
                 "; every process continues from rank 0's random state" if self.world > 1 else "")


def open_tensorboard(out_dir: Path) -> SummaryWriter:
    """A SummaryWriter for out_dir/tensorboard; TrainingAborted naming the extra when it is missing."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise TrainingAborted('training.tensorboard: true needs the tensorboard package: '
                              'pip install "seq2seq[tensorboard]" (or set training.tensorboard: false)') from None
    return SummaryWriter(str(out_dir / "tensorboard"))
