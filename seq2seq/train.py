"""Training: one clear loop with label smoothing, AdamW, warmup schedules, AMP, validation,
checkpoints and exact resume.

The trainer knows nothing about text: a batch's `src` goes to the model's encoder as it is, and
validation decodes with the shared search module and scores detokenized strings with sacreBLEU.

    for each step:
        accumulate `accum_steps` token-bucketed batches (loss = sum over tokens / tokens in the step)
        skip the step if the loss or gradient is not finite (abort after `max_bad_steps`)
        clip, optimizer step, schedule step
        every `valid_every` steps: validate, save (best, last K, resume state), log, plot
"""

from __future__ import annotations

import csv
import logging
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch import nn
from tqdm import tqdm

from . import checkpoint as ckpt
from .config import TrainingConfig  # noqa: F401 - re-exported: the `training` section
from .device import autocast_context, choose_device, resolve_precision
from .batching import Batch, TokenBatchSampler
from .loss import sequence_loss
from .metrics import score as score_hypotheses
from .search import SearchConfig, search

log = logging.getLogger(__name__)


class TrainingAborted(RuntimeError):
    """Training cannot go on (too many non-finite steps); the last good checkpoint is kept."""


# --------------------------------------------------------------------------------------------
# Pieces
# --------------------------------------------------------------------------------------------


def lr_lambda(cfg: TrainingConfig) -> Callable[[int], float]:
    """Multiplier of cfg.lr at a step: linear warmup, then the chosen decay."""
    warmup = max(cfg.warmup_steps, 0)

    def factor(step: int) -> float:
        step = step + 1
        if step <= warmup:
            return step / warmup
        if cfg.schedule == "inverse_sqrt":
            return math.sqrt(max(warmup, 1) / step)
        if cfg.schedule == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, cfg.max_steps - warmup))
        floor = cfg.min_lr_ratio
        if cfg.schedule == "linear":
            return floor + (1.0 - floor) * (1.0 - progress)
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def cooldown_factor(cfg: TrainingConfig, step: int, elapsed_s: float) -> float:
    """Multiplier that anneals the learning rate linearly to 0 over the last cfg.cooldown of the run.

    The run's progress is the larger of step / max_steps and elapsed / max_time_minutes, so a
    wall-clock budget ends with the same annealing as a step budget (warmup-stable-decay)."""
    if cfg.cooldown <= 0:
        return 1.0
    progress = step / max(cfg.max_steps, 1)
    if cfg.max_time_minutes:
        progress = max(progress, elapsed_s / (cfg.max_time_minutes * 60))
    return max(0.0, min(1.0, (1.0 - progress) / cfg.cooldown))


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@dataclass
class ValidData:
    """A fixed validation set: batches in order, the reference text of each row, a detokenizer."""

    batches: list[Batch]
    references: list[str]  # indexed by Batch.indices
    detokenize: Callable[[list[list[int]]], list[str]]


# --------------------------------------------------------------------------------------------
# The trainer
# --------------------------------------------------------------------------------------------


