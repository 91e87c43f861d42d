"""Transformer building blocks: embeddings with positions, feed-forward, encoder and decoder layers.

Plain torch modules (nn.Linear, nn.Dropout, nn.LayerNorm): the faster CPU variants are swapped in by
transforms (`seq2seq.accel.cpu.speed_up_for_cpu_training`, `seq2seq.accel.packed.pack_decoder`).

Shapes: B batch, T target length, S source length, D = d_model, V vocabulary.
Residual sublayers follow `norm`: "pre" computes x + Dropout(F(LayerNorm(x))) (stable without
warmup tricks; the stack ends with a final LayerNorm), "post" computes LayerNorm(x + Dropout(F(x)))
as in the original paper.
"""

from __future__ import annotations

import math
from typing import Callable, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from seq2seq.model.attention import KVCache, MultiHeadAttention
from seq2seq.config.model_section import ModelConfig

T = TypeVar("T")

def sinusoidal_table(n_positions: int, d_model: int) -> Tensor:
    """PE[pos, 2i] = sin(pos / 10000^(2i/D)), PE[pos, 2i+1] = cos(...). Returns [n_positions, D]."""
    position = torch.arange(n_positions, dtype=torch.float32)[:, None]
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(n_positions, d_model)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq)[:, : d_model // 2]
    return table


def fairseq_sinusoidal_table(n_positions: int, d_model: int) -> Tensor:
    """fairseq's (and transformers' M2M100's) table: row pos holds sin(pos * f_i) in column i and
    cos(pos * f_i) in column D/2 + i, f_i = 10000^(-i / (D/2 - 1)) (a zero last column when D is odd).
    The same float32 operations as theirs, so an imported model reads the very same rows. [n, D]"""
    half = d_model // 2
    freq = torch.exp(torch.arange(half, dtype=torch.int64).float() * -(math.log(10000) / (half - 1)))
    angles = torch.arange(n_positions, dtype=torch.int64).float().unsqueeze(1) * freq.unsqueeze(0)
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1).view(n_positions, -1)
    if d_model % 2 == 1:
        table = torch.cat([table, torch.zeros(n_positions, 1)], dim=1)
    return table


def position_table(cfg: ModelConfig) -> Tensor:
    """The sinusoidal table a model with `cfg` reads, `position_offset` rows before the first position's:
    [max_positions + position_offset, D] in the layout `position_table` names."""
    make = fairseq_sinusoidal_table if cfg.position_table == "fairseq" else sinusoidal_table
    return make(cfg.max_positions + cfg.position_offset, cfg.d_model)


# Dropout is nn.Dropout; on CPU, training swaps in `seq2seq.accel.cpu.CpuDropout`. The name stays for the
# encoders that import it.
Dropout = nn.Dropout


class Embedding(nn.Module):
    """Token embedding scaled by sqrt(D) (unless `model.scale_embedding` is false) plus a position
    encoding, then a LayerNorm where `model.embedding_norm` asks for one, then dropout.

    ids [B, T] -> [B, T, D]; `offset` is the position of ids[:, 0] (incremental decoding). Position p
    reads row `model.position_offset` + p of the table (learned or sinusoidal, `position_table`).
    """

    table: Tensor  # sinusoidal positions [max_positions + position_offset, D], a buffer (positions: sinusoidal)

    def __init__(self, vocab_size: int, cfg: ModelConfig) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.scale = math.sqrt(cfg.d_model) if cfg.scale_embedding else None
        self.max_positions = cfg.max_positions
        self.first_row = cfg.position_offset
        self.learned = cfg.positions == "learned"
        if self.learned:
            self.positions = nn.Embedding(cfg.max_positions + cfg.position_offset, cfg.d_model)
        else:
            self.register_buffer("table", position_table(cfg), persistent=False)
        # None unless asked for, so that the state dict of every other model is what it always was
        self.norm = nn.LayerNorm(cfg.d_model) if cfg.embedding_norm else None
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, ids: Tensor, offset: int = 0) -> Tensor:
        t = ids.size(1)
        if offset + t > self.max_positions:
            raise ValueError(
                f"sequence of {offset + t} positions exceeds model.max_positions={self.max_positions}"
            )
        x = self.tokens(ids)
        if self.scale is not None:
            x = x * self.scale
        start = self.first_row + offset
        if self.learned:
            x = x + self.positions.weight[start : start + t]
        else:
            x = x + self.table[start : start + t].to(x.dtype)
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x)


