"""Attention core: golden numbers from the seed notebook, SDPA vs the formula, masks, cache."""

import pytest
import torch
from torch import nn

from seq2seq.model.attention import KVCache, MultiHeadAttention, attention_reference, scaled_dot_product_attention

ENCODINGS = torch.tensor([[1.16, 0.23], [0.57, 1.36], [4.41, -2.16]])


def seed_attention() -> MultiHeadAttention:
    """d_model 2, one head, no bias, W_q/W_k/W_v made as the notebook makes them; identity output."""
    torch.manual_seed(42)
    w_q, w_k, w_v = (nn.Linear(2, 2, bias=False) for _ in range(3))
    mha = MultiHeadAttention(d_model=2, heads=1, bias=False)
    with torch.no_grad():
        mha.in_proj.weight.copy_(torch.cat([w_q.weight, w_k.weight, w_v.weight]))
        mha.out_proj.weight.copy_(torch.eye(2))
    return mha


def test_golden_self_attention_matches_seed_notebook():
    out, weights = seed_attention()(ENCODINGS[None], need_weights=True)
    expected = torch.tensor([[1.0100, 1.0641], [0.2040, 0.7057], [3.4989, 2.2427]])
    torch.testing.assert_close(out[0], expected, atol=5e-5, rtol=0)
    expected_weights = torch.tensor([[0.3573, 0.4011, 0.2416], [0.3410, 0.6047, 0.0542], [0.0722, 0.0320, 0.8959]])
    torch.testing.assert_close(weights[0, 0], expected_weights, atol=5e-5, rtol=0)


def test_golden_fast_path_equals_weights_path():
    mha = seed_attention()
    fast, none = mha(ENCODINGS[None])
    assert none is None
    slow, _ = mha(ENCODINGS[None], need_weights=True)
    torch.testing.assert_close(fast, slow, atol=1e-6, rtol=0)


def test_golden_causal_self_attention():
    mha = seed_attention()
    values = torch.tensor([[0.6038, 0.7434], [-0.3502, 0.5303], [3.8695, 2.4246]])
    out, weights = mha(ENCODINGS[None], causal=True, need_weights=True)
    torch.testing.assert_close(out[0, 0], values[0], atol=5e-5, rtol=0)  # row 0 sees only itself
    torch.testing.assert_close(out[0, 2], torch.tensor([3.4989, 2.2427]), atol=5e-5, rtol=0)  # last row unchanged
    assert weights[0, 0, 0, 1:].abs().max() == 0 and weights[0, 0, 1, 2] == 0
    fast, _ = mha(ENCODINGS[None], causal=True)
    torch.testing.assert_close(fast, out, atol=1e-6, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_equals_reference_with_padding(causal):
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 4, 6, 8) for _ in range(3))
    pad = torch.zeros(3, 6, dtype=torch.bool)
    pad[1, 4:] = True
    pad[2, 2:] = True
    mask = ~pad[:, None, None, :]
    if causal:
        mask = mask & torch.ones(6, 6, dtype=torch.bool).tril()
    fast, _ = scaled_dot_product_attention(q, k, v, mask)
    ref, weights = attention_reference(q, k, v, mask)
    torch.testing.assert_close(fast, ref, atol=1e-5, rtol=1e-5)
    assert torch.all(weights.masked_select(~mask.expand_as(weights)) == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, 6))


def test_is_causal_flag_equals_explicit_mask():
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, 2, 5, 4) for _ in range(3))
    a, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
    b, _ = attention_reference(q, k, v, torch.ones(5, 5, dtype=torch.bool).tril())
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_padding_keys_do_not_change_outputs():
    torch.manual_seed(2)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(1, 7, 16)
    pad = torch.tensor([[False] * 4 + [True] * 3])
    out1, _ = mha(x, key_padding_mask=pad)
    x2 = x.clone()
    x2[:, 4:] = torch.randn(1, 3, 16) * 10
    out2, _ = mha(x2, key_padding_mask=pad)
    torch.testing.assert_close(out1[:, :4], out2[:, :4], atol=1e-5, rtol=1e-5)


def test_cross_attention_reads_memory_and_groups_rows():
    """B = N * group query rows over N memories equals repeating the memory per row."""
    torch.manual_seed(3)
    mha = MultiHeadAttention(16, 4).eval()
    memory = torch.randn(2, 5, 16)
    pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    x = torch.randn(6, 2, 16)  # 3 rows per source
    grouped, w1 = mha(x, memory=memory, key_padding_mask=pad, need_weights=True)
    repeated, w2 = mha(
        x, memory=memory.repeat_interleave(3, 0), key_padding_mask=pad.repeat_interleave(3, 0), need_weights=True
    )
    torch.testing.assert_close(grouped, repeated, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w1, w2, atol=1e-6, rtol=1e-6)
    assert torch.all(w1[3:, :, :, 3:] == 0)  # source 1's padding gets no weight


def test_self_attention_cache_grows_and_matches_full():
    torch.manual_seed(4)
    mha = MultiHeadAttention(16, 2).eval()
    x = torch.randn(2, 5, 16)
    full, _ = mha(x, causal=True)
    cache = KVCache()
    steps = [mha(x[:, t : t + 1], causal=True, cache=cache)[0] for t in range(5)]
    assert cache.self_k.shape == (2, 2, 5, 8)
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    # two new positions at once after a cached prefix
    cache = KVCache()
    first, _ = mha(x[:, :3], causal=True, cache=cache)
    rest, _ = mha(x[:, 3:], causal=True, cache=cache)
    torch.testing.assert_close(torch.cat([first, rest], 1), full, atol=1e-5, rtol=1e-5)
