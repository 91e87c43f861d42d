"""Cleaning: which tokenized training pairs are dropped, and how validation pairs are cut.

A tokenized pair (`seq2seq.data.shards.ShardJob`) has the columns (`FEATURES`)

    src_ids: list[int]  source subword ids followed by EOS (the encoder input)
    tgt_ids: list[int]  target subword ids, no BOS/EOS (the collator adds them)
    src_len: int        len(src_ids)
    tgt_len: int        len(tgt_ids) + 1, the length of the decoder input/output

`keep_mask` says which training pairs to drop (empty, over-long, badly length-ratioed) and counts
each reason; `truncate_ids` keeps every validation pair, cut to `max_len`, so scores cover every
reference. Tagged sources (`seq2seq.text.languages`) start with `n_prefix` tag ids: the counts
given to `keep_mask` leave them out, and `truncate_ids` never cuts them, so a tag never counts
towards max_len or the length ratio.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import datasets
import numpy as np

from seq2seq.text.tokenizer import EOS_ID

from seq2seq.data.readers import DataError

RATIO_EXEMPT_LEN = 5  # pairs whose longer side has at most this many tokens skip the ratio check

FEATURES = datasets.Features(
    {
        "src": datasets.Value("string"),
        "tgt": datasets.Value("string"),
        "src_ids": datasets.List(datasets.Value("int32")),
        "tgt_ids": datasets.List(datasets.Value("int32")),
        "src_len": datasets.Value("int32"),
        "tgt_len": datasets.Value("int32"),
    }
)


@dataclass
class CleaningReport:
    """What cleaning (train) or truncation (valid) did; each dropped pair is counted once,
    under the first of: empty, too_long, bad_ratio."""

    total: int
    kept: int
    empty: int = 0
    too_long: int = 0
    bad_ratio: int = 0
    truncated: int = 0
    max_len: int = 256
    max_ratio: float = 3.0

    def summary(self) -> str:
        text = f"kept {self.kept:,} of {self.total:,} pairs"
        dropped = []
        if self.empty:
            dropped.append(f"{self.empty:,} empty")
        if self.too_long:
            dropped.append(f"{self.too_long:,} over {self.max_len} tokens")
        if self.bad_ratio:
            dropped.append(f"{self.bad_ratio:,} with length ratio > {self.max_ratio}")
        if dropped:
            text += "; dropped " + ", ".join(dropped)
        if self.truncated:
            text += f"; truncated {self.truncated:,} to {self.max_len} tokens"
        return text

    @classmethod
    def combine(cls, reports: Sequence[CleaningReport]) -> CleaningReport:
        """One report of several corpora's (their counts summed; the limits of the first)."""
        counts = {name: sum(getattr(r, name) for r in reports)
                  for name in ("total", "kept", "empty", "too_long", "bad_ratio", "truncated")}
        return cls(**counts, max_len=reports[0].max_len, max_ratio=reports[0].max_ratio)


def keep_mask(src_n: np.ndarray, tgt_n: np.ndarray, max_len: int, max_ratio: float) -> tuple[np.ndarray, CleaningReport]:
    """Which training pairs cleaning keeps, from their subword counts (tags, BOS/EOS not counted):
    shapes [N], [N] -> keep [N] (bool) and the report counting each dropped pair once."""
    longer, shorter = np.maximum(src_n, tgt_n), np.minimum(src_n, tgt_n)
    empty = shorter == 0
    too_long = ~empty & (longer > max_len)
    bad_ratio = ~empty & ~too_long & (longer > RATIO_EXEMPT_LEN) & (longer > max_ratio * shorter)
    keep = ~(empty | too_long | bad_ratio)
    return keep, CleaningReport(
        total=len(keep), kept=int(keep.sum()), empty=int(empty.sum()), too_long=int(too_long.sum()),
        bad_ratio=int(bad_ratio.sum()), max_len=max_len, max_ratio=max_ratio,
    )


def nothing_kept(report: CleaningReport, name: str = "") -> DataError:
    """The error for a corpus that cleaning emptied (naming the corpus `name` where given)."""
    where = f" of {name}" if name else ""
    return DataError(f"cleaning dropped every training pair{where} ({report.summary()}); check the data and "
                     f"data.max_len/max_ratio")


def truncate_ids(src_ids: list[list[int]], tgt_ids: list[list[int]], max_len: int,
                 n_prefix: int = 0) -> tuple[list[list[int]], list[list[int]], CleaningReport]:
    """Cut sources (which keep their `n_prefix` tags, not counted, and their EOS) and targets to
    `max_len` tokens; the report counts the pairs cut."""
    keep = n_prefix + max_len
    n_long = sum(len(s) > keep + 1 or len(t) > max_len for s, t in zip(src_ids, tgt_ids))
    if n_long:
        src_ids = [ids if len(ids) <= keep + 1 else ids[:keep] + [EOS_ID] for ids in src_ids]
        tgt_ids = [ids[:max_len] for ids in tgt_ids]
    return src_ids, tgt_ids, CleaningReport(total=len(src_ids), kept=len(src_ids), truncated=n_long, max_len=max_len)
