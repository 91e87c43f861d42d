"""seq2seq.accel.cpu: the CPU training variants swap in for the standard modules of any encoder, compute
what the standard modules compute, and the oneDNN cache caps are set when training starts."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seq2seq.model.attention import MultiHeadAttention
from seq2seq.config import ModelConfig
from seq2seq.accel.cpu import (CACHE_VARIABLES, CpuAttention, CpuDropout, CpuFeedForward, CpuLinear,
                         speed_up_for_cpu_training)
from seq2seq.model.encoders import Encoder
from seq2seq.model.layers import EncoderLayer, FeedForward
from seq2seq.training.loss import sequence_loss
from seq2seq.model.transformer import Seq2SeqTransformer

pytestmark = pytest.mark.isa  # .ci/run runs these again with the ISA forced to AVX2

STANDARD = (nn.Dropout, nn.Linear, FeedForward, MultiHeadAttention)


def model_config(**kw) -> ModelConfig:
    base = dict(src_vocab_size=60, tgt_vocab_size=60, d_model=32, heads=2, ffn_dim=64, layers=2, dropout=0.1,
                attention_dropout=0.1, activation_dropout=0.1)
    return ModelConfig(**{**base, **kw})


class FeatureEncoder(Encoder):
    """An audio-style encoder: a linear input projection of features [B, S, 5], then EncoderLayers."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.d_model = cfg.d_model
        self.proj = nn.Linear(5, cfg.d_model)
        self.dropout = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(2))

    def forward(self, src):
        feats, lengths = src
        mask = torch.arange(feats.size(1))[None] >= lengths[:, None]
        x = self.dropout(self.proj(feats))
        for layer in self.layers:
            x = layer(x, mask)
        return x, mask


def batch(seed: int = 0, rows: int = 9, src_len: int = 13, tgt_len: int = 11):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 60, (rows, src_len), generator=g)
    src[::3, -4:] = 0
    tgt = torch.randint(4, 60, (rows, tgt_len + 1), generator=g)
    tgt[1::2, -3:] = 0
    return src, tgt[:, :-1], tgt[:, 1:]


def test_transform_swaps_every_standard_module_in_place_and_keeps_the_parameters():
    torch.manual_seed(0)
    model = Seq2SeqTransformer(model_config(tie_output=False))
    params = dict(model.named_parameters())
    keys = list(model.state_dict())
    ffn_linears = {id(m.w1) for m in model.modules() if isinstance(m, FeedForward)} | {
        id(m.w2) for m in model.modules() if isinstance(m, FeedForward)}
    assert speed_up_for_cpu_training(model) is model
    assert dict(model.named_parameters()) == params and list(model.state_dict()) == keys  # same tensors
    kinds = {type(m) for m in model.modules()}
    assert {CpuDropout, CpuLinear, CpuFeedForward, CpuAttention} <= kinds
    for m in model.modules():
        if id(m) in ffn_linears:
            assert type(m) is nn.Linear  # the block buckets its rows once
        else:
            assert type(m) not in STANDARD, type(m)
    # dropout rates and attention settings are the module's own
    assert {m.p for m in model.modules() if isinstance(m, CpuDropout)} == {0.1}
    assert all(m.dropout == 0.1 and m.heads == 2 for m in model.modules() if isinstance(m, CpuAttention))
    speed_up_for_cpu_training(model)  # idempotent
    assert {type(m) for m in model.modules()} == kinds


def test_transform_reaches_any_encoder_built_from_the_standard_layers():
    torch.manual_seed(0)
    model = Seq2SeqTransformer(model_config(), encoder=FeatureEncoder(model_config()))
    speed_up_for_cpu_training(model)
    enc = model.encoder
    assert type(enc.proj) is CpuLinear and type(enc.dropout) is CpuDropout
    assert all(type(layer.self_attn) is CpuAttention and type(layer.ffn) is CpuFeedForward for layer in enc.layers)


