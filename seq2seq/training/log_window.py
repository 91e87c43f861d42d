"""`LogWindow`: the training loss and tokens since the last log line, and the time they took; where reading
a value on the host stops the device, summed there and read once, at the next log line.
"""

from __future__ import annotations

import time

import torch

from seq2seq.training import distributed


class LogWindow:
    """Target tokens, summed loss and wall time since the last training log. Steps checked on the
    device (`Trainer._train_step` where host reads stop it) add to `pending` there, [loss sum, tokens, skipped steps], which
    `settle` reads once."""

    def __init__(self) -> None:
        self._restart()

    def _restart(self) -> None:
        """An empty window, starting now."""
        self.tokens, self.loss, self.start = 0, 0.0, time.perf_counter()
        self.pending: torch.Tensor | None = None

    def add(self, mean_loss: float, tokens: int) -> None:
        self.tokens += tokens
        self.loss += mean_loss * tokens

    def add_on_device(self, loss_sum: torch.Tensor, tokens: int, ok: torch.Tensor) -> None:
        """A step's summed loss and tokens (both left out when `ok`, a 0-dim bool, is false: the step was
        skipped), without reading them."""
        dtype = torch.float32 if loss_sum.device.type == "mps" else torch.float64  # (MPS has no float64)
        row = torch.stack([torch.where(ok, loss_sum, 0.0).to(dtype), ok.to(dtype) * tokens, (~ok).to(dtype)])
        self.pending = row if self.pending is None else self.pending + row

    def settle(self, device: torch.device) -> int:
        """Move the pending sums into the window (one host read; under torchrun the loss summed over the
        processes). Returns the number of skipped steps among them."""
        if self.pending is None:
            return 0
        loss, tokens, bad = self.pending.tolist()
        self.pending = None
        self.loss += distributed.sum_float(loss, device)
        self.tokens += round(tokens)
        return round(bad)

    def take(self) -> tuple[float, float]:
        """(mean loss per token, tokens/s) of the window, which starts again."""
        result = self.loss / self.tokens, self.tokens / (time.perf_counter() - self.start)
        self._restart()
        return result
