"""Batches: collation of rows into padded tensors, and token-bounded length-bucketed sampling.

A `Batch` carries whatever the encoder takes as `src` (for text a LongTensor [B, S] of ids
padded with PAD_ID; other modalities may put image/audio tensors or a dict of tensors there)
and the decoder's teacher-forcing pair built by `make_target`:

    tgt_in  = [BOS, y1, ..., yn, PAD...]   LongTensor [B, T]
    tgt_out = [y1, ..., yn, EOS, PAD...]   LongTensor [B, T]

`TokenBatchSampler` groups dataset rows of similar length so that each batch's padded size,
max(length) * rows, stays within `max_tokens` on both the source and the target side. It is
deterministic for a given seed and epoch and can resume mid-epoch from its `state_dict`.

Shapes for a GPU (`multiple` > 1, training.shape_multiple): lengths are padded up to a multiple of
`multiple` and a batch of more rows than `multiple` is cut to a multiple of it (the rest start the next
batch), as fairseq's `required_batch_size_multiple`: tensor cores want dimensions in multiples of 8, and
an epoch then makes a bounded set of batch shapes (`shape_bound`), which kernels that plan or compile
per shape reuse.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, NotRequired, Sequence, TypedDict, TypeVar, cast, overload

import numpy as np
import torch

from seq2seq.text.tokenizer import BOS_ID, EOS_ID, PAD_ID
from seq2seq.model.encoders.text_processor import pad_sequences, round_up

if TYPE_CHECKING:
    import datasets

Lengths = Sequence[int] | np.ndarray  # a length per row: a list, or an integer array


@dataclass
class Batch:
    """One training/evaluation batch.

    src: encoder input; for text a LongTensor [B, S] padded with PAD_ID.
    tgt_in: LongTensor [B, T], BOS + target ids, padded.
    tgt_out: LongTensor [B, T], target ids + EOS, padded (the labels).
    n_tgt_tokens: number of non-pad positions in tgt_out.
    indices: the dataset row of each batch entry, length B.
    target_positions: LongTensor [n_tgt_tokens], the flat positions (in tgt_out.view(-1)) of those
        non-pad entries, found on the host when the batch is made, so that the loss gathers them without
        asking the device which they are (a boolean-mask gather waits for the GPU); None: the loss finds them.
    target_weights: FloatTensor [n_tgt_tokens], the loss weight of each of those tokens (a term's tokens
        weigh more: `seq2seq.data.terminology.term_token_weights`); None: all 1.
    """

    src: object  # what the model's encoder reads (`SourceProcessor.collate`): passed to it as it is
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    n_tgt_tokens: int
    indices: list[int]
    target_positions: torch.Tensor | None = None
    target_weights: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.indices)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """A copy with every tensor (also those inside a dict/list/dataclass `src`) on `device`."""
        return dataclasses.replace(self, src=to_device(self.src, device, non_blocking),
                                   tgt_in=self.tgt_in.to(device, non_blocking=non_blocking),
                                   tgt_out=self.tgt_out.to(device, non_blocking=non_blocking),
                                   target_positions=to_device(self.target_positions, device, non_blocking),
                                   target_weights=to_device(self.target_weights, device, non_blocking))

    def pin_memory(self) -> Batch:
        """A copy with every tensor in page-locked host memory, which a GPU copies from without the host
        waiting (`to(device, non_blocking=True)`)."""
        return dataclasses.replace(self, src=_pinned(self.src), tgt_in=self.tgt_in.pin_memory(),
                                   tgt_out=self.tgt_out.pin_memory(), target_positions=_pinned(self.target_positions),
                                   target_weights=_pinned(self.target_weights))

    @property
    def shape(self) -> tuple[int, ...]:
        """(rows, source length, target length) of a text batch; (rows, target length) of another source."""
        src = self.src
        return (len(self), src.size(1), self.tgt_in.size(1)) if isinstance(src, torch.Tensor) and src.dim() == 2 \
            else (len(self), self.tgt_in.size(1))


T = TypeVar("T")


def _pinned(x: T) -> T:
    """`x` with every tensor in it (inside dicts, lists and tuples too) in page-locked memory: the same
    structure, so of the same type."""
    return cast(T, _pinned_tensors(x))


def _pinned_tensors(x: object) -> object:
    if isinstance(x, torch.Tensor):
        return x.pin_memory()
    if isinstance(x, dict):
        return {k: _pinned_tensors(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_pinned_tensors(v) for v in x)
    return x


def to_device(x: T, device: torch.device | str, non_blocking: bool = False) -> T:
    """`x` with every tensor in it (inside dicts, lists, tuples and dataclasses too) moved to `device`:
    the same structure, so of the same type."""
    return cast(T, _moved(x, device, non_blocking))


def _moved(x: object, device: torch.device | str, non_blocking: bool) -> object:
    if isinstance(x, torch.Tensor):
        return x.to(device, non_blocking=non_blocking)
    if isinstance(x, dict):
        return {k: _moved(v, device, non_blocking) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_moved(v, device, non_blocking) for v in x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return dataclasses.replace(x, **{f.name: _moved(getattr(x, f.name), device, non_blocking)
                                         for f in dataclasses.fields(x) if f.init})
    return x


def length_batches(lengths: dict[int, int], max_tokens: int, max_items: int | None = None) -> Iterator[list[int]]:
    """Inference batches: keys of `lengths` sorted by length (stable), grouped so that
    max length * rows <= max_tokens and rows <= max_items; a longer single item is a batch of its own."""
    batch: list[int] = []
    longest = 0
    for i in sorted(lengths, key=lengths.__getitem__):
        n = lengths[i]
        if batch and (max(longest, n) * (len(batch) + 1) > max_tokens or len(batch) == max_items):
            yield batch
            batch, longest = [], 0
        batch.append(i)
        longest = max(longest, n)
    if batch:
        yield batch


def make_target(
    tgt_ids: Sequence[Sequence[int]], pad_id: int = PAD_ID, bos_id: int = BOS_ID, eos_id: int = EOS_ID,
    multiple: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Target id lists (no BOS/EOS) -> (tgt_in, tgt_out), both LongTensor [B, max len + 1] (the length
    rounded up to a multiple of `multiple`)."""
    tgt_in = pad_sequences([[bos_id, *map(int, t)] for t in tgt_ids], pad_id, multiple)
    tgt_out = pad_sequences([[*map(int, t), eos_id] for t in tgt_ids], pad_id, multiple)
    return tgt_in, tgt_out


