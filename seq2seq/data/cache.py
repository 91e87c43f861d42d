"""`prepare`: a data config -> tokenizers and ready-to-batch datasets, cached on disk.

Loads train/valid (see `readers`), trains or reuses the tokenizer, tokenizes and cleans (see
`cleaning`), and caches the result in a cache directory under a key made of the data files'
contents, the tokenizer model bytes and the cleaning settings, so a second run with the same
inputs only loads memory-mapped Arrow files.

Several corpora (`data.corpora`) and validation sets (`data.valid_sets`) are each read, tokenized
(their sources starting with their tags' ids, `seq2seq.text.languages`) and cleaned on their own,
then concatenated in the config's order: `PreparedData.corpora` / `valid_sets` say which rows of
`train` / `valid` each one holds. The tokenizer is trained on all corpora together, with the tags
as reserved pieces.
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

from seq2seq.config import ConfigError, DataConfig, to_dict
from seq2seq.text.languages import corpus_prefix, reserved_pieces, valid_prefix
from seq2seq.text.tokenizer import Tokenizer, TokenizerError, TokenizerPair
from seq2seq.config import TokenizerConfig

from seq2seq.data.cleaning import CleaningReport, clean, tokenize, truncate
from seq2seq.data.readers import _hash, fingerprint, load_hf, read_parallel, read_table

logger = logging.getLogger("seq2seq.data")

CACHE_VERSION = 1  # bump when tokenization or cleaning logic changes, to invalidate caches
TOKENIZER_META = "tokenizer.meta.json"


@dataclass
class CorpusPart:
    """One training corpus or validation set of a prepared split: rows [start, start + size) of
    `PreparedData.train` (or `valid`).

    name: the corpus's files and direction (`CorpusConfig.describe`), or the validation set's label
    ("en-de", `ValidSetConfig.label`). prefix / prefix_ids: the reserved pieces every source starts
    with, and their ids. weight: the corpus's sampling weight (1 for validation sets).
    src_lang / tgt_lang / tag: as configured (None where not named).
    """

    name: str
    start: int
    size: int
    report: CleaningReport
    prefix: list[str] = field(default_factory=list)
    prefix_ids: list[int] = field(default_factory=list)
    weight: float = 1.0
    src_lang: str | None = None
    tgt_lang: str | None = None
    tag: str | None = None

    @property
    def rows(self) -> range:
        return range(self.start, self.start + self.size)


@dataclass
class PreparedData:
    """The result of `prepare`: tokenizers and tokenized splits (see the module docstring).

    corpora: the training corpora, in the config's order (one, covering `train`, without data.corpora);
    valid_sets: the validation sets of data.valid_sets ([] otherwise: `valid` is one set).
    """

    tokenizers: TokenizerPair
    train: datasets.Dataset
    valid: datasets.Dataset | None
    report: CleaningReport
    valid_report: CleaningReport | None
    fingerprint: str  # key of data + tokenizer + settings; equal keys mean equal datasets
    from_cache: bool = False
    cache_path: Path | None = field(default=None, repr=False)
    corpora: list[CorpusPart] = field(default_factory=list)
    valid_sets: list[CorpusPart] = field(default_factory=list)


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


@dataclass
class _Source:
    """One training corpus or validation set to prepare: where it comes from and how it is tagged."""

    split: _Split
    name: str
    prefix: list[str] = field(default_factory=list)
    weight: float = 1.0
    src_lang: str | None = None
    tgt_lang: str | None = None
    tag: str | None = None
    prefix_ids: list[int] = field(default_factory=list)  # set once the tokenizer is known


def _sources(cfg: DataConfig) -> tuple[list[_Source], list[_Source]]:
    """The training corpora and validation sets of `cfg` (one and at most one without data.corpora
    and data.valid_sets)."""
    train_split, valid_split = _splits(cfg)
    if cfg.corpora:
        train = []
        for c in cfg.corpora:
            files = [c.train] if c.train is not None else [c.train_src or "", c.train_tgt or ""]
            train.append(_Source(_Split("train", cfg, files=files), c.describe(), corpus_prefix(cfg, c), c.weight,
                                 c.src_lang, c.tgt_lang, c.tag))
    else:
        train = [_Source(train_split, train_split.describe())]
    if cfg.valid_sets:
        valid = [_Source(_Split("valid", cfg, files=[v.src or "", v.tgt or ""]), v.label(i), valid_prefix(cfg, v),
                         src_lang=v.src_lang, tgt_lang=v.tgt_lang) for i, v in enumerate(cfg.valid_sets)]
    else:
        valid = [_Source(valid_split, "valid")] if valid_split is not None else []
    return train, valid


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
                load_train: Callable[[], datasets.Dataset], reserved: list[str] | None = None) -> TokenizerPair:
    """Reuse the tokenizer in out_dir if it was trained with these settings on this data, else train
    (with `reserved` pieces: language and corpus tags)."""
    meta = {"version": CACHE_VERSION, "tokenizer": to_dict(tok_cfg), "train_data": train_fp, "lowercase": lowercase}
    if reserved:
        meta["reserved"] = list(reserved)
    meta = json.loads(json.dumps(meta))
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
        pair = TokenizerPair.train(tok_cfg, ds["src"][:], ds["tgt"][:], out_dir, reserved=reserved or ())
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
    train_sources, valid_sources = _sources(cfg)
    several = bool(cfg.corpora or cfg.valid_sets)
    train_fps = [s.split.fingerprint() for s in train_sources]
    valid_fps = [s.split.fingerprint() for s in valid_sources]
    train_fp = train_fps[0] if not cfg.corpora else _hash(train_fps)
    valid_fp = (valid_fps[0] if valid_fps else None) if not cfg.valid_sets else _hash(valid_fps)

    def load_train() -> datasets.Dataset:
        parts = [s.split.load() for s in train_sources]
        return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)

    reserved = reserved_pieces(cfg)
    tokenizers = _tokenizers(tok_cfg, out_dir, train_fp, cfg.lowercase, load_train, reserved)
    for source in train_sources + valid_sources:
        source.prefix_ids = _prefix_ids(tokenizers.src, source.prefix, tok_cfg)

    settings = {k: v for k, v in to_dict(cfg).items() if k in
                ("src_column", "tgt_column", "max_len", "max_ratio", "lowercase", "valid_max_sentences")}
    fields = {"version": CACHE_VERSION, "train": train_fp, "valid": valid_fp, "settings": settings,
              "src_model": _model_hash(tokenizers.src), "tgt_model": _model_hash(tokenizers.tgt)}
    if several:
        fields["corpora"] = [[fp, s.prefix_ids] for fp, s in zip(train_fps, train_sources)]
        fields["valid_sets"] = [[s.name, fp, s.prefix_ids] for fp, s in zip(valid_fps, valid_sources)]
    key = _hash(fields)[:20]
    entry = cache_root / f"prepared-{key}"
    from_cache = (entry / "reports.json").is_file()
    if not from_cache:
        _build_cache(entry, key, train_sources, valid_sources, tokenizers, cfg)
    reports = json.loads((entry / "reports.json").read_text(encoding="utf-8"))
    train = datasets.load_from_disk(str(entry / "train"))
    valid = datasets.load_from_disk(str(entry / "valid")) if reports["valid"] is not None else None
    report = CleaningReport(**reports["train"])
    valid_report = CleaningReport(**reports["valid"]) if reports["valid"] is not None else None
    corpora = _parts(train_sources, reports.get("corpora", [reports["train"]]))
    valid_sets = _parts(valid_sources, reports.get("valid_sets", [])) if cfg.valid_sets else []

    if cfg.corpora:
        for i, part in enumerate(corpora):
            logger.info("train corpus %d (%s): %s", i, part.name, part.report.summary())
        logger.info("train (%d corpora): %s", len(corpora), report.summary())
    else:
        logger.info("train (%s): %s", train_sources[0].split.describe(), report.summary())
    if valid_sets:
        for part, source in zip(valid_sets, valid_sources):
            logger.info("valid %s (%s): %s", part.name, source.split.describe(), part.report.summary())
    elif valid_report is not None and valid_sources:
        logger.info("valid (%s): %s", valid_sources[0].split.describe(), valid_report.summary())
    else:
        logger.warning("no validation data configured")
    logger.info("data ready in %.1fs (%s %s)", time.perf_counter() - t0, "cached" if from_cache else "built", entry)
    return PreparedData(tokenizers, train, valid, report, valid_report, key, from_cache, entry, corpora, valid_sets)


def _prefix_ids(tokenizer: Tokenizer, pieces: list[str], tok_cfg: TokenizerConfig) -> list[int]:
    """The ids of a source's tag pieces; ConfigError for a tag the (loaded) tokenizer lacks."""
    ids = []
    for piece in pieces:
        token_id = tokenizer.piece_id(piece)
        if token_id is None:
            raise ConfigError(
                f"the source tokenizer {tok_cfg.src_model or tokenizer.name} has no piece {piece!r}, which "
                f"data.corpora puts on the sources; train it with user_defined_symbols={piece} (or leave "
                f"tokenizer.src_model unset so that training trains one)")
        ids.append(token_id)
    return ids


