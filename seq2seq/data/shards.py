"""A corpus of any size -> tokenized, cleaned, memory-mapped Arrow shards, built in parallel processes.

`prepare` (`seq2seq.data.cache`) streams each corpus in chunks of pairs (`seq2seq.data.readers`);
each chunk is tokenized and cleaned (or, for validation, truncated) by `ShardJob.run` and written as
one Arrow file, so memory holds a few chunks whatever the corpus's size, and a corpus larger than RAM
trains: the shards are memory-mapped (`load_shards`), and training reads each batch's rows from them
(`ShardedRows`) instead of holding every row in Python lists.

    job = ShardJob(src_model, tgt_model, prefix_ids=(), truncate=False, max_len=256, max_ratio=3.0)
    reports = write_shards(chunks, job, directory, "train", workers=2)   # one CleaningReport per chunk
    train = load_shards(directory, [r.shard for r in reports if r.shard])
    rows = ShardedRows(train)
    src_ids, tgt_ids = rows([17, 4, 99])

Shards hold the columns of `seq2seq.data.cleaning.FEATURES` (texts, ids and lengths), in the
corpus's order. Chunks are processed in worker processes when `workers` > 1 (SentencePiece encodes
~150k sentences a second on one core, the slowest step); the output does not depend on `workers`.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import random
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import sentencepiece as spm

from seq2seq.data.cleaning import FEATURES, CleaningReport, keep_mask, truncate_ids
from seq2seq.data.readers import Chunk
from seq2seq.text.tokenizer import EOS_ID

PARALLEL_BYTES = 32 << 20  # corpora at least this large are tokenized in worker processes


@dataclass(frozen=True)
class ShardJob:
    """How every chunk of one corpus or validation set is tokenized and cleaned.

    src_model / tgt_model: the SentencePiece model bytes (the same object for a joint tokenizer).
    prefix_ids: the tag ids every source starts with (`seq2seq.text.languages`).
    truncate: validation (cut to max_len, keep every pair) instead of training (drop empty,
    over-long and badly ratioed pairs, `seq2seq.data.cleaning`).
    """

    src_model: bytes
    tgt_model: bytes
    prefix_ids: tuple[int, ...] = ()
    truncate: bool = False
    max_len: int = 256
    max_ratio: float = 3.0

    def run(self, src: list[str], tgt: list[str]) -> tuple[pa.Table, CleaningReport]:
        """One chunk's texts -> its table (FEATURES' columns, the kept rows) and its cleaning report."""
        src_sp, tgt_sp = _processor(self.src_model), _processor(self.tgt_model)
        prefix, n_prefix = list(self.prefix_ids), len(self.prefix_ids)
        src_ids = [prefix + ids + [EOS_ID] for ids in src_sp.encode(src, out_type=int, num_threads=1)]
        tgt_ids = tgt_sp.encode(tgt, out_type=int, num_threads=1)
        if self.truncate:
            src_ids, tgt_ids, report = truncate_ids(src_ids, tgt_ids, self.max_len, n_prefix)
        src_len = np.fromiter(map(len, src_ids), np.int32, len(src_ids))
        tgt_len = np.fromiter(map(len, tgt_ids), np.int32, len(tgt_ids)) + 1  # the decoder's BOS/EOS position
        keep = None
        if not self.truncate:
            keep, report = keep_mask(src_len - 1 - n_prefix, tgt_len - 1, self.max_len, self.max_ratio)
        table = pa.table({"src": pa.array(src, pa.string()), "tgt": pa.array(tgt, pa.string()),
                          "src_ids": _list_array(src_ids), "tgt_ids": _list_array(tgt_ids),
                          "src_len": pa.array(src_len), "tgt_len": pa.array(tgt_len)})
        if keep is not None and report.kept < report.total:
            table = table.filter(pa.array(keep))
        return table, report


_PROCESSORS: dict[bytes, spm.SentencePieceProcessor] = {}


def _processor(model: bytes) -> spm.SentencePieceProcessor:
    """One SentencePiece processor per model and process (a worker keeps it for every chunk)."""
    if model not in _PROCESSORS:
        _PROCESSORS[model] = spm.SentencePieceProcessor(model_proto=model)
    return _PROCESSORS[model]


def _list_array(ids: Sequence[list[int]]) -> pa.ListArray:
    """Id lists -> an Arrow list<int32> array, built from flat numpy arrays (not row by row)."""
    offsets = np.zeros(len(ids) + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, ids), np.int32, len(ids)), out=offsets[1:])
    values = np.fromiter(itertools.chain.from_iterable(ids), np.int32, int(offsets[-1]))
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))


@dataclass
class ShardReport:
    """One chunk's outcome: its shard's file name (None when cleaning kept no row) and counts."""

    shard: str | None
    report: CleaningReport


def _write_chunk(job: ShardJob, directory: str, name: str, src: list[str], tgt: list[str]) -> ShardReport:
    table, report = job.run(src, tgt)
    if not table.num_rows:
        return ShardReport(None, report)
    with datasets.arrow_writer.ArrowWriter(features=FEATURES, path=os.path.join(directory, name)) as writer:
        # One record batch: each column contiguous, so reading the lengths maps their pages only (in
        # 1,000-row batches, the kernel's fault-around mapped most of the file, and RSS grew with it)
        writer.write_table(table, writer_batch_size=max(table.num_rows, 1))
        writer.finalize()
    return ShardReport(name, report)


def available_cores() -> int:
    """The cores this process may run on (its affinity), not the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def write_shards(chunks: Iterable[Chunk], job: ShardJob, directory: Path, name: str,
                 workers: int = 1) -> list[ShardReport]:
    """Run `job` on every chunk, writing `directory/{name}-{i:05d}.arrow` for chunk i (when it keeps a
    row). workers > 1: in that many processes, at most 2 chunks each in flight (memory stays bounded
    however long the corpus); the files and reports are the same as with workers=1."""
    directory.mkdir(parents=True, exist_ok=True)
    names = (f"{name}-{i:05d}.arrow" for i in itertools.count())
    if workers <= 1:
        return [_write_chunk(job, str(directory), shard, src, tgt) for shard, (src, tgt) in zip(names, chunks)]
    reports: list[ShardReport] = []
    pending: deque[Future[ShardReport]] = deque()
    # fork where there is one (as datasets' map(num_proc=...) does): a worker starts at once and runs
    # only SentencePiece and Arrow, and a script calling prepare() needs no `if __name__ == "__main__"`
    # guard, as spawn would require
    context = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(context)) as pool:
        try:
            for shard, (src, tgt) in zip(names, chunks):
                pending.append(pool.submit(_write_chunk, job, str(directory), shard, src, tgt))
                if len(pending) >= 2 * workers:
                    reports.append(pending.popleft().result())
            reports.extend(f.result() for f in pending)
        except BaseException:
            for future in pending:
                future.cancel()
            raise
    return reports


