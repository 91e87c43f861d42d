"""Tokenizing and cleaning: subword ids and lengths, dropping bad training pairs, truncating validation.

`tokenize` adds the columns

    src_ids: list[int]  source subword ids followed by EOS (the encoder input)
    tgt_ids: list[int]  target subword ids, no BOS/EOS (the collator adds them)
    src_len: int        len(src_ids)
    tgt_len: int        len(tgt_ids) + 1, the length of the decoder input/output

`clean` drops empty, over-long and badly length-ratioed training pairs and counts each reason;
`truncate` keeps every validation pair, cut to `max_len`, so scores cover every reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import datasets
import numpy as np

from seq2seq.config import DataConfig
from seq2seq.text.tokenizer import EOS_ID, TokenizerPair

from seq2seq.data.readers import DataError, _hash

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


def tokenize(ds: datasets.Dataset, tokenizers: TokenizerPair, new_fingerprint: str | None = None) -> datasets.Dataset:
    """Add src_ids (ids + EOS), tgt_ids (ids only), src_len, tgt_len (see the module docstring)."""
    src_tok, tgt_tok = tokenizers.src, tokenizers.tgt

    def encode(batch: dict[str, list[str]]) -> dict[str, list]:
        src_ids = [ids + [EOS_ID] for ids in src_tok.encode(batch["src"])]
        tgt_ids = tgt_tok.encode(batch["tgt"])
        return {"src": batch["src"], "tgt": batch["tgt"], "src_ids": src_ids, "tgt_ids": tgt_ids,
                "src_len": [len(x) for x in src_ids], "tgt_len": [len(x) + 1 for x in tgt_ids]}

    return ds.map(encode, batched=True, batch_size=10_000, features=FEATURES, new_fingerprint=new_fingerprint,
                  remove_columns=[c for c in ds.column_names if c not in FEATURES], desc="tokenizing")


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


def _token_counts(ds: datasets.Dataset) -> tuple[np.ndarray, np.ndarray]:
    """Subword tokens per side, BOS/EOS not counted: shapes [N], [N]."""
    view = ds.with_format("numpy", columns=["src_len", "tgt_len"])
    return np.asarray(view["src_len"][:], dtype=np.int64) - 1, np.asarray(view["tgt_len"][:], dtype=np.int64) - 1


def clean(ds: datasets.Dataset, cfg: DataConfig) -> tuple[datasets.Dataset, CleaningReport]:
    """Drop empty, over-long and badly length-ratioed pairs of a `tokenize`d dataset.

    Raises DataError if nothing is left.
    """
    src_n, tgt_n = _token_counts(ds)
    longer, shorter = np.maximum(src_n, tgt_n), np.minimum(src_n, tgt_n)
    empty = shorter == 0
    too_long = ~empty & (longer > cfg.max_len)
    bad_ratio = ~empty & ~too_long & (longer > RATIO_EXEMPT_LEN) & (longer > cfg.max_ratio * shorter)
    keep = ~(empty | too_long | bad_ratio)
    report = CleaningReport(
        total=len(ds), kept=int(keep.sum()), empty=int(empty.sum()), too_long=int(too_long.sum()),
        bad_ratio=int(bad_ratio.sum()), max_len=cfg.max_len, max_ratio=cfg.max_ratio,
    )
    if report.kept == 0:
        raise DataError(f"cleaning dropped every training pair ({report.summary()}); check the data and data.max_len/max_ratio")
    if report.kept < report.total:
        ds = ds.select(np.flatnonzero(keep))
    return ds, report


def truncate(ds: datasets.Dataset, max_len: int) -> tuple[datasets.Dataset, CleaningReport]:
    """Cut both sides of a `tokenize`d dataset to `max_len` tokens (source keeps its EOS)."""
    src_n, tgt_n = _token_counts(ds)
    n_long = int(((src_n > max_len) | (tgt_n > max_len)).sum())
    report = CleaningReport(total=len(ds), kept=len(ds), truncated=n_long, max_len=max_len)
    if n_long:
        def cut(batch: dict[str, list]) -> dict[str, list]:
            src_ids = [ids if len(ids) <= max_len + 1 else ids[:max_len] + [EOS_ID] for ids in batch["src_ids"]]
            tgt_ids = [ids[:max_len] for ids in batch["tgt_ids"]]
            return {"src_ids": src_ids, "tgt_ids": tgt_ids,
                    "src_len": [len(x) for x in src_ids], "tgt_len": [len(x) + 1 for x in tgt_ids]}

        ds = ds.map(cut, batched=True, features=FEATURES, desc="truncating",
                    new_fingerprint=_hash([ds._fingerprint, "truncate", max_len])[:32])
    return ds, report
