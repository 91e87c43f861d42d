"""A corpus of any size -> tokenized, cleaned Arrow shards, built in parallel processes.

`prepare` (`seq2seq.data.cache`) streams each corpus in chunks of pairs (`seq2seq.data.readers`);
each chunk is tokenized and cleaned (or, for validation, truncated) by `ShardJob.run` and written as
one Arrow file, so memory holds a few chunks whatever the corpus's size, and a corpus larger than RAM
trains: `load_shards` gives the memory-mapped `datasets.Dataset` of the shards, and training reads
the lengths and each batch's rows from the files with positioned reads (`ShardedRows`, `pair_lengths`)
instead of holding every row in Python lists or mapping the files into the process.

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
from typing import TypeVar

import datasets
import numpy as np
import pyarrow as pa
import sentencepiece as spm

from seq2seq.data.cleaning import FEATURES, CleaningReport, keep_mask, truncate_ids
from seq2seq.data.readers import Chunk
from seq2seq.text.tokenizer import EOS_ID

T = TypeVar("T")

PARALLEL_BYTES = 32 << 20  # corpora at least this large are tokenized in worker processes


@dataclass(frozen=True)
class ShardJob:
    """How every chunk of one corpus or validation set is tokenized and cleaned.

    src_model / tgt_model: the SentencePiece model bytes (the same object for a joint tokenizer).
    prefix_ids: the tag ids every source starts with (`seq2seq.text.languages`); tgt_prefix_ids: those
    every target starts with (the language tag of a model that puts it on the decoder), not counted
    by the length limits.
    truncate: validation (cut to max_len, keep every pair) instead of training (drop empty,
    over-long and badly ratioed pairs, `seq2seq.data.cleaning`).
    """

    src_model: bytes
    tgt_model: bytes
    prefix_ids: tuple[int, ...] = ()
    truncate: bool = False
    max_len: int = 256
    max_ratio: float = 3.0
    tgt_prefix_ids: tuple[int, ...] = ()

    def run(self, src: list[str], tgt: list[str]) -> tuple[pa.Table, CleaningReport]:
        """One chunk's texts -> its table (FEATURES' columns, the kept rows) and its cleaning report."""
        src_sp, tgt_sp = _processor(self.src_model), _processor(self.tgt_model)
        prefix, n_prefix = list(self.prefix_ids), len(self.prefix_ids)
        src_ids = [prefix + ids + [EOS_ID] for ids in src_sp.encode(src, out_type=int, num_threads=1)]
        tgt_ids = tgt_sp.encode(tgt, out_type=int, num_threads=1)
        if self.truncate:
            src_ids, tgt_ids, report = truncate_ids(src_ids, tgt_ids, self.max_len, n_prefix)
        n_tgt_prefix = len(self.tgt_prefix_ids)
        if n_tgt_prefix:
            tgt_ids = [[*self.tgt_prefix_ids, *ids] for ids in tgt_ids]
        src_len = np.fromiter(map(len, src_ids), np.int32, len(src_ids))
        tgt_len = np.fromiter(map(len, tgt_ids), np.int32, len(tgt_ids)) + 1  # the decoder's BOS/EOS position
        keep = None
        if not self.truncate:
            keep, report = keep_mask(src_len - 1 - n_prefix, tgt_len - 1 - n_tgt_prefix, self.max_len, self.max_ratio)
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
    """The columns of a dataset stored in Arrow files (prepare's shards), read with positioned reads
    (`os.pread`): a batch's rows of the id-list columns (`rows(indices)`), or a whole int column
    (`column(name)`). Nothing of the corpus is held in memory, nor mapped into the process: a memory
    map counts every page a step touches (and the kernel's fault-around beside it) in the process's
    RSS, which then grows towards the corpus's size; read this way the pages stay in the page cache,
    which the system shares and drops as it needs. A batch of 200 rows is ~800 reads, ~1 ms.

    columns: the id-list columns `__call__` returns, in that order.
    """

    MAX_OPEN = 256  # file descriptors kept open at once (a 100M-pair corpus has 2,000 shards)
    IN_MEMORY_BYTES = 256 << 20  # id columns up to this size (~1.7M pairs) are read into memory once: a
    # row is then a slice (~1 us) instead of 4 reads (~8 us; 3 ms of a batch of 200 rows)

    def __init__(self, ds: datasets.Dataset, columns: Sequence[str] = ("src_ids", "tgt_ids")) -> None:
        files = [f["filename"] for f in ds.cache_files]
        self.names = list(columns)
        self.paths: list[str] = []
        self.batches: list[tuple[int, int, dict[str, tuple[int, int]]]] = []  # (path index, rows, positions)
        for path in files:
            mm = pa.memory_map(path)  # the metadata is read from it; the data pages are never touched
            base = mm.read_buffer(mm.size()).address
            mm.seek(0)
            for batch in pa.ipc.open_stream(mm):
                positions = {}
                for name in batch.schema.names:
                    array = batch.column(name)
                    if pa.types.is_list(array.type):  # offsets (int32) and the values they index
                        values = array.values
                        positions[name] = (array.buffers()[1].address - base + 4 * array.offset,
                                           values.buffers()[1].address - base + values.type.bit_width // 8 * values.offset)
                    elif pa.types.is_integer(array.type):
                        positions[name] = (array.buffers()[1].address - base + array.type.bit_width // 8 * array.offset,
                                           array.type.bit_width)
                if batch.num_rows:
                    self.batches.append((len(self.paths), batch.num_rows, positions))
            mm.close()
            self.paths.append(path)
        self.starts = np.cumsum([0] + [n for _, n, _ in self.batches])
        if ds._indices is not None or not files or int(self.starts[-1]) != len(ds):
            raise ValueError("ShardedRows reads a dataset's own Arrow files: a dataset loaded from them, "
                             "without an indices mapping")
        self._open: dict[int, int] = {}
        self.loaded: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        if self.names and self._id_bytes() <= self.IN_MEMORY_BYTES:  # small: every batch's arrays in memory
            self.loaded = {name: [self._list_arrays(b, name) for b in range(len(self.batches))] for name in self.names}

    def _id_bytes(self) -> int:
        """The bytes of the id-list columns' offsets and values (read from each batch's last offset)."""
        total = 0
        for path, n, positions in self.batches:
            for name in self.names:
                offsets_at, _ = positions[name]
                first = np.frombuffer(os.pread(self._fd(path), 4, offsets_at), np.int32)[0]
                last = np.frombuffer(os.pread(self._fd(path), 4, offsets_at + 4 * n), np.int32)[0]
                total += 4 * (n + 1) + 4 * int(last - first)
        return total

    def _list_arrays(self, b: int, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Batch b's offsets [n + 1] (from 0) and values of column `name`, read whole."""
        path, n, positions = self.batches[b]
        offsets_at, values_at = positions[name]
        fd = self._fd(path)
        offsets = np.frombuffer(os.pread(fd, 4 * (n + 1), offsets_at), np.int32)
        values = np.frombuffer(os.pread(fd, 4 * int(offsets[-1] - offsets[0]), values_at + 4 * int(offsets[0])), np.int32)
        return offsets - offsets[0], values

    def _fd(self, k: int) -> int:
        fd = self._open.pop(k, None)
        if fd is None:
            if len(self._open) >= self.MAX_OPEN:
                os.close(self._open.pop(next(iter(self._open))))
            fd = os.open(self.paths[k], os.O_RDONLY)
        self._open[k] = fd  # the most recently used last
        return fd

    def __call__(self, indices: Sequence[int]) -> tuple[list[list[int]], ...]:
        """The id lists of rows `indices`, one list per column of `columns`."""
        idx = np.asarray(indices, dtype=np.int64)
        which = np.searchsorted(self.starts, idx, side="right") - 1
        local = (idx - self.starts[which]).tolist()
        out = []
        for name in self.names:
            rows = []
            if name in self.loaded:
                arrays = self.loaded[name]
                for b, i in zip(which.tolist(), local):
                    offsets, values = arrays[b]
                    rows.append(values[offsets[i]:offsets[i + 1]].tolist())
                out.append(rows)
                continue
            for b, i in zip(which.tolist(), local):
                path, _, positions = self.batches[b]
                fd, (offsets_at, values_at) = self._fd(path), positions[name]
                start, end = np.frombuffer(os.pread(fd, 8, offsets_at + 4 * i), dtype=np.int32).tolist()
                rows.append(np.frombuffer(os.pread(fd, 4 * (end - start), values_at + 4 * start), np.int32).tolist()
                            if end > start else [])
            out.append(rows)
        return tuple(out)

    def column(self, name: str) -> np.ndarray:
        """A whole integer column [N], read into memory in its own type."""
        parts = []
        for path, n, positions in self.batches:
            at, bits = positions[name]
            parts.append(np.frombuffer(os.pread(self._fd(path), n * bits // 8, at), dtype=f"int{bits}"))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)

    def __len__(self) -> int:
        return int(self.starts[-1])

    def close(self) -> None:
        for fd in self._open.values():
            os.close(fd)
        self._open.clear()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit `os` may be gone; the descriptors go with the process
            pass


def pair_lengths(ds: datasets.Dataset) -> tuple[np.ndarray, np.ndarray]:
    """(src_len, tgt_len) of every row as int32 arrays [N], read from the shards (`ShardedRows.column`)."""
    reader = ShardedRows(ds, ())
    try:
        return reader.column("src_len").astype(np.int32, copy=False), reader.column("tgt_len").astype(np.int32, copy=False)
    finally:
        reader.close()


def sample_sentences(blocks: Iterable[list[T]], k: int, seed: int = 0) -> list[T]:
    """At most `k` sentences of a stream of lists of sentences, drawn uniformly without replacement
    (reservoir sampling, Li's algorithm L: it jumps from one replacement to the next, so beyond reading
    the stream it costs O(k log(N / k))); every sentence, in order, when there are at most `k`."""
    rng = random.Random(seed)
    sample: list[T] = []
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
