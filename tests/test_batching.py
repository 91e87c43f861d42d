"""Tests for seq2seq.data.batching: collation and the token-bounded, resumable batch sampler."""

from __future__ import annotations

import random

import datasets
import pytest
import torch

from seq2seq.data.batching import (
    Batch, IndexedRows, TokenBatchSampler, collate_text, make_target, pad_sequences, padding_ratio, shape_bound,
)
from seq2seq.text.tokenizer import BOS_ID, EOS_ID, PAD_ID

MAX_TOKENS = 300


@pytest.fixture(scope="module")
def lengths() -> tuple[list[int], list[int]]:
    rng = random.Random(0)
    src = [rng.randint(2, 60) for _ in range(2000)]
    tgt = [max(2, s + rng.randint(-5, 5)) for s in src]
    src[7], tgt[7] = 400, 350  # one row longer than max_tokens on its own
    return src, tgt


def sampler(lengths, **kw) -> TokenBatchSampler:
    return TokenBatchSampler(*lengths, max_tokens=kw.pop("max_tokens", MAX_TOKENS), **kw)


def test_batches_fit_and_cover_every_index_once(lengths) -> None:
    src, tgt = lengths
    s = sampler(lengths, seed=1)
    for epoch in range(2):
        s.set_epoch(epoch)
        batches = list(s)
        assert len(batches) == len(s)
        assert sorted(i for b in batches for i in b) == list(range(len(src)))
        for b in batches:
            if len(b) > 1:
                assert max(src[i] for i in b) * len(b) <= MAX_TOKENS
                assert max(tgt[i] for i in b) * len(b) <= MAX_TOKENS
        assert [7] in batches  # the over-long row is alone
        assert s.state_dict() == {"epoch": epoch, "position": len(batches)}
        assert list(s) == []  # a finished epoch yields nothing until set_epoch moves on


def test_deterministic_per_seed_and_epoch(lengths) -> None:
    a, b, c = sampler(lengths, seed=5), sampler(lengths, seed=5), sampler(lengths, seed=6)
    epoch0 = list(a)
    assert epoch0 == list(b)
    assert epoch0 != list(c)
    a.set_epoch(1)
    epoch1 = list(a)
    assert epoch1 != epoch0 and len(epoch1) == len(epoch0)
    b.set_epoch(1)
    assert list(b) == epoch1
    a.set_epoch(0)
    assert list(a) == epoch0


def test_resume_mid_epoch_yields_exactly_the_rest(lengths) -> None:
    a = sampler(lengths, seed=3)
    a.set_epoch(2)
    it = iter(a)
    seen = [next(it) for _ in range(7)]
    state = a.state_dict()
    assert state == {"epoch": 2, "position": 7}
    rest = list(it)

    b = sampler(lengths, seed=3)
    b.load_state_dict(state)
    b.set_epoch(2)  # a trainer re-entering the same epoch must not lose the position
    assert list(b) == rest
    assert seen + rest == a.batches(2)
    assert b.state_dict() == {"epoch": 2, "position": len(a)}


def test_resume_at_end_of_epoch_moves_on(lengths) -> None:
    """The trainer's loop: `yield from sampler; sampler.set_epoch(sampler.epoch + 1)`."""
    a = sampler(lengths, seed=3)
    epoch0 = list(a)
    b = sampler(lengths, seed=3)
    b.load_state_dict(a.state_dict())  # saved right after the last batch of epoch 0
    assert list(b) == []
    b.set_epoch(b.epoch + 1)
    a.set_epoch(1)
    assert list(b) == list(a) != epoch0


def test_bucketing_pads_less_than_random_batches(lengths) -> None:
    src, tgt = lengths
    s = sampler(lengths, seed=0)
    bucketed = list(s)
    order = list(range(len(src)))
    random.Random(0).shuffle(order)
    random_batches, current = [], []
    for i in order:  # the same token bound, rows in random order
        rows = len(current) + 1
        if current and max(max(src[j] for j in current + [i]), max(tgt[j] for j in current + [i])) * rows > MAX_TOKENS:
            random_batches.append(current)
            current = []
        current.append(i)
    random_batches.append(current)
    bucketed_ratio = padding_ratio(bucketed, src, tgt)
    assert bucketed_ratio == pytest.approx(s.padding_ratio())
    assert bucketed_ratio < 0.15 < padding_ratio(random_batches, src, tgt)
    assert padding_ratio([[0, 1]], [2, 4]) == pytest.approx(0.25)


def test_no_shuffle_keeps_length_order(lengths) -> None:
    src, tgt = lengths
    batches = list(sampler(lengths, shuffle=False))
    flat = [i for b in batches for i in b]
    keys = [(tgt[i], src[i], i) for i in flat]
    assert keys == sorted(keys)


def test_pad_sequences_and_make_target() -> None:
    assert pad_sequences([[5, 6, 7], [8]], pad_id=PAD_ID).tolist() == [[5, 6, 7], [8, 0, 0]]
    assert pad_sequences([]).shape == (0, 0)
    tgt_in, tgt_out = make_target([[5, 6], [7]])
    assert tgt_in.tolist() == [[BOS_ID, 5, 6], [BOS_ID, 7, PAD_ID]]
    assert tgt_out.tolist() == [[5, 6, EOS_ID], [7, EOS_ID, PAD_ID]]
    assert tgt_in.dtype == tgt_out.dtype == torch.long


