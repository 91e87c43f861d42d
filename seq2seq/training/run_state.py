"""A training run's checkpoints in its model directory (the layout and atomic writes: `ModelDir`).

Each save writes, every file atomically, in this order:

    checkpoints/step_N.safetensors  this step's weights; only the last `keep_last` are kept
    train_state/                    what resume needs: weights, `objects` (optimizer, scheduler,
                                    scaler, RNG states; torch.save) and `progress` (JSON: step,
                                    data position, best score, history, ...)
    model.safetensors               the weights, when this step is the best so far
    metadata.json                   updated with the step, the best score and the last validation
    log.csv, curves.png             every logged row of the history, and its plot

The resume state comes before the best weights: a run killed between the two is resumable (a
model.safetensors without train_state/ would look like a finished model), and `load` writes what
the killed save did not (the best weights when the last save was the best, the metadata and log),
so a run killed at any moment and resumed ends with the files of a run never killed
(benchmarks/kill_soak.py).
"""

from __future__ import annotations

import csv
import logging
import random
from pathlib import Path
from typing import Any

import torch
from torch import nn

from seq2seq.storage.atomic import atomic_path, read_json
from seq2seq.storage.model_dir import ModelDir
from seq2seq.storage.weights import load_into, load_torch, load_weights
from seq2seq.training import distributed

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
        self.model_dir = ModelDir(out_dir)
        self.keep_last = keep_last
        self.best_metric = best_metric

    def save(self, model: nn.Module, objects: dict[str, Any], progress: dict[str, Any], best: bool) -> None:
        """Save `model`'s weights (as step progress["step"]; also as the best weights if `best`),
        the resume state (`objects` and `progress`), the metadata, the log and the plot.

        progress must hold step, best, best_step, elapsed (seconds) and history (list of rows)."""
        weights = dict(model.state_dict())
        self.model_dir.save_checkpoint(weights, progress["step"], self.keep_last)
        self.model_dir.save_train_state({"model.safetensors": weights, "optimizer.pt": objects, "state.json": progress})
        if best:
            self.model_dir.save_weights(weights)
        self._finish_save(progress)

    def _finish_save(self, progress: dict[str, Any]) -> None:
        self._update_metadata(progress)
        self._write_log(progress["history"])

    def load(self, model: nn.Module) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """Load the last saved weights into `model`; return (objects, progress) as saved, or None when
        there is nothing to resume."""
        state_dir = self.model_dir.train_state()
        if state_dir is None:
            return None
        weights = load_weights(state_dir / "model.safetensors")
        load_into(model, weights, state_dir)
        objects = load_torch(state_dir / "optimizer.pt")
        progress = read_json(state_dir / "state.json")
        log.info("resumed from %s at step %d", state_dir, progress["step"])
        if distributed.is_main():  # what a save killed after train_state/ did not write (see the module)
            if progress.get("best_step") == progress["step"]:
                self.model_dir.save_weights(weights)
            self._finish_save(progress)
        return objects, progress

    def _update_metadata(self, progress: dict[str, Any]) -> None:
        history = progress["history"]
        self.model_dir.update_metadata(
            {
                "step": progress["step"],
                "best_metric": self.best_metric,
                "best_score": progress["best"],
                "best_step": progress["best_step"],
                "training_minutes": round(progress["elapsed"] / 60, 2),
                "last_validation": dict(history[-1]) if history else {},
            }
        )

    def _write_log(self, history: list[dict[str, Any]]) -> None:
        keys: list[str] = []
        for row in history:
            keys += [k for k in row if k not in keys]
        with atomic_path(self.model_dir.log_path) as tmp, open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=keys)
            writer.writeheader()
            writer.writerows(history)
        try:
            from seq2seq.report.plots import plot_training_curves

            plot_training_curves(history, self.model_dir.curves_path)
        except Exception as e:  # noqa: BLE001 - a plot must never stop training
            log.warning("could not draw curves.png: %s", e)