def teacher_forced(src: object, tgt_ids: Sequence[Sequence[int]], indices: Sequence[int], pad_id: int = PAD_ID,
                   bos_id: int = BOS_ID, eos_id: int = EOS_ID, multiple: int = 1) -> Batch:
    """A Batch of an encoder input `src` and the rows' target ids: tgt_in/tgt_out (`make_target`), the
    count and the flat positions of the target's real tokens."""
    tgt_in, tgt_out = make_target(tgt_ids, pad_id, bos_id, eos_id, multiple)
    positions = tgt_out.view(-1).ne(pad_id).nonzero().squeeze(1)
    return Batch(src=src, tgt_in=tgt_in, tgt_out=tgt_out, n_tgt_tokens=len(positions), indices=list(indices),
                 target_positions=positions)


class TextRow(TypedDict):
    """A text example as `collate_text` reads it: its source ids (ending in EOS), its target ids, and
    its dataset row (`IndexedRows` adds it)."""

    src_ids: Sequence[int]
    tgt_ids: Sequence[int]
    index: NotRequired[int]


def collate_text(
    rows: Sequence[TextRow], pad_id: int = PAD_ID, bos_id: int = BOS_ID, eos_id: int = EOS_ID,
    multiple: int = 1,
) -> Batch:
    """Rows with "src_ids" (already ending in EOS) and "tgt_ids" -> Batch (lengths padded up to a
    multiple of `multiple`).

    A row's "index" (as `IndexedRows` adds) becomes its entry in `Batch.indices`; rows without
    one are numbered by position.
    """
    return teacher_forced(pad_sequences([r["src_ids"] for r in rows], pad_id, multiple), [r["tgt_ids"] for r in rows],
                          [int(r.get("index", i)) for i, r in enumerate(rows)], pad_id, bos_id, eos_id, multiple)