def test_transformed_model_computes_the_same_loss_gradients_and_outputs():
    """fp32 without dropout: bucketing does nothing, so the transformed model equals the plain one
    exactly; in eval mode every variant is its standard module."""
    torch.manual_seed(0)
    plain = Seq2SeqTransformer(model_config(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0))
    fast = speed_up_for_cpu_training(Seq2SeqTransformer(plain.cfg))
    fast.load_state_dict(plain.state_dict())
    src, tgt_in, tgt_out = batch()
    results = []
    for model in (plain, fast):
        loss = sequence_loss(model, src, tgt_in, tgt_out, 0, 0.1)
        results.append((loss, torch.autograd.grad(loss, list(model.parameters()))))
    assert torch.equal(results[0][0], results[1][0])
    for a, b in zip(results[0][1], results[1][1]):
        assert torch.equal(a, b)
    with torch.inference_mode():
        assert torch.equal(plain.eval()(src, tgt_in), fast.eval()(src, tgt_in))


def test_bf16_training_pads_rows_and_is_as_accurate_as_the_plain_model():
    """Under bf16 autocast the variants bucket the rows and compute attention in fp32: the loss and
    gradient are as close to the fp32 ones as the plain model's bf16 loss and gradient are."""
    torch.manual_seed(0)
    plain = Seq2SeqTransformer(model_config(dropout=0.0, attention_dropout=0.0, activation_dropout=0.0))
    fast = speed_up_for_cpu_training(Seq2SeqTransformer(plain.cfg))
    fast.load_state_dict(plain.state_dict())
    src, tgt_in, tgt_out = batch(rows=9, src_len=13, tgt_len=11)  # 117 source rows: bucketed to 120
    seen = []
    hook = fast.encoder.layers[0].ffn.w1.register_forward_hook(lambda m, i, o: seen.append(tuple(i[0].shape)))

    def loss_and_grad(model, bf16):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = sequence_loss(model, src, tgt_in, tgt_out, 0, 0.1)
        return loss.item(), torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(model.parameters()))])

    ref_loss, ref_grad = loss_and_grad(plain, False)
    errors = {}
    for name, model in (("plain", plain), ("fast", fast)):
        loss, grad = loss_and_grad(model, True)
        errors[name] = (abs(loss - ref_loss) / ref_loss, ((grad - ref_grad).norm() / ref_grad.norm()).item())
    hook.remove()
    assert seen == [(120, 32)]  # the feed-forward block padded 117 rows to 120
    assert errors["fast"][0] < 1e-3 and errors["fast"][1] < 0.06
    assert errors["fast"][1] < 1.5 * errors["plain"][1]


def test_cpu_linear_pads_rows_only_in_bf16_training():
    torch.manual_seed(0)
    linear = nn.Linear(8, 4)
    linear.__class__ = CpuLinear
    rows = []
    original = F.linear

    def spy(x, w, b=None):
        rows.append(x.shape[0] if x.dim() == 2 else tuple(x.shape))
        return original(x, w, b)

    x = torch.randn(3, 37, 8, requires_grad=True)  # 111 rows -> 112
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(F, "linear", spy)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = linear(x)
            with torch.no_grad():
                linear(x)
        linear(x)  # fp32
    assert rows == [112, (3, 37, 8), (3, 37, 8)]
    assert y.shape == (3, 37, 4)


def test_cpu_attention_runs_bf16_training_attention_in_fp32():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 2)
    mha.__class__ = CpuAttention
    q, k, v = (torch.randn(2, 2, 5, 8).bfloat16().requires_grad_() for _ in range(3))
    out, weights = mha.attend(q, k, v, None, True, False)
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True).bfloat16()
    assert weights is None and out.dtype == torch.bfloat16 and torch.equal(out, expected)
    out.float().sum().backward()
    assert q.grad is not None and q.grad.dtype == torch.bfloat16
    with torch.no_grad():  # inference: the plain bf16 kernel
        plain = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        assert torch.equal(mha.attend(q, k, v, None, True, False)[0], plain)


def cpu_dropout(p: float) -> CpuDropout:
    return CpuDropout(p).train()


def test_cpu_dropout_rate_scale_and_gradient():
    torch.manual_seed(0)
    drop = cpu_dropout(0.3)
    x = torch.ones(1001, 999, requires_grad=True)  # odd sizes: the last 64-bit draw is cut
    y = drop(x)
    kept = y != 0
    # every 16-bit lane of the 64-bit draws is used alike: the rate holds at each position mod 4
    lanes = kept.flatten()[: 4 * (kept.numel() // 4)].view(-1, 4).float().mean(0)
    assert torch.allclose(lanes, torch.full((4,), 0.7), atol=0.004)
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / 0.7), rtol=1e-4)
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())  # d y / d x is the same mask and scale
    assert CpuDropout(0.3).eval()(x) is x and cpu_dropout(0.0)(x) is x


