"""Corpora of any size: streamed reading, sharded tokenization in worker processes, the shared cache,
batch packing on arrays, and the rows training reads from memory-mapped shards."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import numpy as np
import pytest

from seq2seq.config import DataConfig, TokenizerConfig
from seq2seq.data import DataError, prepare, read_parallel
from seq2seq.data import cache as cache_module
from seq2seq.data import readers, shards, splits
from seq2seq.data.batching import PackedBatches, TokenBatchSampler, pack_in_order, padding_ratio
from seq2seq.data.shards import ShardedRows, pair_lengths, sample_sentences

WORDS = "the a cat dog sat ran on in park mat house red blue big small green tree water".split()


def corpus(tmp_path: Path, n: int, seed: int = 0) -> tuple[Path, Path]:
    rng = random.Random(seed)
    src = [" ".join(rng.choices(WORDS, k=rng.randint(1, 14))) for _ in range(n)]
    tgt = [s.upper() for s in src]
    src[3] = ""  # dropped by cleaning
    (tmp_path / "c.en").write_text("\n".join(src) + "\n", encoding="utf-8")
    (tmp_path / "c.de").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    return tmp_path / "c.en", tmp_path / "c.de"


# ---------------------------------------------------------------------------- streamed reading


def test_blocks_split_where_the_whole_file_splits(tmp_path: Path, monkeypatch) -> None:
    """Tiny read blocks cut lines, CRLFs and multi-byte characters anywhere: the lines are those of the
    whole file (BOM dropped, CRLF a line end, a stray CR a space), and a bad byte names its line."""
    text = "\ufeffeins\r\nzwei\rhalb\n\nüber straße\r\n" + "".join(f"zeile {i} ä\n" for i in range(40)) + "ende"
    path = tmp_path / "x.de.gz"
    with gzip.open(path, "wb") as f:
        f.write(text.encode("utf-8"))
    monkeypatch.setattr(readers, "CHUNK_BYTES", 7)
    expected = readers.read_text(path).split("\n")
    assert list(readers.iter_lines(path)) == expected
    assert expected[:4] == ["eins", "zwei halb", "", "über straße"] and expected[-1] == "ende"
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n" * 30 + b"caf\xe9\nok\n")
    with pytest.raises(DataError, match=r"bad.txt, line 31: invalid UTF-8 at byte 4"):
        list(readers.iter_lines(bad))


def test_parallel_chunks_cover_the_files_and_name_a_length_mismatch(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(readers, "CHUNK_BYTES", 64)
    src, tgt = corpus(tmp_path, 250)
    chunks = list(readers.parallel_chunks(src, tgt, size=37))
    assert [len(s) for s, _ in chunks] == [37] * 6 + [28]
    whole = read_parallel(src, tgt)
    assert sum((s for s, _ in chunks), []) == whole["src"] and sum((t for _, t in chunks), []) == whole["tgt"]
    short = tmp_path / "short.de"
    short.write_text("".join(f"{i}\n" for i in range(249)), encoding="utf-8")
    with pytest.raises(DataError, match=r"c.en has 250 lines but .*short.de has 249 lines"):
        list(readers.parallel_chunks(src, short, size=37))


def test_sample_is_everything_in_order_when_small_and_uniform_when_large() -> None:
    blocks = [[f"{j + i}" for i in range(7)] for j in range(0, 105, 7)]
    every = sum(blocks, [])
    assert sample_sentences(blocks, 105) == every and sample_sentences(blocks, 1000) == every
    counts = np.zeros(105)
    for seed in range(3000):
        drawn = sample_sentences(blocks, 10, seed)
        assert len(drawn) == len(set(drawn)) == 10
        counts[[int(x) for x in drawn]] += 1
    p = counts / 3000  # each sentence drawn with probability 10/105; 5 standard deviations
    assert np.abs(p - 10 / 105).max() < 5 * np.sqrt(10 / 105 * (1 - 10 / 105) / 3000)
    assert sample_sentences(blocks, 10, 3) == sample_sentences(blocks, 10, 3) != sample_sentences(blocks, 10, 4)


# ---------------------------------------------------------------------------- shards and the cache


def test_worker_processes_build_the_same_shards_as_one_process(tmp_path: Path, monkeypatch) -> None:
    src, tgt = corpus(tmp_path, 600)
    cfg = DataConfig(train_src=str(src), train_tgt=str(tgt), valid_src=str(src), valid_tgt=str(tgt), max_len=10)
    monkeypatch.setattr(splits, "CHUNK_PAIRS", 64)
    monkeypatch.setattr(readers, "CHUNK_PAIRS", 64)
    one = prepare(cfg, TokenizerConfig(vocab_size=60), tmp_path / "one", tmp_path / "cache1")
    monkeypatch.setattr(cache_module, "PARALLEL_BYTES", 0)  # any corpus goes to workers
    monkeypatch.setattr(cache_module, "available_cores", lambda: 2)
    two = prepare(cfg, TokenizerConfig(vocab_size=60), tmp_path / "two", tmp_path / "cache2")
    assert len(list(one.cache_path.glob("train0-*.arrow"))) > 5  # several shards, concatenated
    assert one.train[:] == two.train[:] and one.valid[:] == two.valid[:] and one.report == two.report
    assert one.report.empty == 1 and one.report.too_long > 0 and one.valid_report.truncated > 0
    assert one.report.kept == len(one.train) and len(one.valid) == 600


def test_a_second_run_elsewhere_reuses_the_shared_cache_and_tokenizer(tmp_path: Path, monkeypatch) -> None:
    src, tgt = corpus(tmp_path, 300)
    cfg = DataConfig(train_src=str(src), train_tgt=str(tgt))
    first = prepare(cfg, TokenizerConfig(vocab_size=60), tmp_path / "a")
    trained = []
    real_train = cache_module.TokenizerPair.train
    monkeypatch.setattr(cache_module.TokenizerPair, "train", lambda *a, **k: trained.append(1) or real_train(*a, **k))
    second = prepare(cfg, TokenizerConfig(vocab_size=60), tmp_path / "b")
    assert second.from_cache and second.cache_path == first.cache_path and not trained
    assert (tmp_path / "b" / "spm.model").read_bytes() == (tmp_path / "a" / "spm.model").read_bytes()
    assert second.train[:] == first.train[:]


def test_a_failed_build_leaves_no_entry(tmp_path: Path, monkeypatch) -> None:
    src, tgt = corpus(tmp_path, 300)
    cfg = DataConfig(train_src=str(src), train_tgt=str(tgt))
    monkeypatch.setattr(splits, "CHUNK_PAIRS", 50)
    calls = []
    real_run = shards.ShardJob.run

    def run(self, *args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # as if the user stopped it mid-corpus
        return real_run(self, *args)

    monkeypatch.setattr(shards.ShardJob, "run", run)
    with pytest.raises(KeyboardInterrupt):
        prepare(cfg, TokenizerConfig(vocab_size=60), tmp_path / "out", tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("prepared-*")) and not list((tmp_path / "cache").glob(".tmp-*"))
    monkeypatch.setattr(shards.ShardJob, "run", real_run)
    again = prepare(cfg, TokenizerConfig(vocab_size=60), tmp_path / "out", tmp_path / "cache")
    assert not again.from_cache and again.report.total == 300


@pytest.mark.parametrize("in_memory", [True, False])
def test_rows_are_read_from_the_shards(tmp_path: Path, monkeypatch, in_memory: bool) -> None:
    """Both ways: a small corpus's id arrays read once into memory, a large one's rows read one by one."""
    src, tgt = corpus(tmp_path, 400)
    monkeypatch.setattr(splits, "CHUNK_PAIRS", 30)
    data = prepare(DataConfig(train_src=str(src), train_tgt=str(tgt)), TokenizerConfig(vocab_size=60), tmp_path / "o")
    monkeypatch.setattr(ShardedRows, "IN_MEMORY_BYTES", 1 << 30 if in_memory else 0)
    rows = ShardedRows(data.train)
    assert bool(rows.loaded) == in_memory
    assert len(rows) == len(data.train)
    picks = [len(data.train) - 1, 0, 31, 29, 30, 150, 31]
    src_ids, tgt_ids = rows(picks)
    assert src_ids == [data.train[i]["src_ids"] for i in picks] and tgt_ids == [data.train[i]["tgt_ids"] for i in picks]
    src_len, tgt_len = pair_lengths(data.train)
    assert src_len.tolist() == data.train["src_len"][:] and tgt_len.tolist() == data.train["tgt_len"][:]


# ---------------------------------------------------------------------------- packing on arrays


def greedy(src: list[int], tgt: list[int], max_tokens: int) -> list[int]:
    """The packing rule row by row: start a new batch when the next row would overflow either side."""
    bounds, rows, longest_src, longest_tgt = [0], 0, 0, 0
    for i, (s, t) in enumerate(zip(src, tgt)):
        if rows and (max(longest_src, s) * (rows + 1) > max_tokens or max(longest_tgt, t) * (rows + 1) > max_tokens):
            bounds.append(i)
            rows, longest_src, longest_tgt = 0, 0, 0
        rows, longest_src, longest_tgt = rows + 1, max(longest_src, s), max(longest_tgt, t)
    return bounds + [len(src)]


@pytest.mark.parametrize("seed", range(5))
def test_array_packing_is_the_greedy_rule(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(40):
        n = int(rng.integers(1, 300))
        src, tgt = rng.integers(1, 70, n), np.sort(rng.integers(1, 70, n))
        max_tokens = int(rng.integers(1, 600))  # also below single rows' lengths
        assert pack_in_order(src, tgt, max_tokens).tolist() == greedy(src.tolist(), tgt.tolist(), max_tokens)


def test_packed_batches_are_the_epoch_and_its_padding() -> None:
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(1, 40, 500), rng.integers(1, 40, 500)
    sampler = TokenBatchSampler(src, tgt, max_tokens=200, seed=2)
    packed = sampler.batches()
    assert isinstance(packed, PackedBatches)
    lists = list(packed)
    assert sorted(i for b in lists for i in b) == list(range(500)) and packed == lists and lists[3] == packed[3]
    assert list(sampler) == lists
    assert packed.padding_ratio(src, tgt) == pytest.approx(padding_ratio(lists, src, tgt))


def test_unequal_files_are_refused_before_the_tokenizer_trains(tmp_path: Path, monkeypatch) -> None:
    src, tgt = corpus(tmp_path, 300)
    tgt.write_text("".join(f"{i}\n" for i in range(299)) + "no final newline", encoding="utf-8")  # 300 lines
    cfg = DataConfig(train_src=str(src), train_tgt=str(tgt))
    prepare(cfg, TokenizerConfig(vocab_size=60), tmp_path / "ok", tmp_path / "cache")  # equal counts: fine
    tgt.write_text("".join(f"{i}\n" for i in range(301)), encoding="utf-8")
    monkeypatch.setattr(cache_module.TokenizerPair, "train", lambda *a, **k: pytest.fail("trained first"))
    with pytest.raises(DataError, match=r"c.en has 300 lines but .*c.de has 301 lines"):
        prepare(cfg, TokenizerConfig(vocab_size=60), tmp_path / "out", tmp_path / "cache")