class Trainer:
    """Trains `model` on batches of `sampler` (indices) collated by `collate`, into `out_dir`."""

    def __init__(
        self,
        model: nn.Module,
        cfg: TrainingConfig,
        sampler: TokenBatchSampler,
        collate: Callable[[list[int]], Batch],
        valid: ValidData | None,
        out_dir: str | Path,
        search_cfg: SearchConfig | None = None,
        pad_id: int = 0,
    ) -> None:
        self.cfg = cfg
        self.device = choose_device(cfg.device)
        if cfg.threads and self.device.type == "cpu":
            torch.set_num_threads(cfg.threads)
        self.model = model.to(self.device)
        self.precision = resolve_precision(cfg.precision, self.device)
        self.sampler, self.collate, self.valid = sampler, collate, valid
        self.out_dir = Path(out_dir)
        self.pad_id = pad_id
        self.search_cfg = search_cfg or SearchConfig(strategy="greedy")
        decay, no_decay = [], []
        for name, p in model.named_parameters():
            (no_decay if p.ndim < 2 or "norm" in name or "embed" in name else decay).append(p)
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=cfg.lr,
            betas=tuple(cfg.betas),
            eps=cfg.adam_eps,
        )
        self.step = 0
        self.bad_steps = 0
        self.elapsed = 0.0  # seconds of training so far, across resumes
        schedule = lr_lambda(cfg)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: schedule(step) * cooldown_factor(cfg, step, self.elapsed))
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.precision == "fp16" and self.device.type == "cuda")
        self.best: float | None = None
        self.best_step = 0
        self.validations_without_gain = 0
        self.history: list[dict[str, Any]] = []
        torch.manual_seed(cfg.seed)
        random.seed(cfg.seed)

    # ---- the loop ------------------------------------------------------------------------

    def _batch_stream(self) -> Iterator[list[int]]:
        while True:
            yield from self.sampler
            if self.cfg.max_epochs is not None and self.sampler.epoch + 1 >= self.cfg.max_epochs:
                return
            self.sampler.set_epoch(self.sampler.epoch + 1)

    def train(self) -> dict[str, Any]:
        cfg = self.cfg
        stream = self._batch_stream()
        start_elapsed = self.elapsed
        t0 = time.perf_counter()
        window_tokens, window_loss, window_time = 0, 0.0, time.perf_counter()
        stop_reason = "max_steps"
        # The bar needs a terminal; elsewhere (CI, nohup, a pipe) the same figures go to the log.
        bar = tqdm(total=cfg.max_steps, initial=self.step, desc="train", unit="step", dynamic_ncols=True,
                   leave=False, disable=None)
        self.model.train()
        try:
            while self.step < cfg.max_steps:
                batches = [b for _, b in zip(range(cfg.accum_steps), stream)]
                if not batches:
                    stop_reason = "max_epochs"
                    break
                loss, n_tokens = self._train_step([self.collate(b) for b in batches])
                self.elapsed = start_elapsed + time.perf_counter() - t0
                if loss is None:  # skipped: nothing was learned, nothing to log or save
                    continue
                window_tokens += n_tokens
                window_loss += loss * n_tokens
                if self.step % cfg.log_every == 0 and window_tokens:
                    mean_loss = window_loss / window_tokens
                    tok_s = window_tokens / (time.perf_counter() - window_time)
                    lr = self.optimizer.param_groups[0]["lr"]
                    bar.set_postfix(loss=f"{mean_loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{tok_s:,.0f}")
                    if bar.disable:
                        log.info("step %d: loss %.3f, lr %.2e, %s tokens/s, %.1f min",
                                 self.step, mean_loss, lr, f"{tok_s:,.0f}", self.elapsed / 60)
                    self._log({"train_loss": mean_loss, "lr": lr, "tokens_per_s": tok_s})
                    window_tokens, window_loss, window_time = 0, 0.0, time.perf_counter()
                bar.update(1)
                out_of_time = cfg.max_time_minutes is not None and self.elapsed >= cfg.max_time_minutes * 60
                if self.step % cfg.valid_every == 0 or self.step >= cfg.max_steps or out_of_time:
                    if self._validate_and_save():
                        stop_reason = "early_stopping"
                        break
                    self.model.train()
                elif cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0:
                    self.save(best=False)
                if out_of_time:
                    stop_reason = "max_time"
                    break
        finally:
            bar.close()
        if not self.history or self.history[-1].get("step") != self.step or "valid_loss" not in self.history[-1]:
            self._validate_and_save()
        log.info("training stopped (%s) at step %d after %.1f min; best %s %.2f at step %d",
                 stop_reason, self.step, self.elapsed / 60, cfg.best_metric, self.best or float("nan"), self.best_step)
        return {"step": self.step, "best": self.best, "best_step": self.best_step, "stop_reason": stop_reason,
                "elapsed_s": self.elapsed, "last": self.history[-1] if self.history else {}}

    def _train_step(self, batches: list[Batch]) -> tuple[float | None, int]:
        """One optimizer step over micro-batches. Returns (mean token loss or None if skipped, tokens)."""
        total_tokens = sum(b.n_tgt_tokens for b in batches)
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        finite = True
        for batch in batches:
            batch = batch.to(self.device)
            with autocast_context(self.device, self.precision):
                loss = sequence_loss(self.model, batch.src, batch.tgt_in, batch.tgt_out, self.pad_id,
                                     self.cfg.label_smoothing)
            if not torch.isfinite(loss):
                finite = False
                break
            self.scaler.scale(loss / total_tokens).backward()
            loss_sum += loss.item()
        grad_norm = None
        if finite:
            self.scaler.unscale_(self.optimizer)
            max_norm = self.cfg.clip_norm if self.cfg.clip_norm else float("inf")
            grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
            finite = bool(torch.isfinite(grad_norm))
        if not finite and not self.scaler.is_enabled():
            self.optimizer.zero_grad(set_to_none=True)
            self.bad_steps += 1
            log.warning("non-finite loss or gradient at step %d: batch skipped (%d so far)", self.step + 1, self.bad_steps)
            if self.bad_steps > self.cfg.max_bad_steps:
                raise TrainingAborted(
                    f"{self.bad_steps} steps had a non-finite loss or gradient (limit training.max_bad_steps="
                    f"{self.cfg.max_bad_steps}); try a lower training.lr or precision fp32. "
                    f"The last good checkpoint is in {self.out_dir}"
                )
            return None, total_tokens
        self.scaler.step(self.optimizer)  # the fp16 scaler skips non-finite steps itself
        self.scaler.update()
        self.scheduler.step()
        self.step += 1
        return loss_sum / total_tokens, total_tokens

    # ---- validation ------------------------------------------------------------------------

    @torch.inference_mode()
    def validate(self) -> dict[str, float]:
        """Validation loss/perplexity (plain NLL), and BLEU/chrF of greedy decoding if enabled."""
        if self.valid is None:
            return {}
        self.model.eval()
        nll, tokens = 0.0, 0
        hyps: dict[int, list[int]] = {}
        for batch in self.valid.batches:
            batch = batch.to(self.device)
            with autocast_context(self.device, self.precision):
                nll += sequence_loss(self.model, batch.src, batch.tgt_in, batch.tgt_out, self.pad_id).item()
            tokens += batch.n_tgt_tokens
            if self.cfg.valid_bleu:
                with autocast_context(self.device, self.precision):
                    results = search(self.model, batch.src, self.search_cfg)
                for i, nbest in zip(batch.indices, results):
                    hyps[i] = nbest[0].tokens
        metrics = {"valid_loss": nll / max(tokens, 1), "valid_ppl": math.exp(min(nll / max(tokens, 1), 50))}
        if self.cfg.valid_bleu and hyps:
            order = sorted(hyps)
            texts = self.valid.detokenize([hyps[i] for i in order])
            scores = score_hypotheses(texts, [[self.valid.references[i] for i in order]], metrics=("bleu", "chrf"))
            metrics["valid_bleu"] = scores["bleu"]["score"]
            metrics["valid_chrf"] = scores["chrf"]["score"]
        return metrics

    def _metric(self, metrics: dict[str, float]) -> float | None:
        key = {"bleu": "valid_bleu", "chrf": "valid_chrf", "loss": "valid_loss"}[self.cfg.best_metric]
        return metrics.get(key)

    def _improved(self, value: float | None) -> bool:
        if value is None:
            return self.best is None
        if self.best is None:
            return True
        return value < self.best if self.cfg.best_metric == "loss" else value > self.best

    def _validate_and_save(self) -> bool:
        """Validate, save checkpoints and log. Returns True when early stopping says stop."""
        metrics = self.validate()
        value = self._metric(metrics)
        improved = self._improved(value)
        if improved:
            self.best, self.best_step = value, self.step
            self.validations_without_gain = 0
        else:
            self.validations_without_gain += 1
        self._log(metrics)
        self.save(best=improved)
        shown = " ".join(f"{k}={v:.3f}" for k, v in metrics.items())
        log.info("step %d: %s%s", self.step, shown, " (best)" if improved else "")
        patience = self.cfg.patience
        return patience is not None and self.validations_without_gain >= patience

    # ---- checkpoints -----------------------------------------------------------------------

    def save(self, best: bool) -> None:
        """Last-K checkpoint, the best weights, the resume state, the log and the plot; all atomic."""
        weights = {k: v for k, v in self.model.state_dict().items()}
        ckpt_dir = self.out_dir / "checkpoints"
        ckpt.save_weights(weights, ckpt_dir / f"step_{self.step}.safetensors")
        kept = sorted(ckpt_dir.glob("step_*.safetensors"), key=lambda p: int(p.stem.split("_")[1]))
        for old in kept[: max(0, len(kept) - self.cfg.keep_last)]:
            old.unlink()
        if best:
            ckpt.save_weights(weights, self.out_dir / ckpt.WEIGHTS)
        ckpt.save_train_state(
            self.out_dir,
            {
                "model.safetensors": weights,
                "optimizer.pt": {
                    "optimizer": self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict(),
                    "scaler": self.scaler.state_dict(),
                    "rng": rng_state(),
                },
                "state.json": {
                    "step": self.step,
                    "sampler": self.sampler.state_dict(),
                    "bad_steps": self.bad_steps,
                    "elapsed": self.elapsed,
                    "best": self.best,
                    "best_step": self.best_step,
                    "validations_without_gain": self.validations_without_gain,
                    "history": self.history,
                },
            },
        )
        self._update_metadata()
        self._write_log()

    def resume(self) -> bool:
        """Restore everything from train_state/. Returns False when there is nothing to resume."""
        state_dir = ckpt.train_state_dir(self.out_dir)
        if state_dir is None:
            return False
        ckpt.load_into(self.model, ckpt.load_weights(state_dir / "model.safetensors"), state_dir)
        blob = ckpt.load_torch(state_dir / "optimizer.pt")
        self.optimizer.load_state_dict(blob["optimizer"])
        self.scheduler.load_state_dict(blob["scheduler"])
        self.scaler.load_state_dict(blob["scaler"])
        set_rng_state(blob["rng"])
        state = ckpt.read_json(state_dir / "state.json")
        self.step = state["step"]
        self.sampler.load_state_dict(state["sampler"])
        self.bad_steps = state["bad_steps"]
        self.elapsed = state["elapsed"]
        self.best, self.best_step = state["best"], state["best_step"]
        self.validations_without_gain = state["validations_without_gain"]
        self.history = state["history"]
        log.info("resumed from %s at step %d", state_dir, self.step)
        return True

    def _log(self, metrics: dict[str, float]) -> None:
        row = {"step": self.step, "time_min": round(self.elapsed / 60, 3), **metrics}
        if self.history and self.history[-1]["step"] == self.step:
            self.history[-1].update(row)
        else:
            self.history.append(row)

    def _write_log(self) -> None:
        keys: list[str] = []
        for row in self.history:
            keys += [k for k in row if k not in keys]
        path = self.out_dir / "log.csv"
        with ckpt.atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=keys)
            writer.writeheader()
            writer.writerows(self.history)
        try:
            from .plots import plot_training_curves

            plot_training_curves(self.history, self.out_dir / "curves.png")
        except Exception as e:  # noqa: BLE001 - a plot must never stop training
            log.warning("could not draw curves.png: %s", e)

    def _update_metadata(self) -> None:
        path = self.out_dir / ckpt.METADATA
        meta = ckpt.read_json(path) if path.is_file() else {}
        meta.update(
            {
                "step": self.step,
                "best_metric": self.cfg.best_metric,
                "best_score": self.best,
                "best_step": self.best_step,
                "training_minutes": round(self.elapsed / 60, 2),
                "last_validation": {k: v for k, v in (self.history[-1] if self.history else {}).items()},
            }
        )
        ckpt.write_json_atomic(path, meta)
