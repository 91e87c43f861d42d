"""The encoder interface shared by every modality."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn


class Encoder(nn.Module):
    """Maps a source batch to the memory the decoder attends to.

    forward(src) -> (memory [B, S, d_model], memory_pad_mask [B, S], True at padding).
    `src` is whatever the modality needs: token ids [B, S] for text, images [B, C, H, W],
    audio features with lengths, ... Every memory row must have at least one non-padding position.
    """

    d_model: int

    def forward(self, src: Any) -> tuple[Tensor, Tensor]:  # pragma: no cover - interface
        raise NotImplementedError

    def source_lengths(self, src: Any) -> Tensor:
        """Number of real source positions per example [B] (used for max length = a * len + b)."""
        raise NotImplementedError
