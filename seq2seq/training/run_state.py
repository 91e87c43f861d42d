"""A training run's checkpoints in its model directory (the layout and atomic writes: `ModelDir`).

Each save writes, every file atomically, in this order:

    checkpoints/step_N.safetensors  this step's weights; only the last `keep_last` are kept
    train_state/                    what resume needs: weights, `objects` (optimizer, scheduler,
                                    scaler, RNG states; their tensors as objects.safetensors, the rest
                                    as objects.json: no pickle) and `progress` (JSON: step, data
                                    position, best score, history, ...)
    model.safetensors               the weights, when this step is the best so far
    metadata.json                   updated with the step, the best score and the last validation
    log.csv, curves.png             every logged row of the history, and its plot

The resume state comes before the best weights: a run killed between the two is resumable (a
model.safetensors without train_state/ would look like a finished model), and `load` writes what
the killed save did not (the best weights when the last save was the best, the metadata and log),
so a run killed at any moment and resumed ends with the files of a run never killed
(benchmarks/kill_soak.py).

Saving in the background (`save(..., background=True)`, what the training loop does): the training
thread only takes a snapshot, host copies of the weights and of every tensor in `objects` (a tied
tensor copied once), started without waiting on a GPU; a writer thread then writes the files above, in
the same order, while training goes on. One save is written at a time: the next snapshot waits for
the write before it (`wait()`), and an error of a background write is raised there.
"""

from __future__ import annotations

import copy
import csv
import logging
import random
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TypedDict

from typing_extensions import NotRequired

import torch
from torch import nn

from seq2seq.config.json_reader import JSONObject
from seq2seq.storage import CheckpointError
from seq2seq.storage.atomic import atomic_path, read_json
from seq2seq.storage.model_dir import ModelDir
from seq2seq.storage.weights import join_tensors, load_into, load_torch, load_weights, split_tensors
from seq2seq.training import distributed

log = logging.getLogger(__name__)


class Progress(TypedDict):
    """What a save keeps of the run besides weights and resume objects (state.json): the trainer's
    counters and log (`trainer.PROGRESS`), the sampler's position, the log window's sums and the number
    of processes. States written by earlier versions lack plateau_step, log_window and world."""

    step: int
    bad_steps: int
    elapsed: float
    best: float | None
    best_step: int
    validations_without_gain: int
    history: list[dict[str, float]]
    plateau_step: NotRequired[int | None]
    sampler: dict[str, int]
    log_window: NotRequired[tuple[int, float]]
    world: NotRequired[int]


class RngState(TypedDict):
    """The random states `rng_state` takes and `set_rng_state` restores: torch's on the CPU, Python's
    (`random.getstate()`; a list where read back from JSON) and, with CUDA, torch's per device."""

    torch: torch.Tensor
    python: tuple[int, tuple[int, ...], float | None]
    cuda: NotRequired[list[torch.Tensor]]


