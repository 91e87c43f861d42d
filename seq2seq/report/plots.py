"""PNG plots a person would rather look at than read: training curves, attention heatmaps."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from seq2seq.storage.atomic import atomic_path  # noqa: E402


def save_figure(fig: Figure, path: str | Path) -> None:
    """Write `fig` as a PNG at `path`, whole or not at all (atomic), and release it."""
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def plot_training_curves(history: Sequence[Mapping[str, float]], path: str | Path) -> None:
    """Loss (train, validation) and the validation scores (BLEU, chrF, and WER/CER where logged)
    against wall-clock minutes, side by side."""
    fig, (ax_loss, ax_score) = plt.subplots(1, 2, figsize=(11, 4))
    for key, label in (("train_loss", "train loss (smoothed CE)"), ("valid_loss", "valid loss (NLL)")):
        pts = [(r["time_min"], r[key]) for r in history if r.get(key) is not None]
        if pts:
            ax_loss.plot(*zip(*pts), marker="." if key.startswith("valid") else None, label=label)
    ax_loss.set_xlabel("training time (min)")
    ax_loss.set_ylabel("loss per token")
    if ax_loss.lines:  # nothing to label before the first logged step
        ax_loss.legend()
    ax_loss.grid(alpha=0.3)
    for key, label, style in (("valid_bleu", "valid BLEU", "-"), ("valid_chrf", "valid chrF", "-"),
                              ("valid_wer", "valid WER % (lower is better)", "--"),
                              ("valid_cer", "valid CER % (lower is better)", "--")):
        pts = [(r["time_min"], r[key]) for r in history if r.get(key) is not None]
        if pts:
            ax_score.plot(*zip(*pts), marker=".", linestyle=style, label=label)
    directions = sorted({k for r in history for k in r if k.startswith("valid_bleu/")})
    for key in directions:  # several validation sets: valid_bleu above is their mean
        pts = [(r["time_min"], r[key]) for r in history if r.get(key) is not None]
        if pts:
            ax_score.plot(*zip(*pts), marker=".", linestyle=":", linewidth=1, label=f"BLEU {key.split('/', 1)[1]}")
    ax_score.set_xlabel("training time (min)")
    ax_score.set_ylabel("score (%)")
    ax_score.grid(alpha=0.3)
    if ax_score.lines:
        ax_score.legend()
    fig.suptitle(f"training curves (step {history[-1]['step'] if history else 0})")
    save_figure(fig, path)


def plot_attention(weights: Sequence[Sequence[float]], src_pieces: list[str], tgt_pieces: list[str], path: str | Path) -> None:
    """Heatmap of cross-attention [T, S]: target pieces down, source pieces across."""
    t, s = len(tgt_pieces), len(src_pieces)
    fig, ax = plt.subplots(figsize=(max(4, 0.45 * s + 2), max(3, 0.4 * t + 1.5)))
    ax.imshow(weights, cmap="viridis", aspect="auto", vmin=0.0)
    ax.set_xticks(range(s), src_pieces, rotation=70, fontsize=9)
    ax.set_yticks(range(t), tgt_pieces, fontsize=9)
    ax.set_xlabel("source")
    ax.set_ylabel("target")
    save_figure(fig, path)