class IndexedRows(torch.utils.data.Dataset):
    """A `datasets.Dataset` view for torch's DataLoader: rows carry their "index", and a whole
    batch of rows is fetched with one call (`__getitems__`)."""

    def __init__(self, ds: datasets.Dataset) -> None:
        self.ds = ds.select_columns(["src_ids", "tgt_ids"])

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> TextRow:
        row = self.ds[int(i)]
        return TextRow(src_ids=row["src_ids"], tgt_ids=row["tgt_ids"], index=int(i))

    def __getitems__(self, indices: list[int]) -> list[TextRow]:
        cols = self.ds[[int(i) for i in indices]]
        return [TextRow(src_ids=src, tgt_ids=tgt, index=int(i))
                for src, tgt, i in zip(cols["src_ids"], cols["tgt_ids"], indices)]


class PackedBatches(Sequence[list[int]]):
    """An epoch's batches as three arrays rather than a Python list per batch (16M rows would take GBs):
    `rows` [N] holds the row indices batch after batch in packing order; batch k of the iteration
    order is rows[starts[k]:ends[k]]. Indexing gives that batch as a list; equal to any sequence of
    the same lists."""

    def __init__(self, rows: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        self.rows, self.starts, self.ends = rows, starts, ends

    def __len__(self) -> int:
        return len(self.starts)

    @overload
    def __getitem__(self, k: int) -> list[int]: ...
    @overload
    def __getitem__(self, k: slice) -> list[list[int]]: ...
    def __getitem__(self, k: int | slice) -> list[int] | list[list[int]]:
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        return self.rows[self.starts[k]:self.ends[k]].tolist()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and len(self) == len(other) and all(a == b for a, b in zip(self, other))

    def padding_ratio(self, *lengths: np.ndarray, multiple: int = 1) -> float:
        """`padding_ratio` of these batches, computed on the arrays."""
        order = np.argsort(self.starts, kind="stable")
        starts, ends = self.starts[order], self.ends[order]
        real = padded = 0
        for lens in lengths:
            sizes = np.asarray(lens)[self.rows[starts[0]:ends[-1]] if len(starts) else self.rows[:0]]
            real += int(sizes.sum())
            if len(starts):
                longest = -(-np.maximum.reduceat(sizes, starts - starts[0]) // multiple) * multiple
                padded += int((longest * (ends - starts)).sum())
        return 1.0 - real / padded if padded else 0.0


def pack_in_order(src: np.ndarray, tgt: np.ndarray, max_tokens: int, rows_multiple: int = 1) -> np.ndarray:
    """Greedy packing of rows in the order given: batch boundaries [B + 1] such that every batch's
    max(length) * rows <= max_tokens on both sides (a row longer than that alone). Each batch is found
    with array operations over the longest window it could fill, not row by row. With `rows_multiple`
    m, a batch that could take m rows or more takes a multiple of m (the rows left over start the next)."""
    n, p, bounds = len(src), 0, [0]
    while p < n:
        hi = min(n, p + max_tokens // max(int(src[p]), int(tgt[p]), 1) + 1)
        size = np.arange(1, hi - p + 1)
        fits = ((np.maximum.accumulate(src[p:hi]) * size <= max_tokens)
                & (np.maximum.accumulate(tgt[p:hi]) * size <= max_tokens))
        rows = max(int(np.argmin(fits)) if not fits.all() else hi - p, 1)
        if rows >= rows_multiple:
            rows -= rows % rows_multiple
        p += rows
        bounds.append(p)
    return np.asarray(bounds, dtype=np.int64)


def sort_by_length(primary: np.ndarray, secondary: np.ndarray, tie: np.ndarray) -> np.ndarray:
    """The rows ordered by (primary, secondary, tie) (`np.lexsort((tie, secondary, primary))`), as int32
    indices where they fit. One argsort of a combined int64 key where it fits, which takes a third of
    lexsort's time and memory on millions of rows."""
    n = len(primary)
    index_type = np.int32 if n < 2**31 else np.int64
    if n == 0:
        return np.zeros(0, dtype=index_type)
    span_secondary, span_tie = int(secondary.max()) + 1, int(tie.max()) + 1
    if int(primary.min()) < 0 or int(secondary.min()) < 0 or (int(primary.max()) + 1) * span_secondary * span_tie >= 2**63:
        return np.lexsort((tie, secondary, primary)).astype(index_type)
    key = (primary.astype(np.int64) * span_secondary + secondary) * span_tie + tie
    return np.argsort(key, kind="stable").astype(index_type)


def padding_ratio(batches: Sequence[Sequence[int]], *lengths: Lengths, multiple: int = 1) -> float:
    """Fraction of padded positions over all batches, summed over every length list given
    (e.g. source and target lengths): 1 - real tokens / (rows * max length rounded up to `multiple`)."""
    if isinstance(batches, PackedBatches):
        return batches.padding_ratio(*map(np.asarray, lengths), multiple=multiple)
    real = padded = 0
    for lens in lengths:
        arr = np.asarray(lens)
        for batch in batches:
            sizes = arr[np.asarray(batch, dtype=np.int64)]
            real += int(sizes.sum())
            padded += round_up(int(sizes.max(initial=0)), multiple) * len(batch)
    return 1.0 - real / padded if padded else 0.0


class TokenBatchSampler:
    """Yields lists of row indices whose padded size fits `max_tokens` on both sides.

    src_lengths / tgt_lengths: lengths of the tensors each row becomes (for text,
    `src_len` and `tgt_len` from `seq2seq.data`). A batch of rows R satisfies
    max(len[R]) * |R| <= max_tokens for each side; a single row longer than that forms a batch
    of its own.

    Rows are sorted by (tgt_len, src_len) with ties broken randomly, packed greedily into
    batches, and the batch order is shuffled, all with a generator seeded by seed + epoch.
    With shuffle=False rows keep index order within equal lengths and batches stay sorted.
    `multiple` > 1 packs with the lengths the batches will be padded to (rounded up to a multiple of
    it) and cuts batches to a multiple of it in rows (see the module docstring).

    Iterating yields the batches of the current epoch from the current position, so an epoch
    that was iterated to the end yields nothing more: call `set_epoch(epoch + 1)` before each
    new pass, as with torch's DistributedSampler (to replay an epoch,
    `load_state_dict({"epoch": e, "position": 0})`).
    `state_dict()` records (epoch, position = batches already yielded), so `load_state_dict`
    resumes at the exact next batch; `set_epoch` with the current epoch keeps that position.
    When a DataLoader prefetches batches, the sampler runs ahead of training: save the number
    of batches actually consumed as the position instead.
    """

    def __init__(
        self,
        src_lengths: Lengths,
        tgt_lengths: Lengths,
        max_tokens: int,
        shuffle: bool = True,
        seed: int = 0,
        multiple: int = 1,
    ) -> None:
        if len(src_lengths) != len(tgt_lengths):
            raise ValueError(f"{len(src_lengths)} source lengths but {len(tgt_lengths)} target lengths")
        if max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        if multiple <= 0:
            raise ValueError(f"multiple must be positive, got {multiple}")
        self.multiple = multiple
        self.src_lengths = np.asarray(src_lengths, dtype=np.int32)  # 4 bytes a row: 16M rows take 64 MB
        self.tgt_lengths = np.asarray(tgt_lengths, dtype=np.int32)
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.position = 0
        self._cache: tuple[int, PackedBatches] | None = None

    def set_epoch(self, epoch: int) -> None:
        """Switch to the start of `epoch`; a no-op for the current epoch, so a resumed position
        survives a training loop that calls set_epoch at the top of every epoch."""
        if epoch != self.epoch:
            self.epoch, self.position = epoch, 0

    def batches(self, epoch: int | None = None) -> PackedBatches:
        """All batches of an epoch (default: the current one), in iteration order (a sequence of lists)."""
        epoch = self.epoch if epoch is None else epoch
        if self._cache is None or self._cache[0] != epoch:
            self._cache = (epoch, self._make_batches(epoch))
        return self._cache[1]

    def lengths(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(source, target) lengths of the rows in `epoch`: the same in every epoch here; a subclass
        may change them (`seq2seq.data.sampling`: a new segmentation of the text each epoch)."""
        return self.src_lengths, self.tgt_lengths

    def row_lengths(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(source, target) lengths of the rows the batches hold (their indices index them) in `epoch`:
        `lengths` here; a sampler whose batches index other rows than it packs says so
        (`seq2seq.data.mixing`)."""
        return self.lengths(epoch)

    def _make_batches(self, epoch: int) -> PackedBatches:
        src_lengths, tgt_lengths = map(np.asarray, self.lengths(epoch))
        n = len(src_lengths)
        rng = np.random.default_rng(self.seed + epoch)
        tie = rng.permutation(n) if self.shuffle else np.arange(n)
        order = sort_by_length(tgt_lengths, src_lengths, tie)
        del tie
        m = self.multiple
        padded_src, padded_tgt = (src_lengths[order], tgt_lengths[order]) if m == 1 else \
            (-(-src_lengths[order] // m) * m, -(-tgt_lengths[order] // m) * m)
        bounds = pack_in_order(padded_src, padded_tgt, self.max_tokens, rows_multiple=m)
        starts, ends = bounds[:-1], bounds[1:]
        if self.shuffle:
            perm = rng.permutation(len(starts))
            starts, ends = starts[perm], ends[perm]
        return PackedBatches(order, starts, ends)

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.batches()
        for k in range(self.position, len(batches)):
            self.position = k + 1  # before yielding: a state_dict() taken now resumes after batch k
            yield batches[k]

    def __len__(self) -> int:
        """Batches in the current epoch (the same every epoch unless `lengths` changes)."""
        return len(self.batches())

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])

    def padding_ratio(self, batches: Sequence[Sequence[int]] | None = None) -> float:
        """Padding fraction (source and target together) of `batches`, default this epoch's."""
        return padding_ratio(self.batches() if batches is None else batches, *self.row_lengths(self.epoch),
                             multiple=self.multiple)

    def shapes(self, epoch: int | None = None) -> set[tuple[int, int, int]]:
        """The distinct (rows, source length, target length) of an epoch's batches (default: the
        current one's), lengths as padded (rounded up to `multiple`): the shapes training will meet."""
        epoch = self.epoch if epoch is None else epoch
        src, tgt = map(np.asarray, self.row_lengths(epoch))
        m, found = self.multiple, set()
        for batch in self.batches(epoch):
            rows = np.asarray(batch, dtype=np.int64)
            found.add((len(rows), round_up(int(src[rows].max()), m), round_up(int(tgt[rows].max()), m)))
        return found


def shape_bound(max_tokens: int, max_len: int, multiple: int) -> int:
    """At most how many distinct batch shapes (`TokenBatchSampler.shapes`) an epoch of rows at most
    `max_len` long (both sides) can make with lengths padded to a multiple of `multiple` > 1: each
    (source length, target length) pair of multiples, times the row counts a batch of them can have
    (a multiple of `multiple` that fits max_tokens at the longer side, or fewer rows than `multiple`,
    for the last batch of a length)."""
    sizes = range(multiple, round_up(max_len, multiple) + 1, multiple)
    return sum(max_tokens // max(s, t) // multiple + multiple - 1 for s in sizes for t in sizes)
