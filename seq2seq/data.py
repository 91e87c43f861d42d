"""Parallel data: reading, tokenizing, cleaning and caching.

Sources (one per split, see `DataConfig`):
  * two aligned plain-text files, one sentence per line, optionally gzipped;
  * one table: `.tsv`, `.csv` or `.jsonl` (optionally gzipped) with source/target columns;
  * a Hugging Face dataset via `datasets.load_dataset` (needs network access the first time,
    then reads the local Hugging Face cache). Rows may hold the two columns directly, or be
    translation-style, `{"translation": {"en": ..., "de": ...}}`, with the language codes
    given as `src_column` / `tgt_column`.

Every reader returns a `datasets.Dataset` with string columns "src" and "tgt". Problems a user
can fix raise `DataError` naming the file and the 1-based line or the column.

`prepare` turns a config into ready-to-batch datasets. Each split gets the columns

    src_ids: list[int]  source subword ids followed by EOS (the encoder input)
    tgt_ids: list[int]  target subword ids, no BOS/EOS (the collator adds them)
    src_len: int        len(src_ids)
    tgt_len: int        len(tgt_ids) + 1, the length of the decoder input/output
    src, tgt: str       the (optionally lowercased) texts

The training split is cleaned (empty pairs, over-long pairs, extreme length ratios) and the
counts are logged. The validation split is kept complete, only truncated to `max_len`, so
scores are computed on every reference. Results are cached in a cache directory under a key
made of the data files' contents, the tokenizer model bytes and the cleaning settings, so a
second run with the same inputs only loads memory-mapped Arrow files.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import datasets
import numpy as np

from seq2seq.config import ConfigError, DataConfig, to_dict  # noqa: F401 - DataConfig re-exported
from seq2seq.tokenizer import EOS_ID, Tokenizer, TokenizerConfig, TokenizerError, TokenizerPair

logger = logging.getLogger(__name__)

CACHE_VERSION = 1  # bump when tokenization or cleaning logic changes, to invalidate caches
RATIO_EXEMPT_LEN = 5  # pairs whose longer side has at most this many tokens skip the ratio check
TOKENIZER_META = "tokenizer.meta.json"

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


class DataError(ValueError):
    """A data problem a user can fix; the message names the file and line (1-based) or column."""


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


def _read_text(path: str | Path) -> str:
    """Whole file (gunzipped if .gz) as strictly decoded UTF-8, BOM dropped, line ends -> \\n.

    A carriage return that is not part of \\r\\n becomes a space, so a stray \\r can never
    split a line and break the alignment of two parallel files.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                raw = f.read()
        else:
            raw = path.read_bytes()
    except (OSError, EOFError) as e:
        raise DataError(f"cannot read {path}: {e}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise DataError(f"{path}, line {line}: invalid UTF-8 at byte {column} of the line ({e.reason})") from None
    return text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", " ")


def _split_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it does not start a new one
    return lines


def read_lines(path: str | Path) -> list[str]:
    """One stripped sentence per line; DataError if the file is missing, not UTF-8 or empty."""
    lines = [line.strip() for line in _split_lines(_read_text(path))]
    if not lines:
        raise DataError(f"{path} is empty")
    return lines


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> datasets.Dataset:
    """Two line-aligned files -> Dataset with columns "src", "tgt"."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise DataError(
            f"parallel files differ in length: {src_path} has {len(src):,} lines but "
            f"{tgt_path} has {len(tgt):,} lines; they must be aligned line by line"
        )
    return datasets.Dataset.from_dict({"src": src, "tgt": tgt})


def _table_kind(path: Path) -> str:
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    kind = suffixes[-1] if suffixes else ""
    if kind not in (".tsv", ".csv", ".jsonl"):
        raise DataError(f"{path}: unsupported table format {kind or '(no suffix)'}; use .tsv, .csv or .jsonl (optionally .gz)")
    return kind


def _missing_column(path: Path, column: str, available: list[str]) -> DataError:
    return DataError(f"{path}: column '{column}' not found; available columns: {', '.join(available)}")


def _read_delimited(path: Path, text: str, delimiter: str, src_column: str, tgt_column: str) -> tuple[list[str], list[str]]:
    """TSV (split on tabs, no quoting) or CSV (RFC 4180 quoting) -> source and target texts.

    The first row is a header when it contains both column names. Otherwise, with the default
    names "src"/"tgt", the file is headerless and columns 0/1 are used; with other names it is
    a header that lacks a column, which is an error listing the columns it has.
    """
    if delimiter == "\t":
        rows = [(i + 1, line.split("\t")) for i, line in enumerate(_split_lines(text))]
    else:
        reader = csv.reader(io.StringIO(text, newline=""))
        rows = [(reader.line_num, fields) for fields in reader]  # line_num: where the row ends
    if not rows:
        raise DataError(f"{path} is empty")
    header = [h.strip() for h in rows[0][1]]
    if src_column in header and tgt_column in header:
        si, ti, rows = header.index(src_column), header.index(tgt_column), rows[1:]
    elif (src_column, tgt_column) == ("src", "tgt") and not ({"src", "tgt"} & set(header)):
        si, ti = 0, 1
    else:
        raise _missing_column(path, src_column if src_column not in header else tgt_column, header)
    need = max(si, ti) + 1
    src, tgt = [], []
    for line_no, fields in rows:
        if fields in ([], [""]):  # blank line: an empty pair, counted (and dropped) by cleaning
            fields = [""] * need
        if len(fields) < need:
            raise DataError(f"{path}, line {line_no}: expected at least {need} columns, found {len(fields)}")
        src.append(fields[si].strip())
        tgt.append(fields[ti].strip())
    if not src:
        raise DataError(f"{path} has a header but no data rows")
    return src, tgt


def _pair_from_row(row: dict[str, Any], src_column: str, tgt_column: str, where: str) -> tuple[Any, Any]:
    """(src, tgt) from a dict row, direct columns or translation-style {"translation": {lang: text}}."""
    if src_column in row and tgt_column in row:
        return row[src_column], row[tgt_column]
    nested = row.get("translation")
    if isinstance(nested, dict) and src_column in nested and tgt_column in nested:
        return nested[src_column], nested[tgt_column]
    available = list(row) + ([f"translation.{k}" for k in nested] if isinstance(nested, dict) else [])
    missing = src_column if src_column not in row and not (isinstance(nested, dict) and src_column in nested) else tgt_column
    raise DataError(f"{where}: column '{missing}' not found; available columns: {', '.join(available)}")


def _as_text(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DataError(f"{where}: expected a string, got {type(value).__name__} {value!r:.60}")
    return value.strip()


def _read_jsonl(path: Path, text: str, src_column: str, tgt_column: str) -> tuple[list[str], list[str]]:
    src, tgt = [], []
    for i, line in enumerate(_split_lines(text), start=1):
        if not line.strip():
            continue
        where = f"{path}, line {i}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{where}: invalid JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}")
        s, t = _pair_from_row(row, src_column, tgt_column, where)
        src.append(_as_text(s, where))
        tgt.append(_as_text(t, where))
    if not src:
        raise DataError(f"{path} is empty")
    return src, tgt


def read_table(path: str | Path, src_column: str = "src", tgt_column: str = "tgt") -> datasets.Dataset:
    """A .tsv/.csv/.jsonl file (optionally .gz) -> Dataset with columns "src", "tgt"."""
    path = Path(path)
    kind = _table_kind(path)
    text = _read_text(path)
    if kind == ".jsonl":
        src, tgt = _read_jsonl(path, text, src_column, tgt_column)
    else:
        src, tgt = _read_delimited(path, text, "\t" if kind == ".tsv" else ",", src_column, tgt_column)
    return datasets.Dataset.from_dict({"src": src, "tgt": tgt})


def hf_pairs(ds: datasets.Dataset, src_column: str, tgt_column: str, source: str = "dataset") -> datasets.Dataset:
    """A Hugging Face dataset -> columns "src", "tgt" (direct columns or translation-style rows)."""
    names = ds.column_names
    if src_column in names and tgt_column in names:
        def pick(batch: dict[str, list]) -> dict[str, list[str]]:
            return {"src": [_as_text(v, source) for v in batch[src_column]],
                    "tgt": [_as_text(v, source) for v in batch[tgt_column]]}
    elif "translation" in names and len(ds) > 0:
        _pair_from_row(ds[0], src_column, tgt_column, source)  # raises, listing the languages, if absent

        def pick(batch: dict[str, list]) -> dict[str, list[str]]:
            rows = batch["translation"]
            return {"src": [_as_text(r.get(src_column), source) for r in rows],
                    "tgt": [_as_text(r.get(tgt_column), source) for r in rows]}
    else:
        missing = src_column if src_column not in names else tgt_column
        raise DataError(f"{source}: column '{missing}' not found; available columns: {', '.join(names)}")
    # An explicit fingerprint: datasets would otherwise hash the closure, which may fall back
    # to a random fingerprint and defeat prepare's cache.
    return ds.map(pick, batched=True, remove_columns=names, desc=f"reading {source}",
                  new_fingerprint=_hash([ds._fingerprint, "pairs", src_column, tgt_column])[:32])


def load_hf(name: str, config: str | None, split: str, src_column: str, tgt_column: str) -> datasets.Dataset:
    """One split of a Hugging Face dataset -> columns "src", "tgt".

    Needs network access unless the dataset is already in the local Hugging Face cache.
    """
    source = f"Hugging Face dataset {name!r}" + (f" ({config})" if config else "") + f", split {split!r}"
    try:
        ds = datasets.load_dataset(name, config, split=split)
    except Exception as e:  # noqa: BLE001 - many failure types (network, unknown split, ...); all get context
        raise DataError(f"cannot load {source}: {e}. Loading from the Hub needs network access.") from e
    return hf_pairs(ds, src_column, tgt_column, source)


def fingerprint(paths: list[str | Path]) -> str:
    """Hex digest of the files' contents (in order): equal for equal data wherever it lives."""
    digest = hashlib.sha256()
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise DataError(f"data file not found: {path}")
        file_hash = hashlib.sha256()
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                file_hash.update(chunk)
        digest.update(file_hash.digest())
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------
# Tokenizing and cleaning
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# prepare
# --------------------------------------------------------------------------------------------


@dataclass
class PreparedData:
    """The result of `prepare`: tokenizers and tokenized splits (see the module docstring)."""

    tokenizers: TokenizerPair
    train: datasets.Dataset
    valid: datasets.Dataset | None
    report: CleaningReport
    valid_report: CleaningReport | None
    fingerprint: str  # key of data + tokenizer + settings; equal keys mean equal datasets
    from_cache: bool = False
    cache_path: Path | None = field(default=None, repr=False)


@dataclass
class _Split:
    """Where one split comes from, with its content fingerprint and lazy loading."""

    name: str
    cfg: DataConfig
    files: list[str] = field(default_factory=list)
    hf_split: str | None = None
    _data: datasets.Dataset | None = None

    def describe(self) -> str:
        return " + ".join(self.files) if self.files else f"{self.cfg.hf_dataset} [{self.hf_split}]"

    def fingerprint(self) -> str:
        if self.files:
            return fingerprint(self.files)
        return f"hf:{self.cfg.hf_dataset}:{self.cfg.hf_config}:{self.hf_split}:{self.load()._fingerprint}"

    def load(self) -> datasets.Dataset:
        """Raw "src"/"tgt" texts (lowercased if configured, validation capped)."""
        if self._data is None:
            cfg = self.cfg
            if len(self.files) == 2:
                ds = read_parallel(*self.files)
            elif self.files:
                ds = read_table(self.files[0], cfg.src_column, cfg.tgt_column)
            else:
                ds = load_hf(cfg.hf_dataset or "", cfg.hf_config, self.hf_split or "", cfg.src_column, cfg.tgt_column)
            if self.name == "valid" and cfg.valid_max_sentences is not None and len(ds) > cfg.valid_max_sentences:
                ds = ds.select(range(cfg.valid_max_sentences))
            if cfg.lowercase:
                ds = ds.map(lambda b: {"src": [s.lower() for s in b["src"]], "tgt": [t.lower() for t in b["tgt"]]},
                            batched=True, new_fingerprint=f"{ds._fingerprint}-lower", desc="lowercasing")
            self._data = ds
        return self._data


def _splits(cfg: DataConfig) -> tuple[_Split, _Split | None]:
    if cfg.train_src is not None:
        train = _Split("train", cfg, files=[cfg.train_src, cfg.train_tgt or ""])
    elif cfg.train is not None:
        train = _Split("train", cfg, files=[cfg.train])
    else:
        train = _Split("train", cfg, hf_split=cfg.hf_train_split)
    if cfg.valid_src is not None:
        valid: _Split | None = _Split("valid", cfg, files=[cfg.valid_src, cfg.valid_tgt or ""])
    elif cfg.valid is not None:
        valid = _Split("valid", cfg, files=[cfg.valid])
    elif cfg.hf_dataset is not None:
        valid = _Split("valid", cfg, hf_split=cfg.hf_valid_split)
    else:
        valid = None
    return train, valid


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def _tokenizers(tok_cfg: TokenizerConfig, out_dir: Path, train_fp: str, lowercase: bool,
                load_train: Callable[[], datasets.Dataset]) -> TokenizerPair:
    """Reuse the tokenizer in out_dir if it was trained with these settings on this data, else train."""
    meta = json.loads(json.dumps(
        {"version": CACHE_VERSION, "tokenizer": to_dict(tok_cfg), "train_data": train_fp, "lowercase": lowercase}
    ))
    meta_path = out_dir / TOKENIZER_META
    if tok_cfg.src_model is None and meta_path.is_file():
        try:
            same = json.loads(meta_path.read_text(encoding="utf-8")) == meta
            pair = TokenizerPair.load(out_dir) if same else None
        except (ValueError, TokenizerError):
            pair = None
        if pair is not None and pair.joint == tok_cfg.joint:
            logger.info("reusing tokenizer %s in %s", "/".join(pair.files), out_dir)
            return pair
    if tok_cfg.src_model is None:
        ds = load_train()
        t0 = time.perf_counter()
        pair = TokenizerPair.train(tok_cfg, ds["src"][:], ds["tgt"][:], out_dir)
        logger.info("trained %s tokenizer (vocab %d/%d) in %.1fs", "joint" if pair.joint else "separate",
                    pair.src.vocab_size, pair.tgt.vocab_size, time.perf_counter() - t0)
    else:
        pair = TokenizerPair.train(tok_cfg, [], [], out_dir)
    meta_path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return pair


def _model_hash(tok: Tokenizer) -> str:
    return hashlib.sha256(tok.model_proto).hexdigest()


def prepare(
    cfg: DataConfig, tok_cfg: TokenizerConfig, out_dir: str | Path, cache_dir: str | Path | None = None
) -> PreparedData:
    """Load train/valid, train or reuse the tokenizer (saved in out_dir), tokenize, clean, cache.

    The cache lives in cfg.cache_dir if set, else `cache_dir`, else out_dir/"cache"; each
    distinct (data, tokenizer, settings) key gets its own subdirectory.
    """
    cfg.validate()
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cache_root = Path(cfg.cache_dir or cache_dir or out_dir / "cache")
    train_split, valid_split = _splits(cfg)
    train_fp = train_split.fingerprint()
    valid_fp = valid_split.fingerprint() if valid_split else None
    tokenizers = _tokenizers(tok_cfg, out_dir, train_fp, cfg.lowercase, train_split.load)

    settings = {k: v for k, v in to_dict(cfg).items() if k in
                ("src_column", "tgt_column", "max_len", "max_ratio", "lowercase", "valid_max_sentences")}
    key = _hash({"version": CACHE_VERSION, "train": train_fp, "valid": valid_fp, "settings": settings,
                 "src_model": _model_hash(tokenizers.src), "tgt_model": _model_hash(tokenizers.tgt)})[:20]
    entry = cache_root / f"prepared-{key}"
    from_cache = (entry / "reports.json").is_file()
    if not from_cache:
        _build_cache(entry, key, train_split, valid_split, tokenizers, cfg)
    reports = json.loads((entry / "reports.json").read_text(encoding="utf-8"))
    train = datasets.load_from_disk(str(entry / "train"))
    valid = datasets.load_from_disk(str(entry / "valid")) if reports["valid"] is not None else None
    report = CleaningReport(**reports["train"])
    valid_report = CleaningReport(**reports["valid"]) if reports["valid"] is not None else None

    logger.info("train (%s): %s", train_split.describe(), report.summary())
    if valid_report is not None and valid_split is not None:
        logger.info("valid (%s): %s", valid_split.describe(), valid_report.summary())
    else:
        logger.warning("no validation data configured")
    logger.info("data ready in %.1fs (%s %s)", time.perf_counter() - t0, "cached" if from_cache else "built", entry)
    return PreparedData(tokenizers, train, valid, report, valid_report, key, from_cache, entry)


def _build_cache(entry: Path, key: str, train_split: _Split, valid_split: _Split | None,
                 tokenizers: TokenizerPair, cfg: DataConfig) -> None:
    """Tokenize and clean both splits and write them under `entry` (atomically, via a temp dir)."""
    train, report = clean(tokenize(train_split.load(), tokenizers, new_fingerprint=f"{key}-train"), cfg)
    valid, valid_report = None, None
    if valid_split is not None:
        valid, valid_report = truncate(tokenize(valid_split.load(), tokenizers, new_fingerprint=f"{key}-valid"), cfg.max_len)
    tmp = entry.with_name(f".tmp-{entry.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    if entry.exists():  # an incomplete entry (its reports.json is written last, inside tmp)
        shutil.rmtree(entry)
    tmp.mkdir(parents=True)
    train.save_to_disk(str(tmp / "train"))
    if valid is not None:
        valid.save_to_disk(str(tmp / "valid"))
    reports = {"train": to_dict(report), "valid": to_dict(valid_report) if valid_report else None}
    (tmp / "reports.json").write_text(json.dumps(reports, indent=2) + "\n", encoding="utf-8")
    try:
        os.replace(tmp, entry)
    except OSError:  # another process finished the same entry first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
        if not (entry / "reports.json").is_file():
            raise
