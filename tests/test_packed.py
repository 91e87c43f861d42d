"""seq2seq.accel.packed: MKL pre-packed decoder linears give the plain results, and decoding is unchanged."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from test_search import assert_same, sources, tiny_model

from seq2seq.model.attention import MultiHeadAttention
from seq2seq.accel.cpu import speed_up_for_cpu_training
from seq2seq.accel.packed import MAX_PACKED_ROWS, PackedAttention, PackedLinear, mkl_packing_available, pack_decoder
from seq2seq.config.search import SearchConfig
from seq2seq.inference.search import search

pytestmark = [pytest.mark.skipif(not mkl_packing_available(), reason="this torch build has no MKL packed sgemm"),
              pytest.mark.isa]  # .ci/run runs these again with the ISA forced to AVX2


@pytest.mark.parametrize("rows", [1, 7, 32, MAX_PACKED_ROWS + 1])
@pytest.mark.parametrize("bias", [True, False])
def test_packed_linear_equals_f_linear(rows, bias):
    torch.manual_seed(0)
    w, b = torch.randn(96, 48), torch.randn(96) if bias else None
    lin = PackedLinear(w, b)
    x = torch.randn(rows, 1, 48)  # 3-D input, as a decoding step passes [B, 1, D]
    with torch.inference_mode():
        torch.testing.assert_close(lin(x), F.linear(x, w, b), rtol=1e-5, atol=1e-5)
        # a slice of the rows (W_q of a fused q/k/v weight) is packed on its own
        part = slice(32, 96)
        torch.testing.assert_close(lin(x, part), F.linear(x, w[part], None if b is None else b[part]),
                                   rtol=1e-5, atol=1e-5)
    assert len(lin._packed) == (0 if rows > MAX_PACKED_ROWS else 2)


def test_packed_linear_keeps_autograd_working():
    torch.manual_seed(0)
    w = torch.randn(16, 8)
    x = torch.randn(4, 8, requires_grad=True)
    PackedLinear(w)(x).sum().backward()  # falls back to F.linear, which autograd can differentiate
    torch.testing.assert_close(x.grad, w.sum(0).expand(4, 8))


def test_pack_decoder_packs_a_copy_and_shares_the_tied_weight():
    model = tiny_model()
    packed = pack_decoder(model)
    assert all(type(m) is not PackedLinear for m in model.modules())  # the original is untouched
    assert model.decoder.output is None
    linears = [m for m in packed.decoder.modules() if isinstance(m, (nn.Linear, PackedLinear))]
    assert linears and all(isinstance(m, PackedLinear) for m in linears)
    attention = [m for m in packed.decoder.modules() if isinstance(m, MultiHeadAttention)]
    assert attention and all(type(m) is PackedAttention and isinstance(m.in_proj, PackedLinear) for m in attention)
    assert all(type(m) is MultiHeadAttention for m in packed.encoder.modules() if isinstance(m, MultiHeadAttention))
    assert all(type(m) is nn.Linear for m in packed.encoder.modules() if isinstance(m, (nn.Linear, PackedLinear)))
    tied = packed.decoder.output.weight
    assert tied.data_ptr() == packed.decoder.embed.tokens.weight.data_ptr()  # no copy of the embedding


@pytest.mark.parametrize("cfg", [SearchConfig(strategy="greedy"), SearchConfig(beam=3, nbest=3)], ids=["greedy", "beam3"])
def test_packed_decoding_equals_plain_decoding(cfg):
    model, src = tiny_model(), sources()
    packed = pack_decoder(model)
    with torch.inference_mode():
        torch.testing.assert_close(packed(src, src[:, :5]), model(src, src[:, :5]), rtol=1e-5, atol=1e-5)
        assert_same(search(packed, src, cfg), search(model, src, cfg))


def test_packed_attention_projects_slices_through_the_packed_weight():
    model = tiny_model()
    packed = pack_decoder(model)
    d = model.cfg.d_model
    x, memory = torch.randn(6, 1, d), torch.randn(2, 5, d)  # 3 decoder rows per source
    with torch.inference_mode():
        got, _ = packed.decoder.layers[0].cross_attn(x, memory)
        want, _ = model.decoder.layers[0].cross_attn(x, memory)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert set(packed.decoder.layers[0].cross_attn.in_proj._packed) == {(0, d), (d, 3 * d)}  # W_q; W_k|W_v


def test_a_model_trained_with_the_cpu_variants_packs_and_decodes_alike():
    model, src = tiny_model(), sources()
    trained = speed_up_for_cpu_training(tiny_model())  # what a CPU Trainer leaves
    packed = pack_decoder(trained)
    assert all(type(m) in (PackedLinear, nn.Embedding, nn.LayerNorm) or not list(m.parameters(recurse=False))
               for m in packed.decoder.modules())
    cfg = SearchConfig(beam=3, nbest=3)
    with torch.inference_mode():
        assert_same(search(packed, src, cfg), search(model, src, cfg))


def test_int8_model_keeps_an_accurate_output_projection():
    from seq2seq.accel.device import native_bf16
    from seq2seq.inference.translator import Bf16Linear, quantize_int8

    model, src = tiny_model(), sources()
    int8 = quantize_int8(model)
    assert model.decoder.output is None  # the original is untouched
    assert isinstance(int8.decoder.output, Bf16Linear) == native_bf16(torch.device("cpu"))
    with torch.inference_mode():
        full, quantized = model(src, src[:, :5]), int8(src, src[:, :5])
    assert (quantized - full).abs().max() < 0.05 * full.abs().max()
    assert (quantized.argmax(-1) == full.argmax(-1)).float().mean() > 0.9
