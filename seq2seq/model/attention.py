"""Attention: scaled dot-product, multi-head (self, masked self, cross) and the key/value cache.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + M) V

`M` is 0 where a query may look and -inf where it may not. Masks here are boolean:
`attn_mask` is True where attention is *allowed* (the convention of
`torch.nn.functional.scaled_dot_product_attention`), `key_padding_mask` is True at *padding*
(the convention of the encoder interface: `memory_pad_mask`).

One class, `MultiHeadAttention`, plays the three roles of the Transformer:

* encoder self-attention: queries, keys and values all from the source (`x`), padding masked;
* decoder masked self-attention: the same, with a causal mask so position t sees only <= t;
* cross-attention: queries from the decoder (`x`), keys and values from the encoder output
  (`memory`), padded source positions masked.

Incremental decoding keeps a `KVCache` per decoder layer: self-attention keys/values grow by one
step per decoded token; cross-attention keys/values are projected once per source and reused.
In beam search, `B = n_sources * group` decoder rows share `n_sources` cross-attention entries:
the cross-attention queries of a source's `group` rows are stacked and attend to its keys in one
call, so nothing is copied per beam.

Shapes: B batch, H heads, T query length, S key length, D = d_model, Dh = D / H.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def attention_reference(
    q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The formula, written out. q [..., T, Dh], k/v [..., S, Dh], attn_mask [..., T, S] (True = attend).

    Returns (output [..., T, Dh], weights [..., T, S]).
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """softmax(q k^T / sqrt(Dh) + M) v on the fused kernel; the weights only when asked.

    q [B, H, T, Dh], k/v [B, H, S, Dh], attn_mask broadcastable to [B, H, T, S] (True = attend).
    `is_causal` adds the lower-triangular mask (query t sees keys <= t; needs T == S).
    Returns (output [B, H, T, Dh], weights [B, H, T, S] or None).
    """
    if need_weights:
        if is_causal:
            causal = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()
            attn_mask = causal if attn_mask is None else attn_mask & causal
        out, weights = attention_reference(q, k, v, attn_mask)
        if dropout_p > 0.0:  # training-time weights for visualisation are rare; keep the formula exact
            out = F.dropout(weights, dropout_p) @ v
        return out, weights
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal)
    return out, None


@dataclass
class KVCache:
    """Keys and values of one attention layer's two roles, kept between decoding steps.

    self_k/self_v [B, H, L, Dh]: self-attention keys/values of the L tokens decoded so far.
    cross_k/cross_v [N, H, S, Dh]: cross-attention keys/values of the N sources; the B decoder
    rows are grouped B = N * group, rows [i*group, (i+1)*group) reading source i.
    """

    self_k: Tensor | None = None
    self_v: Tensor | None = None
    cross_k: Tensor | None = None
    cross_v: Tensor | None = None

    def reorder(self, index: Tensor, sources: Tensor | None) -> None:
        """Keep decoder rows `index` [B'] and, when the set of sources changed, sources `sources` [N']."""
        if sources is not None and self.cross_k is not None:
            assert self.cross_v is not None  # keys and values are set together
            self.cross_k = self.cross_k.index_select(0, sources)
            self.cross_v = self.cross_v.index_select(0, sources)
        if self.self_k is not None:
            assert self.self_v is not None
            self.self_k = self.self_k.index_select(0, index)
            self.self_v = self.self_v.index_select(0, index)


class MultiHeadAttention(nn.Module):
    """Multi-head attention for all three roles, with a fused input projection.

    `in_proj` holds W_q, W_k, W_v stacked [3D, D]: self-attention projects q, k, v in one matmul;
    cross-attention projects q from `x` and k, v from `memory` with slices of the same weight.
    Device-specific variants (seq2seq.accel.cpu, seq2seq.accel.packed) override `project` and `attend`.
    """

    def __init__(self, d_model: int, heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if d_model % heads:
            raise ValueError(f"d_model {d_model} is not divisible by heads {heads}")
        self.d_model, self.heads, self.head_dim = d_model, heads, d_model // heads
        self.dropout = dropout
        self.in_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def project(self, x: Tensor, part: slice) -> Tensor:
        """x [..., D] -> x W[part]^T + b[part] [..., part rows]: some of W_q, W_k, W_v of `in_proj`."""
        b = None if self.in_proj.bias is None else self.in_proj.bias[part]
        return F.linear(x, self.in_proj.weight[part], b)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool, need_weights: bool
    ) -> tuple[Tensor, Tensor | None]:
        """`scaled_dot_product_attention` of the heads, with attention dropout while training.

        q [B, H, T, Dh], k/v [B, H, S, Dh], mask broadcastable to [B, H, T, S] (True = attend).
        Returns (output [B, H, T, Dh], weights [B, H, T, S] if need_weights else None).
        """
        drop = self.dropout if self.training else 0.0
        return scaled_dot_product_attention(q, k, v, mask, is_causal, drop, need_weights)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        causal: bool = False,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """x [B, T, D]; memory [N, S, D] for cross-attention (B = N * group), else None.

        key_padding_mask [B or N, S] True at padding keys. `causal` masks future positions
        (self-attention only). With `cache`, `x` holds only the new positions: self-attention
        appends their keys/values; cross-attention projects `memory` on the first step and reuses
        the cached keys/values afterwards.
        Returns (output [B, T, D], weights [B, H, T, S] or None).
        """
        if memory is None:
            return self.self_attention(x, key_padding_mask, causal, cache, need_weights)
        return self.cross_attention(x, memory, key_padding_mask, cache, need_weights)

    def self_attention(
        self,
        x: Tensor,
        key_padding_mask: Tensor | None = None,
        causal: bool = False,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Queries, keys and values from x [B, T, D]; see `forward`."""
        b, t, d = x.shape
        qkv = self.in_proj(x).view(b, t, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)  # each [B, H, T, Dh]; unbind's backward is one stack
        past = 0
        if cache is not None:
            if cache.self_k is not None:
                assert cache.self_v is not None  # keys and values are set together
                past = cache.self_k.size(2)
                k = torch.cat([cache.self_k, k], dim=2)
                v = torch.cat([cache.self_v, v], dim=2)
            cache.self_k, cache.self_v = k, v
        mask, is_causal = None, False
        if causal:
            if past == 0:
                is_causal = t > 1
            elif t > 1:  # several new positions after a cached prefix: query i sees keys <= past + i
                mask = torch.ones(t, past + t, dtype=torch.bool, device=x.device).tril(diagonal=past)
        if key_padding_mask is not None:
            pad = ~key_padding_mask[:, None, None, :]
            mask = pad if mask is None else mask & pad
            if is_causal:
                mask = mask & torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
                is_causal = False
        out, weights = self.attend(q, k, v, mask, is_causal, need_weights)
        return self.out_proj(out.transpose(1, 2).reshape(b, t, self.d_model)), weights

    def cross_attention(
        self,
        x: Tensor,
        memory: Tensor | None,
        key_padding_mask: Tensor | None = None,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Queries from x [B, T, D], keys/values from memory [N, S, D] (not read once cached)."""
        b, t, d = x.shape
        if cache is not None and cache.cross_k is not None:
            k, v = cache.cross_k, cache.cross_v
            assert v is not None  # keys and values are set together
        else:
            assert memory is not None, "cross-attention without cached keys needs memory"
            kv = self.project(memory, slice(d, 3 * d))
            n, s, _ = kv.shape
            kv = kv.view(n, s, 2, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
            k, v = kv.unbind(0)  # [N, H, S, Dh]
            if cache is not None:
                cache.cross_k, cache.cross_v = k, v
        n = k.size(0)
        group = b // n
        q = self.project(x, slice(0, d))  # [B, T, D]
        # Stack the queries of a source's `group` rows: [N, H, group*T, Dh].
        q = q.view(n, group * t, self.heads, self.head_dim).transpose(1, 2)
        mask = None
        if key_padding_mask is not None:
            if key_padding_mask.size(0) != n:
                raise ValueError(f"cross-attention mask has {key_padding_mask.size(0)} rows, keys have {n}")
            mask = ~key_padding_mask[:, None, None, :]
        out, weights = self.attend(q, k, v, mask, False, need_weights)
        out = out.transpose(1, 2).reshape(b, t, self.d_model)
        if weights is not None:  # [N, H, group*T, S] -> [B, H, T, S]
            s = weights.size(-1)
            weights = weights.view(n, self.heads, group, t, s).transpose(1, 2).reshape(b, self.heads, t, s)
        return self.out_proj(out), weights
