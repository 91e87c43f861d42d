"""A training run's checkpoints in its model directory (file formats and atomic writes: `checkpoint`).

Each save writes, every file atomically:

    checkpoints/step_N.safetensors  this step's weights; only the last `keep_last` are kept
    model.safetensors               the weights, when this step is the best so far
    train_state/                    what resume needs: weights, `objects` (optimizer, scheduler,
                                    scaler, RNG states; torch.save) and `progress` (JSON: step,
                                    data position, best score, history, ...)
    metadata.json                   updated with the step, the best score and the last validation
    log.csv, curves.png             every logged row of the history, and its plot
"""

from __future__ import annotations

import csv
import logging
import random
from pathlib import Path
from typing import Any

import torch
from torch import nn

from seq2seq.storage import files as ckpt

log = logging.getLogger(__name__)


def rng_state() -> dict[str, Any]:
    """The torch (CPU and CUDA) and Python random states, for an exact resume."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Checkpoints:
    """Saves and restores a training run in `out_dir` (see the module docstring)."""

    def __init__(self, out_dir: str | Path, keep_last: int, best_metric: str) -> None:
        self.out_dir = Path(out_dir)
        self.keep_last = keep_last
        self.best_metric = best_metric

    def save(self, model: nn.Module, objects: dict[str, Any], progress: dict[str, Any], best: bool) -> None:
        """Save `model`'s weights (as step progress["step"]; also as the best weights if `best`),
        the resume state (`objects` and `progress`), the metadata, the log and the plot.

        progress must hold step, best, best_step, elapsed (seconds) and history (list of rows)."""
        weights = dict(model.state_dict())
        ckpt_dir = self.out_dir / "checkpoints"
        ckpt.save_weights(weights, ckpt_dir / f"step_{progress['step']}.safetensors")
        kept = sorted(ckpt_dir.glob("step_*.safetensors"), key=lambda p: int(p.stem.split("_")[1]))
        for old in kept[: max(0, len(kept) - self.keep_last)]:
            old.unlink()
        if best:
            ckpt.save_weights(weights, self.out_dir / ckpt.WEIGHTS)
        ckpt.save_train_state(self.out_dir, {"model.safetensors": weights, "optimizer.pt": objects,
                                             "state.json": progress})
        self._update_metadata(progress)
        self._write_log(progress["history"])

    def load(self, model: nn.Module) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """Load the last saved weights into `model`; return (objects, progress) as saved, or None when
        there is nothing to resume."""
        state_dir = ckpt.train_state_dir(self.out_dir)
        if state_dir is None:
            return None
        ckpt.load_into(model, ckpt.load_weights(state_dir / "model.safetensors"), state_dir)
        objects = ckpt.load_torch(state_dir / "optimizer.pt")
        progress = ckpt.read_json(state_dir / "state.json")
        log.info("resumed from %s at step %d", state_dir, progress["step"])
        return objects, progress

    def _update_metadata(self, progress: dict[str, Any]) -> None:
        path = self.out_dir / ckpt.METADATA
        meta = ckpt.read_json(path) if path.is_file() else {}
        history = progress["history"]
        meta.update(
            {
                "step": progress["step"],
                "best_metric": self.best_metric,
                "best_score": progress["best"],
                "best_step": progress["best_step"],
                "training_minutes": round(progress["elapsed"] / 60, 2),
                "last_validation": dict(history[-1]) if history else {},
            }
        )
        ckpt.write_json_atomic(path, meta)

    def _write_log(self, history: list[dict[str, Any]]) -> None:
        keys: list[str] = []
        for row in history:
            keys += [k for k in row if k not in keys]
        path = self.out_dir / "log.csv"
        with ckpt.atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=keys)
            writer.writeheader()
            writer.writerows(history)
        try:
            from seq2seq.report.plots import plot_training_curves

            plot_training_curves(history, self.out_dir / "curves.png")
        except Exception as e:  # noqa: BLE001 - a plot must never stop training
            log.warning("could not draw curves.png: %s", e)