def rng_state() -> RngState:
    """The torch (CPU and CUDA) and Python random states, for an exact resume."""
    state: RngState = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: RngState) -> None:
    torch.set_rng_state(state["torch"])
    python = state["python"]  # (a tuple; older states kept it as saved)
    random.setstate((python[0], tuple(python[1]), python[2]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def host_copies(tensors: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], Callable[[], None]]:
    """Copies on the host of `tensors` (by name) that training may go on changing, and a function that
    waits until they are complete. A tensor held under several names (tied weights) is copied once and
    stays shared. From a GPU the copies are queued on the stream (page-locked, not waited for: the
    training thread goes on) and the function waits for them."""
    copies: dict[str, torch.Tensor] = {}
    made: dict[tuple[int, tuple[int, ...], tuple[int, ...], torch.device], torch.Tensor] = {}
    on_gpu = False
    for name, t in tensors.items():
        t = t.detach()
        key = (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.device)
        if key not in made:
            on_gpu |= t.is_cuda
            made[key] = t.to("cpu", non_blocking=True) if t.is_cuda else t.clone()
        copies[name] = made[key]
    if not on_gpu:
        return copies, lambda: None
    event = torch.cuda.Event()
    event.record()
    return copies, event.synchronize


@dataclass
class Snapshot:
    """What one save writes, as host copies (see `host_copies`): weights, the resume objects' tensors
    and skeleton (`split_tensors`), and a copy of `progress`."""

    weights: dict[str, torch.Tensor]
    object_tensors: dict[str, torch.Tensor]
    object_skeleton: JSONObject
    progress: Progress
    ready: Callable[[], None]

    @classmethod
    def take(cls, model: nn.Module, objects: dict[str, object], progress: Progress) -> Snapshot:
        tensors, skeleton = split_tensors(objects)
        both, ready = host_copies({**{f"model.{k}": v for k, v in model.state_dict().items()},
                                   **{f"objects.{k}": v for k, v in tensors.items()}})
        weights = {k[len("model."):]: v for k, v in both.items() if k.startswith("model.")}
        object_tensors = {k[len("objects."):]: v for k, v in both.items() if k.startswith("objects.")}
        return cls(weights, object_tensors, skeleton, copy.deepcopy(progress), ready)


def load_objects(state_dir: Path) -> dict[str, Any]:
    """The resume objects (optimizer, scheduler, scaler, RNG states) a train-state directory holds;
    CheckpointError naming the file when one is missing or unreadable."""
    if (state_dir / "objects.json").is_file():
        return join_tensors(load_weights(state_dir / "objects.safetensors"), read_json(state_dir / "objects.json"))
    return load_torch(state_dir / "optimizer.pt")  # a state saved before 2026-11-28: tensors and containers, no pickle


class BackgroundWriter:
    """Runs one job at a time on a thread of its own; `wait()` waits for the job in flight and raises
    the error it raised, if any (also from `submit`, before starting the next)."""

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def submit(self, job: Callable[[], None]) -> None:
        self.wait()

        def run() -> None:
            try:
                job()
            except BaseException as e:  # noqa: BLE001 - raised by wait(), on the training thread
                self.error = e

        self.thread = threading.Thread(target=run, name="seq2seq-checkpoint", daemon=True)
        self.thread.start()

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        error, self.error = self.error, None
        if error is not None:
            raise error


class Checkpoints:
    """Saves and restores a training run in `out_dir` (see the module docstring)."""

    def __init__(self, out_dir: str | Path, keep_last: int, best_metric: str) -> None:
        self.model_dir = ModelDir(out_dir)
        self.keep_last = keep_last
        self.best_metric = best_metric
        self.writer = BackgroundWriter()

    def save(self, model: nn.Module, objects: dict[str, object], progress: Progress, best: bool,
             background: bool = False) -> None:
        """Save `model`'s weights (as step progress["step"]; also as the best weights if `best`),
        the resume state (`objects`: tensors and JSON values in dicts, lists and tuples; and
        `progress`), the metadata, the log and the plot; with `background`, written by the writer
        thread from a snapshot taken now (see the module docstring), else before returning.

        progress must hold step, best, best_step, elapsed (seconds) and history (list of rows)."""
        self.writer.wait()  # one save at a time (and the previous one's error, if any, now)
        snapshot = Snapshot.take(model, objects, progress)
        if background:
            self.writer.submit(lambda: self._write(snapshot, best))
        else:
            self._write(snapshot, best)

    def wait(self) -> None:
        """Wait for a save in the background to be written (raising its error, if it failed)."""
        self.writer.wait()

    def _write(self, snapshot: Snapshot, best: bool) -> None:
        snapshot.ready()
        weights, progress = snapshot.weights, snapshot.progress
        self.model_dir.save_checkpoint(weights, progress["step"], self.keep_last)
        self.model_dir.save_train_state({"model.safetensors": weights, "objects.safetensors": snapshot.object_tensors,
                                         "objects.json": snapshot.object_skeleton, "state.json": progress})
        if best:
            self.model_dir.save_weights(weights)
        self._finish_save(progress)

    def _finish_save(self, progress: Progress) -> None:
        self._update_metadata(progress)
        self._write_log(progress["history"])

    def load(self, model: nn.Module) -> tuple[dict[str, Any], Progress] | None:
        """Load the last saved weights into `model`; return (objects, progress) as saved, or None when
        there is nothing to resume.

        Under torchrun rank 0 decides which train state every process resumes from (e.g. after an
        elastic restart; train_state/ or train_state.old/) and its step; a process that cannot read that
        one (an output directory not shared by the machines) raises CheckpointError saying so."""
        state_dir = self.model_dir.train_state()
        chosen = (None if state_dir is None else (state_dir.name, read_json(state_dir / "state.json")["step"])) \
            if distributed.is_main() else None
        chosen = distributed.broadcast_object(chosen)
        if chosen is None:
            return None
        state_dir = self.model_dir.path / chosen[0]
        if not (state_dir / "COMPLETE").is_file():
            raise CheckpointError(
                f"rank {distributed.rank()} cannot read {state_dir}, the train state rank 0 resumes from (step "
                f"{chosen[1]}): under torchrun on several machines training.output_dir must be on a filesystem "
                f"they all share")
        weights = load_weights(state_dir / "model.safetensors")
        load_into(model, weights, state_dir)
        objects = load_objects(state_dir)
        progress = read_json(state_dir / "state.json")
        if progress["step"] != chosen[1]:  # (only rank 0 writes, and not while the processes resume)
            raise CheckpointError(f"rank {distributed.rank()} read step {progress['step']} from {state_dir}, "
                                  f"rank 0 step {chosen[1]}: the train state changed while resuming")
        log.info("resumed from %s at step %d", state_dir, progress["step"])
        if distributed.is_main():  # what a save killed after train_state/ did not write (see the module)
            if progress.get("best_step") == progress["step"]:
                self.model_dir.save_weights(weights)
            self._finish_save(progress)
        return objects, progress

    def _update_metadata(self, progress: Progress) -> None:
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

    def _write_log(self, history: list[dict[str, float]]) -> None:
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
