"""Batches: collation of rows into padded tensors, and token-bounded length-bucketed sampling.

A `Batch` carries whatever the encoder takes as `src` (for text a LongTensor [B, S] of ids
padded with PAD_ID; other modalities may put image/audio tensors or a dict of tensors there)
and the decoder's teacher-forcing pair built by `make_target`:

    tgt_in  = [BOS, y1, ..., yn, PAD...]   LongTensor [B, T]
    tgt_out = [y1, ..., yn, EOS, PAD...]   LongTensor [B, T]

`TokenBatchSampler` groups dataset rows of similar length so that each batch's padded size,
max(length) * rows, stays within `max_tokens` on both the source and the target side. It is
deterministic for a given seed and epoch and can resume mid-epoch from its `state_dict`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from seq2seq.text.tokenizer import BOS_ID, EOS_ID, PAD_ID
from seq2seq.model.encoders.base import pad_sequences


@dataclass
class Batch:
    """One training/evaluation batch.

    src: encoder input; for text a LongTensor [B, S] padded with PAD_ID.
    tgt_in: LongTensor [B, T], BOS + target ids, padded.
    tgt_out: LongTensor [B, T], target ids + EOS, padded (the labels).
    n_tgt_tokens: number of non-pad positions in tgt_out.
    indices: the dataset row of each batch entry, length B.
    """

    src: Any
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    n_tgt_tokens: int
    indices: list[int]

    def __len__(self) -> int:
        return len(self.indices)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """A copy with every tensor (also those inside a dict/list/dataclass `src`) on `device`."""
        return dataclasses.replace(self, src=to_device(self.src, device, non_blocking),
                                   tgt_in=self.tgt_in.to(device, non_blocking=non_blocking),
                                   tgt_out=self.tgt_out.to(device, non_blocking=non_blocking))


def to_device(x: Any, device: torch.device | str, non_blocking: bool = False) -> Any:
    """`x` with every tensor in it (inside dicts, lists, tuples and dataclasses too) moved to `device`."""
    if isinstance(x, torch.Tensor):
        return x.to(device, non_blocking=non_blocking)
    if isinstance(x, dict):
        return {k: to_device(v, device, non_blocking) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(to_device(v, device, non_blocking) for v in x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return dataclasses.replace(x, **{f.name: to_device(getattr(x, f.name), device, non_blocking)
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
    tgt_ids: Sequence[Sequence[int]], pad_id: int = PAD_ID, bos_id: int = BOS_ID, eos_id: int = EOS_ID
) -> tuple[torch.Tensor, torch.Tensor]:
    """Target id lists (no BOS/EOS) -> (tgt_in, tgt_out), both LongTensor [B, max len + 1]."""
    tgt_in = pad_sequences([[bos_id, *map(int, t)] for t in tgt_ids], pad_id)
    tgt_out = pad_sequences([[*map(int, t), eos_id] for t in tgt_ids], pad_id)
    return tgt_in, tgt_out


def collate_text(
    rows: Sequence[dict[str, Any]], pad_id: int = PAD_ID, bos_id: int = BOS_ID, eos_id: int = EOS_ID
) -> Batch:
    """Rows with "src_ids" (already ending in EOS) and "tgt_ids" -> Batch.

    A row's "index" (as `IndexedRows` adds) becomes its entry in `Batch.indices`; rows without
    one are numbered by position.
    """
    tgt_in, tgt_out = make_target([r["tgt_ids"] for r in rows], pad_id, bos_id, eos_id)
    return Batch(
        src=pad_sequences([r["src_ids"] for r in rows], pad_id),
        tgt_in=tgt_in,
        tgt_out=tgt_out,
        n_tgt_tokens=int((tgt_out != pad_id).sum()),
        indices=[int(r.get("index", i)) for i, r in enumerate(rows)],
    )


class IndexedRows(torch.utils.data.Dataset):
    """A `datasets.Dataset` view for torch's DataLoader: rows carry their "index", and a whole
    batch of rows is fetched with one call (`__getitems__`)."""

    def __init__(self, ds: Any, columns: Sequence[str] = ("src_ids", "tgt_ids")) -> None:
        self.ds = ds.select_columns(list(columns))

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {**self.ds[int(i)], "index": int(i)}

    def __getitems__(self, indices: list[int]) -> list[dict[str, Any]]:
        cols = self.ds[[int(i) for i in indices]]
        return [{**{k: v[j] for k, v in cols.items()}, "index": int(i)} for j, i in enumerate(indices)]


def padding_ratio(batches: Sequence[Sequence[int]], *lengths: Sequence[int]) -> float:
    """Fraction of padded positions over all batches, summed over every length list given
    (e.g. source and target lengths): 1 - real tokens / (rows * max length)."""
    real = padded = 0
    for lens in lengths:
        arr = np.asarray(lens)
        for batch in batches:
            sizes = arr[np.asarray(batch, dtype=np.int64)]
            real += int(sizes.sum())
            padded += int(sizes.max(initial=0)) * len(batch)
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
        src_lengths: Sequence[int],
        tgt_lengths: Sequence[int],
        max_tokens: int,
        shuffle: bool = True,
        seed: int = 0,
    ) -> None:
        if len(src_lengths) != len(tgt_lengths):
            raise ValueError(f"{len(src_lengths)} source lengths but {len(tgt_lengths)} target lengths")
        if max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        self.src_lengths = np.asarray(src_lengths, dtype=np.int64)
        self.tgt_lengths = np.asarray(tgt_lengths, dtype=np.int64)
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.position = 0
        self._cache: tuple[int, list[list[int]]] | None = None

    def set_epoch(self, epoch: int) -> None:
        """Switch to the start of `epoch`; a no-op for the current epoch, so a resumed position
        survives a training loop that calls set_epoch at the top of every epoch."""
        if epoch != self.epoch:
            self.epoch, self.position = epoch, 0

    def batches(self, epoch: int | None = None) -> list[list[int]]:
        """All batches of an epoch (default: the current one), in iteration order."""
        epoch = self.epoch if epoch is None else epoch
        if self._cache is None or self._cache[0] != epoch:
            self._cache = (epoch, self._make_batches(epoch))
        return self._cache[1]

    def lengths(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(source, target) lengths of the rows in `epoch`: the same in every epoch here; a subclass
        may change them (`seq2seq.data.sampling`: a new segmentation of the text each epoch)."""
        return self.src_lengths, self.tgt_lengths

    def _make_batches(self, epoch: int) -> list[list[int]]:
        src_lengths, tgt_lengths = self.lengths(epoch)
        n = len(src_lengths)
        rng = np.random.default_rng(self.seed + epoch)
        tie = rng.permutation(n) if self.shuffle else np.arange(n)
        order = np.lexsort((tie, src_lengths, tgt_lengths))  # last key is the primary one
        batches: list[list[int]] = []
        current: list[int] = []
        max_src = max_tgt = 0
        for i in order.tolist():
            s, t = int(src_lengths[i]), int(tgt_lengths[i])
            rows = len(current) + 1
            if current and (max(max_src, s) * rows > self.max_tokens or max(max_tgt, t) * rows > self.max_tokens):
                batches.append(current)
                current, max_src, max_tgt = [], 0, 0
            current.append(i)
            max_src, max_tgt = max(max_src, s), max(max_tgt, t)
        if current:
            batches.append(current)
        if self.shuffle:
            batches = [batches[j] for j in rng.permutation(len(batches))]
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.batches()
        for k in range(self.position, len(batches)):
            self.position = k + 1  # before yielding: a state_dict() taken now resumes after batch k
            yield list(batches[k])

    def __len__(self) -> int:
        """Batches in the current epoch (the same every epoch unless `lengths` changes)."""
        return len(self.batches())

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])

    def padding_ratio(self, batches: Sequence[Sequence[int]] | None = None) -> float:
        """Padding fraction (source and target together) of `batches`, default this epoch's."""
        return padding_ratio(self.batches() if batches is None else batches, *self.lengths(self.epoch))