def test_cpu_dropout_draws_16_bit_lanes_of_the_torch_generator():
    """Element i is kept iff the i-th int16 of the int64 draws is >= -2^15 + round(p * 2^16)."""
    x = torch.ones(7, 9)
    torch.manual_seed(7)
    a, b = cpu_dropout(0.5)(x), cpu_dropout(0.5)(x)
    torch.manual_seed(7)
    draws = torch.empty(16, dtype=torch.int64).random_(-(2**63), None)  # ceil(63 / 4) draws
    keep = draws.view(torch.int16)[:63].view(7, 9) >= 0
    assert torch.equal(a, keep.float() * 2.0) and not torch.equal(a, b)


def test_cpu_dropout_close_to_one_falls_back_and_stays_unbiased():
    torch.manual_seed(0)
    x = torch.ones(100, 100)
    y = cpu_dropout(1 - 2**-18)(x)  # beyond 16-bit resolution: F.dropout
    assert torch.isfinite(y).all() and (y == 0).float().mean() > 0.99


def test_trainer_on_cpu_uses_the_variants_and_caps_the_onednn_caches(tmp_path, monkeypatch):
    from test_train import make_trainer, toy_data

    for name in CACHE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    trainer = make_trainer(tmp_path, toy_data(8), max_steps=1)
    assert isinstance(trainer.model.decoder.layers[0].cross_attn, CpuAttention)
    assert isinstance(trainer.model.encoder.embed.dropout, CpuDropout)
    assert [os.environ[name] for name in CACHE_VARIABLES] == ["256", "256"]


ONEDNN_PROBE = textwrap.dedent("""
    import os, sys
    import torch
    import seq2seq, seq2seq.training.trainer, seq2seq.inference.translator
    print("SET AT IMPORT", [os.environ.get(n) for n in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")])
    torch.set_num_threads(1)
    torch.randn(64, 64) @ torch.randn(64, 64)  # fp32 runs before: MKL, not oneDNN
    from seq2seq.accel.cpu import limit_onednn_caches
    limit_onednn_caches(int(sys.argv[1]))
    w = torch.randn(16, 32, dtype=torch.bfloat16)
    for m in (17, 33, 17):  # two shapes, then the first again
        print("SHAPE", flush=True)
        torch.randn(m, 32, dtype=torch.bfloat16) @ w.t()
""")


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")
@pytest.mark.parametrize("user_value", [None, "300"])
def test_import_sets_nothing_and_the_cache_cap_is_read_when_onednn_first_runs(user_value):
    """`import seq2seq` leaves the environment alone; limit_onednn_caches, called after torch is
    imported and has run fp32 matmuls, still decides oneDNN's cache size (read at its first bf16
    matmul): with capacity 1 the third matmul recompiles the first shape, with 256 it hits the cache.
    A value the user exported wins."""
    env = {k: v for k, v in os.environ.items() if k not in CACHE_VARIABLES}
    env["ONEDNN_VERBOSE"] = "all"
    if user_value:
        env.update({name: user_value for name in CACHE_VARIABLES})
    events = {}
    for capacity in (1,) if user_value else (1, 256):
        out = subprocess.run([sys.executable, "-c", ONEDNN_PROBE, str(capacity)], env=env, capture_output=True,
                             text=True, check=True).stdout
        assert f"SET AT IMPORT {[user_value, user_value]}" in out
        if ",exec," not in out:
            pytest.skip("bf16 matmuls do not run through oneDNN on this CPU")
        shapes = out.split("SHAPE")[1:]
        events[capacity] = ["cache_hit" if "create:cache_hit" in s else "cache_miss" for s in shapes]
    if user_value:  # the user's 300 wins over the 1 asked for: the first shape stays cached
        assert events[1] == ["cache_miss", "cache_miss", "cache_hit"]
    else:
        assert events[1] == ["cache_miss", "cache_miss", "cache_miss"]
        assert events[256] == ["cache_miss", "cache_miss", "cache_hit"]