class FeedForward(nn.Module):
    """Position-wise FFN(x) = W2 Dropout(act(W1 x + b1)) + b2. [B, T, D] -> [B, T, D]."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.d_model, cfg.ffn_dim)
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.d_model)
        activations: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu}
        self.act = activations[cfg.activation]
        self.dropout = nn.Dropout(cfg.activation_dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(self.dropout(self.act(self.w1(x))))


class Residual(nn.Module):
    """A residual connection around `fn` with LayerNorm in pre- or post-norm placement."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)
        self.pre_norm = cfg.norm == "pre"

    def forward(self, x: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
        if self.pre_norm:
            return x + self.dropout(fn(self.norm(x)))
        return self.norm(x + self.dropout(fn(x)))


def recomputed(layer: EncoderLayer | DecoderLayer, fn: Callable[..., T], *args: object) -> T:
    """fn(*args), the forward pass of `layer`: under gradient checkpointing (`layer.checkpointed`, set by
    `Seq2SeqTransformer.checkpoint_layers`) while training, its activations are not kept but recomputed in
    the backward pass (torch.utils.checkpoint, non-reentrant: frozen inputs and LoRA's few trainable
    weights work; the RNG state is replayed, so dropout draws the same masks and the gradients are those
    of the plain pass)."""
    if layer.checkpointed and layer.training and torch.is_grad_enabled():
        return checkpoint(fn, *args, use_reentrant=False)
    return fn(*args)


class EncoderLayer(nn.Module):
    """Self-attention over the source, then the feed-forward network. [B, S, D] -> [B, S, D]."""

    checkpointed = False  # gradient checkpointing (`recomputed`)

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout)
        self.ffn = FeedForward(cfg)
        self.attn_block, self.ffn_block = Residual(cfg), Residual(cfg)

    def forward(self, x: Tensor, pad_mask: Tensor | None) -> Tensor:
        """x [B, S, D], pad_mask [B, S] True at padding."""
        return recomputed(self, self._forward, x, pad_mask)

    def _forward(self, x: Tensor, pad_mask: Tensor | None) -> Tensor:
        x = self.attn_block(x, lambda h: self.self_attn.self_attention(h, key_padding_mask=pad_mask)[0])
        return self.ffn_block(x, self.ffn)


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the memory, feed-forward. [B, T, D] -> [B, T, D]."""

    checkpointed = False  # gradient checkpointing (`recomputed`)

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout)
        self.ffn = FeedForward(cfg)
        self.self_block, self.cross_block, self.ffn_block = Residual(cfg), Residual(cfg), Residual(cfg)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None,
        memory_pad_mask: Tensor | None,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """x [B, T, D]; memory [N, S, D] (B = N * group), memory_pad_mask [N, S].

        Returns (x [B, T, D], cross-attention weights [B, H, T, S] if need_weights else None).
        """
        return recomputed(self, self._forward, x, memory, memory_pad_mask, cache, need_weights)

    def _forward(self, x: Tensor, memory: Tensor | None, memory_pad_mask: Tensor | None, cache: KVCache | None,
                 need_weights: bool) -> tuple[Tensor, Tensor | None]:
        x = self.self_block(x, lambda h: self.self_attn.self_attention(h, causal=True, cache=cache)[0])
        weights = None

        def cross(h: Tensor) -> Tensor:
            nonlocal weights
            out, weights = self.cross_attn.cross_attention(h, memory, memory_pad_mask, cache, need_weights)
            return out

        x = self.cross_block(x, cross)
        return self.ffn_block(x, self.ffn), weights
