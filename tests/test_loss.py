"""The fused label-smoothed cross-entropy against its PyTorch definition."""

import pytest
import torch
import torch.nn.functional as F

from seq2seq.config import ModelConfig
from seq2seq.training.loss import linear_cross_entropy, sequence_loss
from seq2seq.model.transformer import Seq2SeqTransformer


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
@pytest.mark.parametrize("chunk", [1, 5, 64])
def test_linear_cross_entropy_equals_composed_ops(smoothing, chunk):
    torch.manual_seed(0)
    h = torch.randn(37, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 50, (37,))
    ref = F.cross_entropy(h @ w.t(), t, label_smoothing=smoothing, reduction="sum")
    ref_grads = torch.autograd.grad(0.3 * ref, (h, w))
    got = linear_cross_entropy(h, w, t, smoothing, chunk=chunk)
    grads = torch.autograd.grad(0.3 * got, (h, w))  # the incoming gradient scales both
    assert torch.allclose(got, ref, rtol=1e-12, atol=1e-10)
    for a, b in zip(grads, ref_grads):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


def test_linear_cross_entropy_bf16_autocast_close_to_fp32_and_keeps_dtypes():
    torch.manual_seed(0)
    h = torch.randn(300, 32, requires_grad=True)
    w = (0.2 * torch.randn(500, 32)).requires_grad_()
    t = torch.randint(0, 500, (300,))
    ref = F.cross_entropy(h @ w.t(), t, label_smoothing=0.1, reduction="sum")
    ref_gh, ref_gw = torch.autograd.grad(ref, (h, w))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = linear_cross_entropy(h, w, t, 0.1, chunk=64)
    gh, gw = torch.autograd.grad(got, (h, w))
    assert got.dtype == gh.dtype == gw.dtype == torch.float32
    assert abs(got.item() - ref.item()) / ref.item() < 5e-3
    assert (gh - ref_gh).norm() / ref_gh.norm() < 2e-2 and (gw - ref_gw).norm() / ref_gw.norm() < 2e-2


def test_linear_cross_entropy_rejects_bad_shapes_and_smoothing():
    h, w, t = torch.randn(4, 8), torch.randn(10, 8), torch.zeros(4, dtype=torch.long)
    with pytest.raises(ValueError, match="expected hidden"):
        linear_cross_entropy(h, torch.randn(10, 7), t)
    with pytest.raises(ValueError, match="smoothing"):
        linear_cross_entropy(h, w, t, 1.0)


@pytest.mark.parametrize("tie", [True, False])
def test_sequence_loss_equals_cross_entropy_over_non_pad_logits(tie):
    torch.manual_seed(0)
    cfg = ModelConfig(src_vocab_size=40, tgt_vocab_size=40, d_model=16, heads=2, ffn_dim=32, layers=2,
                      dropout=0.0, tie_output=tie)
    model = Seq2SeqTransformer(cfg)
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]])
    tgt_in = torch.tensor([[2, 10, 11, 12], [2, 13, 0, 0]])
    tgt_out = torch.tensor([[10, 11, 12, 3], [13, 3, 0, 0]])
    ref = F.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=0,
                          label_smoothing=0.1, reduction="sum")
    ref_grads = torch.autograd.grad(ref, list(model.parameters()))
    got = sequence_loss(model, src, tgt_in, tgt_out, pad_id=0, smoothing=0.1)
    grads = torch.autograd.grad(got, list(model.parameters()))
    assert torch.allclose(got, ref, rtol=1e-5)
    for a, b in zip(grads, ref_grads):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def test_linear_cross_entropy_without_grad_mode_and_twice_with_retained_graph():
    torch.manual_seed(0)
    h = torch.randn(20, 8, requires_grad=True)
    w = torch.randn(30, 8, requires_grad=True)
    t = torch.randint(0, 30, (20,))
    with torch.no_grad():
        plain = linear_cross_entropy(h, w, t, 0.1, chunk=7)
    assert not plain.requires_grad
    loss = linear_cross_entropy(h, w, t, 0.1, chunk=7)
    assert torch.allclose(loss, plain)
    first = torch.autograd.grad(loss, (h, w), retain_graph=True)
    second = torch.autograd.grad(2 * loss, (h, w))  # saved gradients are not scaled in place
    for a, b in zip(first, second):
        assert torch.allclose(2 * a, b)
