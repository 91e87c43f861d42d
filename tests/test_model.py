"""The Transformer: causality, padding invariance, incremental = full decoding, cache reorder, learning."""

import pytest
import torch

from seq2seq.config import ModelConfig, from_dict, to_dict
from seq2seq.model.encoders import Encoder
from seq2seq.model.transformer import Seq2SeqTransformer

PAD = 0


def tiny_config(**kw) -> ModelConfig:
    base = dict(src_vocab_size=40, tgt_vocab_size=40, d_model=32, heads=4, ffn_dim=64, layers=2, dropout=0.0)
    base.update(kw)
    return ModelConfig(**base)


def make_model(**kw) -> Seq2SeqTransformer:
    torch.manual_seed(0)
    return Seq2SeqTransformer(tiny_config(**kw)).eval()


def batch_with_lengths(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.full((len(lengths), max(lengths)), PAD)
    for i, n in enumerate(lengths):
        src[i, :n] = torch.randint(4, 40, (n,), generator=g)
    return src


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_decoder_is_causal(norm):
    model = make_model(norm=norm)
    src = batch_with_lengths([6, 4])
    tgt = torch.randint(4, 40, (2, 7))
    base = model(src, tgt)
    for t in range(7):
        changed = tgt.clone()
        changed[:, t] = (changed[:, t] + 1 - 4) % 36 + 4
        out = model(src, changed)
        torch.testing.assert_close(out[:, :t], base[:, :t], atol=1e-5, rtol=1e-5)
        assert (out[:, t:] - base[:, t:]).abs().max() > 1e-4  # and it does change at t


def test_padded_source_positions_change_nothing():
    model = make_model()
    src = batch_with_lengths([7, 3])
    tgt = torch.randint(4, 40, (2, 5))
    base = model(src, tgt)
    memory, mask = model.encode(src)
    # memory values at padded positions are ignored by real tokens
    mem3 = memory.clone()
    mem3[1, 3:] = torch.randn_like(mem3[1, 3:]) * 100
    torch.testing.assert_close(model.decode(tgt, mem3, mask)[0], base, atol=1e-5, rtol=1e-5)
    # and the encoder's own outputs for real tokens ignore extra padding
    longer = torch.cat([src, torch.full((2, 4), PAD)], dim=1)
    mem_long, _ = model.encode(longer)
    torch.testing.assert_close(mem_long[:, :7], memory, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_incremental_decoding_equals_full(positions):
    model = make_model(positions=positions)
    src = batch_with_lengths([8, 3, 5])
    tgt = torch.randint(4, 40, (3, 9))
    full = model(src, tgt)
    memory, mask = model.encode(src)
    cache = model.new_cache()
    for t in range(9):
        logits, _ = model.decode(tgt[:, t : t + 1], memory, mask, cache)
        torch.testing.assert_close(logits[:, 0], full[:, t], atol=1e-5, rtol=1e-5)
    assert cache.length == 9


def test_cache_reorder_equals_decoding_reordered_batch():
    model = make_model()
    src = batch_with_lengths([6, 2, 4])
    tgt = torch.randint(4, 40, (3, 6))
    memory, mask = model.encode(src)
    cache = model.new_cache()
    for t in range(3):
        model.decode(tgt[:, t : t + 1], memory, mask, cache)
    order = torch.tensor([2, 0, 0, 1])
    cache.reorder(order)
    re_src, re_tgt = src[order], tgt[order]
    full = model(re_src, re_tgt)
    for t in range(3, 6):
        logits, _ = model.decode(re_tgt[:, t : t + 1], None, None, cache)
        torch.testing.assert_close(logits[:, 0], full[:, t], atol=1e-5, rtol=1e-5)


def test_grouped_cache_shares_memory_and_reorders_within_groups():
    """Beam-style: 2 sources x 3 rows each share 2 cross-attention entries."""
    model = make_model()
    src = batch_with_lengths([5, 3])
    tgt = torch.randint(4, 40, (6, 5))
    memory, mask = model.encode(src)
    cache = model.new_cache(group=3)
    for t in range(2):
        model.decode(tgt[:, t : t + 1], memory, mask, cache)
    assert cache.layers[0].cross_k.size(0) == 2  # not copied per row
    order = torch.tensor([2, 2, 0, 4, 3, 3])  # rows stay with their source
    cache.reorder(order)
    assert cache.layers[0].cross_k.size(0) == 2
    keep_second = torch.tensor([3, 4, 5])  # first sentence leaves the batch
    cache.reorder(keep_second)
    assert cache.layers[0].cross_k.size(0) == 1 and cache.memory_pad_mask.size(0) == 1
    rows = order[keep_second]
    full = model(src.repeat_interleave(3, 0)[rows], tgt[rows])
    for t in range(2, 5):
        logits, _ = model.decode(tgt[rows][:, t : t + 1], None, None, cache)
        torch.testing.assert_close(logits[:, 0], full[:, t], atol=1e-5, rtol=1e-5)


def test_attention_weights_returned_for_a_layer():
    model = make_model()
    src = batch_with_lengths([5, 2])
    tgt = torch.randint(4, 40, (2, 3))
    memory, mask = model.encode(src)
    logits, attn = model.decode(tgt, memory, mask, attention_layer=-1)
    assert attn.shape == (2, 3, 5)
    torch.testing.assert_close(attn.sum(-1), torch.ones(2, 3))
    assert attn[1, :, 2:].abs().max() == 0
    torch.testing.assert_close(logits, model(src, tgt))


def test_tied_and_shared_embeddings():
    model = make_model(share_embeddings=True, tie_output=True)
    assert model.encoder.embed is model.decoder.embed
    assert model.decoder.output is None
    untied = make_model(tie_output=False)
    assert untied.decoder.output.weight.data_ptr() != untied.decoder.embed.tokens.weight.data_ptr()
    assert model.num_parameters() < untied.num_parameters()


def test_init_zero_pad_row_and_xavier_bounds():
    model = make_model()
    assert model.decoder.embed.tokens.weight[PAD].abs().sum() == 0
    w = model.decoder.layers[0].self_attn.in_proj.weight
    bound = (6 / (32 + 32)) ** 0.5
    assert w.abs().max() <= bound and w.abs().max() > 0.8 * bound


def test_config_round_trip_and_validation(tmp_path):
    cfg = tiny_config(norm="post", positions="learned", encoder_layers=4)
    assert from_dict(ModelConfig, to_dict(cfg)) == cfg
    assert cfg.n_encoder_layers == 4 and cfg.n_decoder_layers == 2
    from seq2seq.config import schema as C

    for suffix in (".yaml", ".json"):
        C.save(cfg, tmp_path / f"m{suffix}")
        assert C.load(ModelConfig, tmp_path / f"m{suffix}") == cfg
    with pytest.raises(C.ConfigError, match="Did you mean 'd_model'"):
        from_dict(ModelConfig, {"d_modle": 3})
    with pytest.raises(C.ConfigError, match="'heads'"):
        from_dict(ModelConfig, {"heads": "four"})
    with pytest.raises(C.ConfigError, match="divisible"):
        ModelConfig(d_model=30, heads=4)


def test_a_new_encoder_plugs_in_without_touching_the_decoder():
    class FeatureEncoder(Encoder):
        """Features [B, S, 7] + lengths -> memory via a linear bridge."""

        def __init__(self):
            super().__init__()
            self.d_model = 32
            self.proj = torch.nn.Linear(7, 32)

        def forward(self, src):
            feats, lengths = src
            mask = torch.arange(feats.size(1))[None] >= lengths[:, None]
            return self.proj(feats), mask

    torch.manual_seed(0)
    model = Seq2SeqTransformer(tiny_config(), encoder=FeatureEncoder()).eval()
    feats, lengths = torch.randn(2, 6, 7), torch.tensor([6, 3])
    logits = model((feats, lengths), torch.randint(4, 40, (2, 4)))
    assert logits.shape == (2, 4, 40)


def test_tiny_model_memorises_sentence_pairs():
    torch.manual_seed(0)
    pairs = [([5, 6, 7, 3], [8, 9, 10, 3]), ([11, 12, 3], [13, 14, 15, 16, 3]), ([17, 3], [18, 19, 3]),
             ([20, 21, 22, 23, 3], [24, 25, 3]), ([26, 27, 28, 3], [29, 30, 31, 32, 33, 3])]
    src = torch.nn.utils.rnn.pad_sequence([torch.tensor(s) for s, _ in pairs], batch_first=True)
    tgt = torch.nn.utils.rnn.pad_sequence([torch.tensor([2] + t) for _, t in pairs], batch_first=True)
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    model = Seq2SeqTransformer(tiny_config(dropout=0.1))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(150):
        loss = torch.nn.functional.cross_entropy(model(src, tgt_in).transpose(1, 2), tgt_out, ignore_index=PAD)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05
    model.eval()
    assert torch.equal(model(src, tgt_in).argmax(-1)[tgt_out != PAD], tgt_out[tgt_out != PAD])
