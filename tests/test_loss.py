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


@pytest.mark.parametrize("chunk", [1, 5, 64])
def test_token_weights_scale_each_positions_loss_and_gradient(chunk):
    torch.manual_seed(0)
    h = torch.randn(37, 16, dtype=torch.float64, requires_grad=True)
    w = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 50, (37,))
    weights = torch.where(torch.arange(37) % 3 == 0, 4.0, 1.0).double()
    ref = (F.cross_entropy(h @ w.t(), t, label_smoothing=0.1, reduction="none") * weights).sum()
    ref_grads = torch.autograd.grad(ref, (h, w))
    got = linear_cross_entropy(h, w, t, 0.1, chunk=chunk, token_weights=weights)
    grads = torch.autograd.grad(got, (h, w))
    assert torch.allclose(got, ref, rtol=1e-12) and got > linear_cross_entropy(h, w, t, 0.1, chunk=chunk)
    for a, b in zip(grads, ref_grads):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # bf16 pads the last chunk: its rows keep their weights
        bf16 = linear_cross_entropy(h.float(), w.float(), t, 0.1, chunk=chunk, token_weights=weights.float())
    assert abs(bf16.item() - ref.item()) / ref.item() < 5e-3
    with pytest.raises(ValueError, match="token_weights"):
        linear_cross_entropy(h, w, t, token_weights=weights[:5])


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


def _ctc_by_enumeration(log_probs: torch.Tensor, target: list[int], blank: int) -> float:
    """-log of the summed probability of every frame labelling that collapses to `target`
    (merge repeats, drop blanks): CTC's definition, by brute force over all V^S labellings."""
    import itertools

    s, v = log_probs.shape
    total = []
    for path in itertools.product(range(v), repeat=s):
        collapsed = [k for i, k in enumerate(path) if k != blank and (i == 0 or path[i - 1] != k)]
        if collapsed == target:
            total.append(sum(log_probs[i, k] for i, k in enumerate(path)))
    return -torch.logsumexp(torch.stack(total), dim=0).item()


def test_ctc_loss_is_the_definition_over_unpadded_memory_with_pad_as_blank():
    """Per row: the CTC loss of the non-pad memory positions, projected by the output weights,
    against y1..yn (not EOS), with the pad id (0) as the blank; padded positions change nothing."""
    from seq2seq.training.loss import ctc_loss

    torch.manual_seed(0)
    v, d = 5, 8
    weight = torch.randn(v, d, dtype=torch.float64)
    memory = torch.randn(2, 5, d, dtype=torch.float64)
    mask = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    eos = 4
    tgt_out = torch.tensor([[1, 2, 2, eos], [3, eos, 0, 0]])  # row 0: 1 2 2 (a repeat needs a blank between)
    got = ctc_loss(memory, mask, weight, tgt_out, pad_id=0)
    expected = 0.0
    for row, (length, target) in enumerate(((5, [1, 2, 2]), (3, [3]))):
        log_probs = torch.log_softmax(memory[row, :length] @ weight.t(), dim=-1)
        expected += _ctc_by_enumeration(log_probs, target, blank=0)
    assert got.item() == pytest.approx(expected, rel=1e-6)
    garbage = memory.clone()
    garbage[1, 3:] = 100.0  # the padded positions of row 1
    assert ctc_loss(garbage, mask, weight, tgt_out, pad_id=0).item() == pytest.approx(expected, rel=1e-6)
    too_long = torch.tensor([[1, 2, 1, 2, 1, 2, eos], [3, eos, 0, 0, 0, 0, 0]])  # 6 labels, 5 positions
    only_row_1 = ctc_loss(memory, mask, weight, too_long, pad_id=0).item()
    assert only_row_1 == pytest.approx(_ctc_by_enumeration(torch.log_softmax(memory[1, :3] @ weight.t(), -1), [3], 0))


def test_sequence_loss_with_ctc_weight_mixes_the_two_losses():
    from seq2seq.training.loss import ctc_loss

    torch.manual_seed(0)
    cfg = ModelConfig(src_vocab_size=11, tgt_vocab_size=11, d_model=16, heads=2, ffn_dim=32, layers=1, dropout=0.0)
    model = Seq2SeqTransformer(cfg)
    src = torch.tensor([[5, 6, 7, 8, 3], [5, 9, 3, 0, 0]])
    tgt_in = torch.tensor([[2, 6, 7, 0], [2, 9, 0, 0]])
    tgt_out = torch.tensor([[6, 7, 3, 0], [9, 3, 0, 0]])
    attention = sequence_loss(model, src, tgt_in, tgt_out, pad_id=0)
    memory, mask = model.encode(src)
    ctc = ctc_loss(memory, mask, model.decoder.output_weight, tgt_out, pad_id=0)
    mixed = sequence_loss(model, src, tgt_in, tgt_out, pad_id=0, ctc_weight=0.25)
    assert mixed.item() == pytest.approx(0.75 * attention.item() + 0.25 * ctc.item(), rel=1e-5)
    mixed.backward()
    assert model.encoder.embed.tokens.weight.grad is not None