def _parts(sources: list[_Source], reports: list[dict]) -> list[CorpusPart]:
    """Where each source's rows are in the concatenated split, from the reports `_build_cache` wrote."""
    parts, start = [], 0
    for source, data in zip(sources, reports):
        report = CleaningReport(**data)
        parts.append(CorpusPart(source.name, start, report.kept, report, list(source.prefix), list(source.prefix_ids),
                                source.weight, source.src_lang, source.tgt_lang, source.tag))
        start += report.kept
    return parts


def _build_cache(entry: Path, key: str, train_sources: list[_Source], valid_sources: list[_Source],
                 tokenizers: TokenizerPair, cfg: DataConfig) -> None:
    """Tokenize and clean every corpus and validation set and write them under `entry`, each split
    concatenated in the config's order (atomically, via a temp dir)."""
    parts, corpus_reports = [], []
    for i, source in enumerate(train_sources):
        ids = source.prefix_ids
        fingerprint = f"{key}-train" if len(train_sources) == 1 else f"{key}-train{i}"
        ds, report = clean(tokenize(source.split.load(), tokenizers, new_fingerprint=fingerprint, prefix_ids=ids), cfg,
                           n_prefix=len(ids), name=source.name if cfg.corpora else "")
        parts.append(ds)
        corpus_reports.append(report)
    train = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    report = corpus_reports[0] if len(corpus_reports) == 1 else CleaningReport.combine(corpus_reports)
    valid, valid_report, valid_reports = None, None, []
    if valid_sources:
        parts = []
        for i, source in enumerate(valid_sources):
            ids = source.prefix_ids
            fingerprint = f"{key}-valid" if len(valid_sources) == 1 else f"{key}-valid{i}"
            ds, part_report = truncate(tokenize(source.split.load(), tokenizers, new_fingerprint=fingerprint,
                                                prefix_ids=ids), cfg.max_len, n_prefix=len(ids))
            parts.append(ds)
            valid_reports.append(part_report)
        valid = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
        valid_report = valid_reports[0] if len(valid_reports) == 1 else CleaningReport.combine(valid_reports)
    tmp = entry.with_name(f".tmp-{entry.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    if entry.exists():  # an incomplete entry (its reports.json is written last, inside tmp)
        shutil.rmtree(entry)
    tmp.mkdir(parents=True)
    train.save_to_disk(str(tmp / "train"))
    if valid is not None:
        valid.save_to_disk(str(tmp / "valid"))
    reports = {"train": to_dict(report), "valid": to_dict(valid_report) if valid_report else None,
               "corpora": [to_dict(r) for r in corpus_reports], "valid_sets": [to_dict(r) for r in valid_reports]}
    (tmp / "reports.json").write_text(json.dumps(reports, indent=2) + "\n", encoding="utf-8")
    try:
        os.replace(tmp, entry)
    except OSError:  # another process finished the same entry first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
        if not (entry / "reports.json").is_file():
            raise
