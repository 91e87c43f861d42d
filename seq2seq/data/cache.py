"""`prepare`: a data config -> tokenizers and ready-to-batch datasets, cached on disk.

Loads train/valid (see `readers`), trains or reuses the tokenizer, tokenizes and cleans (see
`cleaning`), and caches the result in a cache directory under a key made of the data files'
contents, the tokenizer model bytes and the cleaning settings, so a second run with the same
inputs only loads memory-mapped Arrow files.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import datasets

from seq2seq.config import DataConfig, to_dict
from seq2seq.text.tokenizer import Tokenizer, TokenizerError, TokenizerPair
from seq2seq.config import TokenizerConfig

from seq2seq.data.cleaning import CleaningReport, clean, tokenize, truncate
from seq2seq.data.readers import _hash, fingerprint, load_hf, read_parallel, read_table

logger = logging.getLogger("seq2seq.data")

CACHE_VERSION = 1  # bump when tokenization or cleaning logic changes, to invalidate caches
TOKENIZER_META = "tokenizer.meta.json"


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
