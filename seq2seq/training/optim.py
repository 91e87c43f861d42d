"""The optimizer and the learning-rate schedule of training.

    optimizer: AdamW; weight decay on weight matrices only (not on biases, norms or embeddings); the
               encoder's parameters at cfg.encoder_lr when it is set
    lr(step)  = cfg.lr * schedule(step) * cooldown(step, elapsed)
    schedule:   linear warmup over warmup_steps, then inverse_sqrt, linear, cosine or constant
    cooldown:   linear annealing to 0 over the last `cfg.cooldown` fraction of the step or time budget
                (the step budget may shrink during training: see TrainingConfig.cooldown_patience)
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from seq2seq.config import TrainingConfig


def build_optimizer(model: nn.Module, cfg: TrainingConfig, fused: bool = False) -> torch.optim.AdamW:
    """AdamW over two groups: decay (weight matrices) and no decay (vectors, norms, embeddings); with
    cfg.encoder_lr set, the encoder's parameters (`model.encoder`, e.g. a pretrained backbone) make two
    more groups at that learning rate (the schedule scales every group alike). Frozen parameters are
    included, so that unfreezing them later trains them (AdamW skips a parameter without a gradient).

    fused: torch's fused AdamW kernel (one kernel for all parameters, as on a GPU), which also skips a
    step on the device when told the step's gradient was not finite (`skip_if`), without the host
    looking; where the parameters' device has no fused kernel, the usual multi-tensor AdamW."""
    encoder = getattr(model, "encoder", None) if cfg.encoder_lr is not None else None
    in_encoder = {id(p) for p in encoder.parameters()} if encoder is not None else set()
    groups: dict[tuple[bool, bool], list[nn.Parameter]] = {(e, d): [] for e in (False, True) for d in (True, False)}
    for name, p in model.named_parameters():
        groups[id(p) in in_encoder, not (p.ndim < 2 or "norm" in name or "embed" in name)].append(p)
    params = [{"params": groups[False, True], "weight_decay": cfg.weight_decay},
              {"params": groups[False, False], "weight_decay": 0.0}]
    if in_encoder:
        params += [{"params": groups[True, True], "weight_decay": cfg.weight_decay, "lr": cfg.encoder_lr},
                   {"params": groups[True, False], "weight_decay": 0.0, "lr": cfg.encoder_lr}]
    options = {"fused": True} if fused and fused_adamw_runs_on(next(model.parameters()).device) else {}
    return torch.optim.AdamW(params, lr=cfg.lr, betas=(cfg.betas[0], cfg.betas[1]), eps=cfg.adam_eps, **options)


def fused_adamw_runs_on(device: torch.device) -> bool:
    """Does torch have a fused AdamW kernel for parameters on `device`? (CUDA; CPU and MPS in newer torch.)"""
    try:
        torch.optim.AdamW([torch.zeros(1, device=device, requires_grad=True)], fused=True)
    except (RuntimeError, ValueError):
        return False
    return True


def can_skip_on_device(optimizer: torch.optim.Optimizer) -> bool:
    """Can `optimizer` skip a step on the device (`skip_if`)? Its fused kernel can."""
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False)) and \
        all(group.get("fused") for group in optimizer.param_groups)


def step_unless(optimizer: torch.optim.Optimizer, bad: torch.Tensor) -> None:
    """optimizer.step(), skipped when the 0-dim tensor `bad` is true: on the device for a fused
    optimizer (its kernel reads `found_inf`, the GradScaler's flag, and leaves the parameters, moments
    and step count as they were), else after the host reads the flag."""
    if not can_skip_on_device(optimizer):
        if not bool(bad):
            optimizer.step()
        return
    optimizer.found_inf = bad.to(torch.float32)  # type: ignore[attr-defined]
    try:
        optimizer.step()
    finally:
        del optimizer.found_inf  # type: ignore[attr-defined]


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


def cooldown_factor(cfg: TrainingConfig, step: int, elapsed_s: float, max_steps: int | None = None) -> float:
    """Multiplier that anneals the learning rate linearly to 0 over the last cfg.cooldown of the run.

    The run's progress is the larger of step / max_steps and elapsed / max_time_minutes, so a
    wall-clock budget ends with the same annealing as a step budget (warmup-stable-decay).
    `max_steps` is the run's current step budget (default cfg.max_steps; a validation plateau
    shortens it, see `plateau_budget`)."""
    if cfg.cooldown <= 0:
        return 1.0
    progress = step / max(cfg.max_steps if max_steps is None else max_steps, 1)
    if cfg.max_time_minutes:
        progress = max(progress, elapsed_s / (cfg.max_time_minutes * 60))
    return max(0.0, min(1.0, (1.0 - progress) / cfg.cooldown))


def plateau_budget(cfg: TrainingConfig, step: int, max_steps: int) -> int:
    """The step budget after a validation plateau at `step`: the run ends at step / (1 - cooldown),
    so that `step` is exactly where the cooldown begins (never later than the budget it had)."""
    return min(max_steps, math.ceil(step / (1.0 - cfg.cooldown)))


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainingConfig, elapsed_s: Callable[[], float],
                    max_steps: Callable[[], int] | None = None) -> torch.optim.lr_scheduler.LambdaLR:
    """lr = cfg.lr * lr_lambda(cfg)(step) * cooldown_factor(step, elapsed_s(), max_steps()), re-evaluated
    at every scheduler step; `elapsed_s` gives the seconds trained so far (across resumes) and
    `max_steps` the current step budget (default: cfg.max_steps)."""
    schedule = lr_lambda(cfg)
    budget = max_steps or (lambda: cfg.max_steps)
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: schedule(step) * cooldown_factor(cfg, step, elapsed_s(), budget()))
