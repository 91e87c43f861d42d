"""The `training.adapter` section (`AdapterConfig`): LoRA fine-tuning of a model given with `--init-from`.

    training:
      adapter: {type: lora, rank: 16, alpha: 32, dropout: 0.05, target_modules: [in_proj, out_proj, w1, w2]}

With `type: lora` the base model's weights are frozen and each targeted linear layer y = x W^T + b
learns a low-rank update: y = x W^T + b + (alpha / rank) * x A^T B^T, A [rank, in], B [out, rank]
(`seq2seq.adapters.lora`). Only A and B are trained and saved (`seq2seq.adapters.files`).

`train_embeddings: true` also trains the model's embedding tables (every nn.Embedding's weight, and with
it a tied output projection), as peft's modules_to_save does for the embeddings: the way to adapt to a
domain whose pieces the base never trained. Those tables are saved in the adapter too (the adapter then
holds vocab x d_model values per table) and merged by copying; `serve --adapter` switches to them per call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from seq2seq.config.checks import require

# our linear layers, by the last part of their module names (seq2seq.model.attention, seq2seq.model.layers):
# in_proj (the fused q/k/v projection of every attention), out_proj (its output), w1 and w2 (the feed-forward)
DEFAULT_TARGETS = ("in_proj", "out_proj", "w1", "w2")


@dataclass(frozen=True)
class AdapterConfig:
    """The `training.adapter` section. type: "lora", or None (full fine-tuning, the default). rank: the
    rank r of each update; alpha: its scale is alpha / rank; dropout: on a targeted layer's input, in its
    update only; target_modules: linear layers to adapt, each named by its module path or its last parts
    (as peft's target_modules: "w1" is every layer's ffn.w1, "decoder.layers.0.cross_attn.in_proj" one);
    train_embeddings: also train (and save) the embedding tables, as the module docstring says."""

    type: Literal["lora"] | None = None
    rank: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: list(DEFAULT_TARGETS))
    train_embeddings: bool = False

    def __post_init__(self) -> None:
        require(self.rank >= 1, f"training.adapter.rank must be >= 1, got {self.rank}")
        require(self.alpha > 0, f"training.adapter.alpha must be positive, got {self.alpha}")
        require(0.0 <= self.dropout < 1.0, f"training.adapter.dropout must be in [0, 1), got {self.dropout}")
        require(bool(self.target_modules) and all(isinstance(t, str) and t.strip(".") for t in self.target_modules),
                "training.adapter.target_modules must list module names, such as "
                f"{list(DEFAULT_TARGETS)}, got {self.target_modules}")
        require(isinstance(self.train_embeddings, bool),
                f"training.adapter.train_embeddings must be true or false, got {self.train_embeddings!r}")

    @property
    def on(self) -> bool:
        return self.type is not None

    @property
    def scale(self) -> float:
        """What the update B A is multiplied by: alpha / rank."""
        return self.alpha / self.rank