def test_collate_text_shapes_and_specials() -> None:
    rows = [
        {"src_ids": [10, 11, 12, EOS_ID], "tgt_ids": [20, 21], "index": 40},
        {"src_ids": [13, EOS_ID], "tgt_ids": [22, 23, 24, 25], "index": 41},
    ]
    batch = collate_text(rows)
    assert batch.src.shape == (2, 4) and batch.tgt_in.shape == batch.tgt_out.shape == (2, 5)
    assert batch.src.tolist() == [[10, 11, 12, EOS_ID], [13, EOS_ID, PAD_ID, PAD_ID]]
    assert (batch.tgt_in[:, 0] == BOS_ID).all()
    assert batch.tgt_in.tolist()[0] == [BOS_ID, 20, 21, PAD_ID, PAD_ID]
    assert batch.tgt_out.tolist()[1] == [22, 23, 24, 25, EOS_ID]
    for r, row in enumerate(rows):  # tgt_in is tgt_out shifted right by one (teacher forcing)
        n = len(row["tgt_ids"])
        assert batch.tgt_in[r, 1 : n + 1].tolist() == batch.tgt_out[r, :n].tolist() == row["tgt_ids"]
    assert batch.n_tgt_tokens == 3 + 5 and batch.indices == [40, 41] and len(batch) == 2


def test_batch_to_moves_dict_src() -> None:
    batch = Batch(src={"pixels": torch.zeros(2, 3), "lengths": [1, 2]}, tgt_in=torch.ones(2, 2, dtype=torch.long),
                  tgt_out=torch.ones(2, 2, dtype=torch.long), n_tgt_tokens=4, indices=[0, 1])
    moved = batch.to("meta")
    assert moved.src["pixels"].device.type == "meta" and moved.tgt_out.device.type == "meta"
    assert moved.src["lengths"] == [1, 2] and batch.src["pixels"].device.type == "cpu"


def test_dataloader_with_indexed_rows() -> None:
    rng = random.Random(1)
    tgt = [[rng.randint(4, 50) for _ in range(rng.randint(1, 9))] for _ in range(100)]
    src = [t[::-1] + [EOS_ID] for t in tgt]
    ds = datasets.Dataset.from_dict({"src": ["x"] * 100, "src_ids": src, "tgt_ids": tgt})
    s = TokenBatchSampler([len(x) for x in src], [len(x) + 1 for x in tgt], max_tokens=40, seed=0)
    loader = torch.utils.data.DataLoader(IndexedRows(ds), batch_sampler=s, collate_fn=collate_text)
    seen = []
    for batch in loader:
        assert batch.src.numel() <= 40 and batch.tgt_in.numel() <= 40
        for row, i in enumerate(batch.indices):
            assert batch.tgt_out[row][: len(tgt[i])].tolist() == tgt[i]
            assert batch.src[row][: len(src[i])].tolist() == src[i]
        seen += batch.indices
    assert sorted(seen) == list(range(100))


def test_shapes_in_multiples_of_8_fit_max_tokens_and_are_few(lengths) -> None:
    """training.shape_multiple 8: every batch is padded to multiples of 8 and holds a multiple of 8 rows
    (or fewer than 8), within max_tokens as padded; an epoch makes a bounded handful of shapes, far fewer
    than with exact lengths, and covers every row once."""
    src, tgt = lengths
    exact, rounded = sampler(lengths, seed=2, max_tokens=1000), sampler(lengths, seed=2, max_tokens=1000, multiple=8)
    batches = list(rounded)
    assert sorted(i for b in batches for i in b) == list(range(len(src)))
    for b in batches:
        assert len(b) % 8 == 0 or len(b) < 8
        padded = [-(-max(lens[i] for i in b) // 8) * 8 for lens in (src, tgt)]
        assert len(b) == 1 or max(padded) * len(b) <= 1000
    shapes = rounded.shapes()
    assert all(s % 8 == 0 and t % 8 == 0 and (rows % 8 == 0 or rows < 8) for rows, s, t in shapes)
    assert len(shapes) <= shape_bound(1000, 400, 8)
    assert len(shapes) * 3 < len(exact.shapes())
    # what training collates is what the sampler counted
    rows = [{"src_ids": [5] * src[i], "tgt_ids": [6] * (tgt[i] - 1), "index": i} for i in range(len(src))]
    collated = {collate_text([rows[i] for i in b], multiple=8).shape for b in batches}
    assert collated == shapes
    assert rounded.padding_ratio() > exact.padding_ratio()


def test_padding_to_a_multiple_keeps_the_real_tokens_and_finds_them_on_the_host() -> None:
    batch = collate_text([{"src_ids": [5, 6, EOS_ID], "tgt_ids": [7, 8, 9]}, {"src_ids": [5, EOS_ID], "tgt_ids": [7]}],
                         multiple=4)
    assert batch.src.tolist() == [[5, 6, EOS_ID, PAD_ID], [5, EOS_ID, PAD_ID, PAD_ID]]
    assert batch.tgt_in.shape == batch.tgt_out.shape == (2, 4)  # 3 + 1 = 4 already a multiple
    assert batch.tgt_out.tolist() == [[7, 8, 9, EOS_ID], [7, EOS_ID, PAD_ID, PAD_ID]]
    assert batch.n_tgt_tokens == 6 and batch.target_positions.tolist() == [0, 1, 2, 3, 4, 5]
    wider = collate_text([{"src_ids": [5, EOS_ID], "tgt_ids": [7, 8, 9, 10]}], multiple=4)
    assert wider.tgt_out.shape == (1, 8) and wider.target_positions.tolist() == [0, 1, 2, 3, 4]
    assert padding_ratio([[0, 1]], [3, 2], [4, 2], multiple=4) == pytest.approx(1 - 11 / 16)
