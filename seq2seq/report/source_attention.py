"""Cross-attention drawn over its source: the `--show-attention` plots of image and audio models.

    fig = draw_source_attention(view, attention, words)   # view: SourceProcessor.attention_view(example)
    save_figure(fig, "attention.png")

The processor says what a source looks like and where its encoder positions lie (`AttentionView`:
an image under a grid of patches, or a spectrogram with the seconds per position); this module
only draws. One row of `attention` per generated word, over the memory positions.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from matplotlib.figure import Figure

from seq2seq.model.encoders.sources import AttentionView


def draw_source_attention(view: AttentionView, attention: Sequence[Sequence[float]], words: list[str]) -> Figure:
    """The figure for `view` (see the module docstring); ValueError when the rows do not fit it."""
    if len(attention) != len(words):
        raise ValueError(f"{len(attention)} attention rows for {len(words)} words")
    if view.image is not None and view.grid is not None:
        return draw_image_attention(view.image, view.grid, [list(row)[view.skip:] for row in attention], words)
    if view.spectrogram is not None:
        return draw_spectrogram_attention(view, attention, words)
    raise ValueError("this view has nothing to draw over")


def draw_image_attention(image: np.ndarray, grid: tuple[int, int], attention: Sequence[Sequence[float]],
                         words: list[str]) -> Figure:
    """The image with each generated word's cross-attention shown on it, one panel per word.

    image: uint8 [H, W, C] (the image as the model sees it); attention: [len(words), gh * gw]. Each
    row is reshaped row-major to the patch grid, scaled so that its largest weight is 1, stretched
    bilinearly over the image and painted on it in cyan, opaque in proportion to the weight: the cyan
    parts of a panel are where that word looked.
    """
    gh, gw = grid
    for i, row in enumerate(attention):
        if len(row) != gh * gw:
            raise ValueError(f"attention row {i} has {len(row)} positions, the {gh}x{gw} patch grid has {gh * gw}")
    h, w = image.shape[:2]
    grey = image.shape[2] == 1
    if grey:
        image = image[:, :, 0]
    extent = (0, w, h, 0)  # the image and the (coarser) attention grid cover the same square
    n = max(len(words), 1)
    cols = min(n, 6)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(2.0 * cols, 2.2 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    if not words:
        axes[0, 0].imshow(image, cmap="gray" if grey else None, vmin=0, vmax=255, extent=extent)
        axes[0, 0].set_title("(empty caption)", fontsize=9)
    for k, word in enumerate(words):
        ax = axes.flat[k]
        ax.imshow(image, cmap="gray" if grey else None, vmin=0, vmax=255, extent=extent)
        weights = np.asarray(attention[k], dtype=np.float32).reshape(gh, gw)
        weights = weights / max(float(weights.max()), 1e-9)
        shade = np.zeros((gh, gw, 4), dtype=np.float32)
        shade[..., 1:3] = 1.0  # cyan, a colour no scene of the recipe uses
        shade[..., 3] = 0.7 * weights
        ax.imshow(shade, interpolation="bilinear", extent=extent)
        ax.set_title(word.replace("\u2581", " ").strip() or repr(word), fontsize=9)
    fig.tight_layout()
    return fig


def draw_spectrogram_attention(view: AttentionView, attention: Sequence[Sequence[float]], words: list[str]) -> Figure:
    """The utterance's spectrogram over seconds, and under it each generated word's cross-attention
    over the encoder positions on the same time axis."""
    feats = np.asarray(view.spectrogram)  # [frames, bins]
    att = np.asarray(attention, dtype=np.float64).reshape(len(words), -1)
    duration = feats.shape[0] * view.frame_seconds
    rows = max(len(words), 1)
    fig = Figure(figsize=(max(6.0, min(24.0, 2.5 * duration + 3)), 3 + 0.32 * rows))
    ax_spec, ax_att = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, max(1.5, 0.32 * rows)]})
    ax_spec.imshow(feats.T, origin="lower", aspect="auto", cmap="magma", extent=(0.0, duration, 0, feats.shape[1]))
    ax_spec.set_ylabel("mel bin")
    ax_spec.set_title(" ".join(words) if words else "(empty)", fontsize=10)
    ax_att.imshow(att, aspect="auto", cmap="viridis", vmin=0.0, interpolation="nearest",
                  extent=(0.0, att.shape[1] * view.position_seconds, len(words) - 0.5, -0.5))
    ax_att.set_yticks(range(len(words)), words, fontsize=9)
    ax_att.set_xlabel("time (s)")
    ax_att.set_ylabel("output")
    return fig
