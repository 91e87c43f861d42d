"""Bucketed matmul rows for bf16 training on CPU (seq2seq/accel/onednn.py) and the padded loss chunk."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from seq2seq.training.loss import linear_cross_entropy
from seq2seq.accel.onednn import bucket, buckets_rows, rowwise

pytestmark = pytest.mark.isa  # .ci/run runs these again with the ISA forced to AVX2


def test_bucket_pads_at_most_an_eighth_with_eight_sizes_per_doubling():
    sizes = [bucket(m) for m in range(1, 8193)]
    for m, b in enumerate(sizes, start=1):
        assert m <= b <= m * 9 / 8, m
        assert bucket(b) == b  # a bucket is its own bucket
    assert sizes == sorted(sizes)
    assert [bucket(m) for m in (1, 7, 8, 9, 17, 1025, 3000)] == [1, 7, 8, 9, 18, 1152, 3072]
    assert len({bucket(m) for m in range(1025, 4097)}) == 16  # 1152, 1280, ..., 4096
    assert len({bucket(m) for m in range(1, 4096)}) < 100  # vs 4095 exact shapes


def test_rowwise_pads_only_for_bf16_training_on_cpu():
    seen = []

    def fn(rows):
        seen.append(rows.shape)
        return rows * 2.0 + 1.0

    x = torch.randn(5, 201, 3, requires_grad=True)  # 1005 rows -> 1024
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert buckets_rows(x)
        y = rowwise(fn, x)
        with torch.no_grad():
            assert not buckets_rows(x)
            rowwise(fn, x)
    assert seen == [(1024, 3), (5, 201, 3)]
    assert y.shape == x.shape and torch.equal(y, x * 2.0 + 1.0)
    y.square().sum().backward()
    assert torch.equal(x.grad, 4.0 * (2.0 * x.detach() + 1.0))  # padded rows add nothing
    seen.clear()
    assert not buckets_rows(x)  # fp32 without autocast: MKL, nothing to bucket
    rowwise(fn, x)
    assert seen == [(5, 201, 3)]
    assert buckets_rows(x.detach().bfloat16().requires_grad_())


def test_rowwise_linear_equals_plain_linear_in_values_and_gradients():
    torch.manual_seed(0)
    linear = torch.nn.Linear(16, 24)
    x = torch.randn(3, 37, 16, requires_grad=True)  # 111 rows -> 112
    results = []
    for pad in (True, False):
        x.grad = None
        linear.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = rowwise(linear, x) if pad else linear(x)
        y.float().sum().backward()
        results.append((y.float(), x.grad.clone(), linear.weight.grad.clone(), linear.bias.grad.clone()))
    for padded, plain in zip(*results):
        torch.testing.assert_close(padded, plain, rtol=1e-2, atol=1e-2)


def test_loss_pads_its_short_last_chunk_under_bf16_without_changing_the_result():
    torch.manual_seed(0)
    vocab, dim, chunk = 50, 16, 64
    hidden = torch.randn(chunk + 37, dim, requires_grad=True)  # last chunk 37 rows -> 40
    weight = torch.randn(vocab, dim, requires_grad=True)
    target = torch.randint(0, vocab, (chunk + 37,))
    results = []
    for rows_per_chunk in (chunk, hidden.size(0)):  # a padded last chunk / one full chunk
        hidden.grad = weight.grad = None
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = linear_cross_entropy(hidden, weight, target, smoothing=0.1, chunk=rows_per_chunk)
        loss.backward()
        results.append((loss.detach(), hidden.grad.clone(), weight.grad.clone()))
    (loss_padded, *grads_padded), (loss_whole, *grads_whole) = results
    torch.testing.assert_close(loss_padded, loss_whole, rtol=1e-4, atol=1e-4)  # padded rows add no loss
    for padded, whole in zip(grads_padded, grads_whole):  # bf16 products: rounding differs by chunking
        torch.testing.assert_close(padded, whole, rtol=0.0, atol=1e-2 * whole.abs().max().item())
    # and both agree with the composed ops on the same bf16-rounded logits
    logits = (hidden.detach().bfloat16() @ weight.detach().bfloat16().t()).float()
    ref = F.cross_entropy(logits, target, label_smoothing=0.1, reduction="sum")
    torch.testing.assert_close(results[0][0].float(), ref, rtol=1e-4, atol=1e-3)


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="torch built without oneDNN")
def test_bf16_training_stops_compiling_kernels_after_warm_up():
    """With the CPU training variants (seq2seq.accel.cpu) under bf16 autocast, once batches have covered
    the bucket sizes of a range of row counts, batches of new shapes in that range compile no new
    oneDNN kernel (ONEDNN_VERBOSE counts). The plain model, for contrast, compiles new kernels."""
    code = textwrap.dedent("""
        import torch
        import sys
        from seq2seq.config import ModelConfig
        from seq2seq.accel.cpu import speed_up_for_cpu_training
        from seq2seq.training.loss import sequence_loss
        from seq2seq.model.transformer import Seq2SeqTransformer
        torch.manual_seed(0)
        torch.set_num_threads(1)
        cfg = ModelConfig(src_vocab_size=40, tgt_vocab_size=40, d_model=32, heads=2, ffn_dim=64, layers=1)
        model = Seq2SeqTransformer(cfg).train()
        if sys.argv[1] == "variants":
            speed_up_for_cpu_training(model)
        def step(b, s, t):
            src = torch.randint(4, 40, (b, s))
            tgt = torch.randint(4, 40, (b, t + 1))
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = sequence_loss(model, src, tgt[:, :-1], tgt[:, 1:], 0, 0.1)
            loss.backward()
        for b in range(16, 33):  # 128..256 rows in steps of 8: every bucket of that range
            step(b, 8, 8)
        print("SECOND PASS", flush=True)
        for shape in [(17, 11, 13), (19, 9, 7), (23, 10, 11), (15, 13, 9)]:  # new shapes, same buckets
            step(*shape)
    """)
    env = {**os.environ, "ONEDNN_VERBOSE": "all"}
    misses = {}
    for kind in ("variants", "plain"):
        out = subprocess.run([sys.executable, "-c", code, kind], env=env, capture_output=True, text=True,
                             check=True).stdout
        first, second = out.split("SECOND PASS")
        if ",exec," not in first:
            pytest.skip("bf16 matmuls do not run through oneDNN on this CPU")
        assert "create:cache_miss" in first  # the count is real: kernels were compiled once
        misses[kind] = second.count("create:cache_miss")
    assert misses["variants"] == 0 and misses["plain"] > 10