def load_shards(directory: Path, shards: Sequence[str]) -> datasets.Dataset:
    """The shards, concatenated in order, memory-mapped (empty: a dataset of FEATURES with no row)."""
    if not shards:
        return datasets.Dataset.from_dict({k: [] for k in FEATURES}, features=FEATURES)
    parts = [datasets.Dataset.from_file(str(directory / shard)) for shard in shards]
    return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)


class ShardedRows:
    """List columns of a memory-mapped dataset, read row by row for each batch (no copy of the corpus
    in memory): `rows(indices)` -> one list of id lists per column, in the order of `indices`."""

    def __init__(self, ds: datasets.Dataset, columns: Sequence[str] = ("src_ids", "tgt_ids")) -> None:
        if ds._indices is not None:
            ds = ds.flatten_indices()
        table = ds.data.table
        self.columns = []
        for column in columns:
            chunks = [c for c in table.column(column).chunks if len(c)]
            starts = np.cumsum([0] + [len(c) for c in chunks])
            # zero-copy numpy views of each chunk's offsets and values (the pages are read when touched)
            arrays = [(c.offsets.to_numpy(), c.values.to_numpy(zero_copy_only=False)) for c in chunks]
            self.columns.append((starts, arrays))

    def __call__(self, indices: Sequence[int]) -> tuple[list[list[int]], ...]:
        out = []
        for starts, arrays in self.columns:
            idx = np.asarray(indices, dtype=np.int64)
            which = np.searchsorted(starts, idx, side="right") - 1
            rows = []
            for k, i in zip(which.tolist(), (idx - starts[which]).tolist()):
                offsets, values = arrays[k]
                rows.append(values[offsets[i]:offsets[i + 1]].tolist())
            out.append(rows)
        return tuple(out)

    def __len__(self) -> int:
        return int(self.columns[0][0][-1]) if self.columns else 0


def pair_lengths(ds: datasets.Dataset) -> tuple[np.ndarray, np.ndarray]:
    """(src_len, tgt_len) of every row as int32 arrays [N], read from the memory-mapped columns."""
    table = ds.flatten_indices().data.table if ds._indices is not None else ds.data.table
    return tuple(np.concatenate([c.to_numpy() for c in table.column(name).chunks] or [np.zeros(0, np.int32)])
                 .astype(np.int32, copy=False) for name in ("src_len", "tgt_len"))  # type: ignore[return-value]


def sample_sentences(blocks: Iterable[list[str]], k: int, seed: int = 0) -> list[str]:
    """At most `k` sentences of a stream of lists of sentences, drawn uniformly without replacement
    (reservoir sampling, Li's algorithm L: it jumps from one replacement to the next, so beyond reading
    the stream it costs O(k log(N / k))); every sentence, in order, when there are at most `k`."""
    rng = random.Random(seed)
    sample: list[str] = []
    w = next_at = 0.0
    seen = 0  # sentences before the current block
    for block in blocks:
        if len(sample) < k:
            start = min(k - len(sample), len(block))
            sample += block[:start]
            if len(sample) == k:
                w = math.exp(math.log(1.0 - rng.random()) / k)
                next_at = seen + start + math.floor(math.log(1.0 - rng.random()) / math.log1p(-w))
        if len(sample) == k:
            end = seen + len(block)
            while next_at < end:
                sample[rng.randrange(k)] = block[int(next_at) - seen]
                w *= math.exp(math.log(1.0 - rng.random()) / k)
                next_at += math.floor(math.log(1.0 - rng.random()) / math.log1p(-w)) + 1
        seen += len(block)
    return sample
