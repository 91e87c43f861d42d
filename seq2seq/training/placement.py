"""Where a training run computes, set up once before the first step.

    placement = place(model, cfg, pad_id)   # device, threads, CPU variants, DDP, precision, scaler

On a CPU the model's modules are swapped in place for their CPU training variants
(`seq2seq.accel.cpu.speed_up_for_cpu_training`, which also caps oneDNN's kernel caches). Under
torchrun each process takes its local device and the loss is computed inside DistributedDataParallel's
forward, so that DDP's gradient hooks run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from seq2seq.accel.cpu import speed_up_for_cpu_training
from seq2seq.accel.device import choose_device, resolve_precision, use_fast_attention_kernels
from seq2seq.config import ConfigError, TrainingConfig
from seq2seq.training.loss import sequence_loss
from seq2seq.training import distributed

if TYPE_CHECKING:
    from seq2seq.model.transformer import Seq2SeqTransformer


@dataclass
class Placement:
    """device: where the model lives; precision: fp32, bf16 or fp16 autocast; world: processes;
    ddp: the DDP-wrapped loss (None in one process); scaler: fp16 gradient scaling (off otherwise)."""

    device: torch.device
    precision: str
    world: int
    ddp: DistributedDataParallel | None
    scaler: torch.amp.GradScaler


def place(model: Seq2SeqTransformer, cfg: TrainingConfig, pad_id: int) -> Placement:
    """Move `model` (in place) to where `cfg` says it trains, and return how it computes there."""
    device = choose_device(cfg.device)
    world = distributed.world_size()
    if world > 1:
        if cfg.accum_steps % world:
            raise ConfigError(
                f"training.accum_steps ({cfg.accum_steps}) must be a multiple of the number of processes "
                f"({world}): the config's batch is the global batch, shared out over the processes")
        device = distributed.local_device(device.type)
    if device.type == "cpu":
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        speed_up_for_cpu_training(model)
    use_fast_attention_kernels(device)
    model.to(device)
    ddp = DistributedDataParallel(TeacherForcedLoss(model, pad_id, cfg.label_smoothing, cfg.ctc_weight)) if world > 1 else None
    precision = resolve_precision(cfg.precision, device)
    scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16" and device.type == "cuda")
    return Placement(device, precision, world, ddp, scaler)


class TeacherForcedLoss(nn.Module):
    """The summed training loss as a module's forward, for DistributedDataParallel to wrap."""

    def __init__(self, model: Seq2SeqTransformer, pad_id: int, smoothing: float, ctc_weight: float = 0.0) -> None:
        super().__init__()
        self.model, self.pad_id, self.smoothing, self.ctc_weight = model, pad_id, smoothing, ctc_weight

    def forward(self, src: object, tgt_in: torch.Tensor, tgt_out: torch.Tensor,
                positions: torch.Tensor | None = None, weights: torch.Tensor | None = None) -> torch.Tensor:
        return sequence_loss(self.model, src, tgt_in, tgt_out, self.pad_id, self.smoothing, self.ctc_weight,
                             positions, weights)
