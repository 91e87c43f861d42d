"""`prepare`: a data config -> tokenizers and ready-to-batch datasets, cached on disk.

Streams train/valid (see `readers`), trains or reuses the tokenizer, tokenizes and cleans (see
`cleaning`) chunk by chunk into memory-mapped Arrow shards (`shards`, in parallel processes for a
large corpus), and caches the result under a key made of the data files' contents, the tokenizer
model bytes and the cleaning settings, so a second run with the same inputs, whatever its output
directory, only maps the Arrow files. Memory stays bounded whatever the corpus's size.

The cache is shared between runs: `data.cache_dir` if set, else `$SEQ2SEQ_CACHE/data`, else
`$XDG_CACHE_HOME/seq2seq/data` (default `~/.cache/seq2seq/data`) (`seq2seq.data.shared_cache`). Each
entry is built in a temporary directory and renamed into place when complete, so two runs building the
same entry at once both succeed (the first rename wins) and a killed run leaves no half entry. A
trained tokenizer is cached there too (`tokenizer-<key>`, `seq2seq.data.tokenizer_cache`), keyed by
the training data and settings.

Several corpora (`data.corpora`) and validation sets (`data.valid_sets`) are each read, tokenized
(their sources starting with their tags' ids, `seq2seq.text.languages`) and cleaned on their own,
then concatenated in the config's order: `PreparedData.corpora` / `valid_sets` say which rows of
`train` / `valid` each one holds. The tokenizer is trained on all corpora together, with the tags
as reserved pieces.

What a corpus or validation set is read from (files, a table, a Hugging Face split) and how it is
tagged: `seq2seq.data.splits`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import datasets

from seq2seq.config import ConfigError, DataConfig, to_dict
from seq2seq.storage.atomic import write_text_atomic
from seq2seq.storage.model_dir import ModelDir
from seq2seq.text.lexicon import Lexicon
from seq2seq.text.languages import reserved_pieces, target_reserved_pieces
from seq2seq.text.tokenizer import Tokenizer, TokenizerPair
from seq2seq.config import TokenizerConfig

from seq2seq.data.cleaning import CleaningReport, nothing_kept
from seq2seq.data.terminology import TermSampler
from seq2seq.text.terminology import word_counts
from seq2seq.data.readers import _hash
from seq2seq.data.shards import PARALLEL_BYTES, ShardJob, available_cores, load_shards, sample_sentences, write_shards
from seq2seq.data.shared_cache import CACHE_VERSION, default_cache_root, publish, temporary_dir
from seq2seq.data.splits import Source, corpora_and_valid_sets
from seq2seq.data.tokenizer_cache import train_or_reuse_tokenizers

logger = logging.getLogger("seq2seq.data")

LEXICON_PAIRS = 200_000  # training pairs the word lexicon counts (drawn uniformly from a larger corpus)


@dataclass
class CorpusPart:
    """One training corpus or validation set of a prepared split: rows [start, start + size) of
    `PreparedData.train` (or `valid`).

    name: the corpus's files and direction (`CorpusConfig.describe`), or the validation set's label
    ("en-de", `ValidSetConfig.label`). prefix / prefix_ids: the reserved pieces every source starts
    with, and their ids. weight: the corpus's sampling weight (1 for validation sets).
    src_lang / tgt_lang / tag: as configured (None where not named). tgt_prefix / tgt_prefix_ids: the
    pieces every target starts with (the language tag on the decoder, `decoder_prefix`), and their ids.
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
    tgt_prefix: list[str] = field(default_factory=list)
    tgt_prefix_ids: list[int] = field(default_factory=list)

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


def _model_hash(tok: Tokenizer) -> str:
    return hashlib.sha256(tok.model_proto).hexdigest()


def prepare(
    cfg: DataConfig, tok_cfg: TokenizerConfig, out_dir: str | Path, cache_dir: str | Path | None = None
) -> PreparedData:
    """Stream train/valid, train or reuse the tokenizer (saved in out_dir), tokenize, clean, cache.

    The cache lives in cfg.cache_dir if set, else `cache_dir`, else `default_cache_root()`; each
    distinct (data, tokenizer, settings) key gets its own subdirectory (`prepared-<key>`).
    """
    cfg.validate()
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cache_root = Path(cfg.cache_dir or cache_dir or default_cache_root())
    train_sources, valid_sources = corpora_and_valid_sets(cfg)
    several = bool(cfg.corpora or cfg.valid_sets)
    for source in train_sources + valid_sources:
        source.split.check()
    train_fps = [s.split.fingerprint() for s in train_sources]
    valid_fps = [s.split.fingerprint() for s in valid_sources]
    train_fp = train_fps[0] if not cfg.corpora else _hash(train_fps)
    valid_fp = (valid_fps[0] if valid_fps else None) if not cfg.valid_sets else _hash(valid_fps)

    def train_texts(sides: tuple[int, ...]) -> Iterator[list[str]]:
        """The tokenizer's training text: `sides` (0: sources, 1: targets) of every corpus, a file that
        several corpora share (English as the source of en->de and the target of de->en) read once. A text
        repeated whole skews the vocabulary towards it, and SentencePiece 0.2.2 never finished a corpus
        holding one text three times."""
        seen: set[str] = set()
        for side in sides:
            for source in train_sources:
                if (key := source.split.side_key(side)) not in seen:
                    seen.add(key)
                    yield from source.split.side(side)

    reserved = reserved_pieces(cfg)
    tokenizers = train_or_reuse_tokenizers(tok_cfg, out_dir, cache_root, train_fp, cfg.lowercase, train_texts,
                                           reserved, target_reserved_pieces(cfg))
    for source in train_sources + valid_sources:
        source.prefix_ids = _prefix_ids(tokenizers.src, source.prefix, tok_cfg)
        source.tgt_prefix_ids = _prefix_ids(tokenizers.tgt, source.tgt_prefix, tok_cfg, "target")

    settings = {k: v for k, v in to_dict(cfg).items() if k in
                ("src_column", "tgt_column", "max_len", "max_ratio", "lowercase", "valid_max_sentences")}
    if cfg.terminology.on:  # (a plain corpus keeps the key it had; the loss weight changes no data)
        settings["terminology"] = {k: v for k, v in to_dict(cfg.terminology).items() if k != "loss_weight"}
    fields = {"version": CACHE_VERSION, "train": train_fp, "valid": valid_fp, "settings": settings,
              "src_model": _model_hash(tokenizers.src), "tgt_model": _model_hash(tokenizers.tgt)}
    if several:
        fields["corpora"] = [[fp, s.prefix_ids] + ([s.tgt_prefix_ids] if s.tgt_prefix_ids else [])
                             for fp, s in zip(train_fps, train_sources)]
        fields["valid_sets"] = [[s.name, fp, s.prefix_ids] + ([s.tgt_prefix_ids] if s.tgt_prefix_ids else [])
                                for fp, s in zip(valid_fps, valid_sources)]
    key = _hash(fields)[:20]
    entry = cache_root / f"prepared-{key}"
    from_cache = (entry / "reports.json").is_file()
    if not from_cache:
        _build_cache(entry, train_sources, valid_sources, tokenizers, cfg)
    reports = json.loads((entry / "reports.json").read_text(encoding="utf-8"))
    train = load_shards(entry, reports["train_shards"])
    valid = load_shards(entry, reports["valid_shards"]) if reports["valid"] is not None else None
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
    _write_lexicon(entry, train_sources, out_dir)
    logger.info("data ready in %.1fs (%s %s)", time.perf_counter() - t0, "cached" if from_cache else "built", entry)
    return PreparedData(tokenizers, train, valid, report, valid_report, key, from_cache, entry, corpora, valid_sets)


def _write_lexicon(entry: Path, train_sources: list[Source], out_dir: Path) -> None:
    """The word lexicon of the training pairs (`seq2seq.text.lexicon`) into the model directory: built
    once per cache entry from at most LEXICON_PAIRS pairs drawn uniformly, then copied."""
    cached = entry / ModelDir.LEXICON
    if not cached.is_file():
        t0 = time.perf_counter()
        chunks = (list(zip(*chunk)) for source in train_sources for chunk in source.split.chunks())
        lexicon = Lexicon.build(sample_sentences(chunks, LEXICON_PAIRS))
        write_text_atomic(cached, lexicon.tsv())
        logger.info("word lexicon: %s pairs of words in %.1fs", f"{len(lexicon.scores):,}", time.perf_counter() - t0)
    ModelDir(out_dir).write_lexicon_file(cached)


def _prefix_ids(tokenizer: Tokenizer, pieces: list[str], tok_cfg: TokenizerConfig, side: str = "source") -> list[int]:
    """The ids of a source's (or target's) tag pieces; ConfigError for a tag the (loaded) tokenizer lacks."""
    ids = []
    for piece in pieces:
        token_id = tokenizer.piece_id(piece)
        if token_id is None:
            model = (tok_cfg.src_model if side == "source" or tok_cfg.joint else tok_cfg.tgt_model) or tokenizer.name
            raise ConfigError(
                f"the {side} tokenizer {model} has no piece {piece!r}, which data.corpora puts on the {side}s; "
                f"train it with user_defined_symbols={piece} (or leave tokenizer.src_model unset so that "
                f"training trains one)")
        ids.append(token_id)
    return ids


def _parts(sources: list[Source], reports: list[dict]) -> list[CorpusPart]:
    """Where each source's rows are in the concatenated split, from the reports `_build_cache` wrote."""
    parts, start = [], 0
    for source, data in zip(sources, reports):
        report = CleaningReport(**data)
        parts.append(CorpusPart(source.name, start, report.kept, report, list(source.prefix), list(source.prefix_ids),
                                source.weight, source.src_lang, source.tgt_lang, source.tag, list(source.tgt_prefix),
                                list(source.tgt_prefix_ids)))
        start += report.kept
    return parts


def _build_cache(entry: Path, train_sources: list[Source], valid_sources: list[Source],
                 tokenizers: TokenizerPair, cfg: DataConfig) -> None:
    """Tokenize and clean every corpus and validation set, streamed, into Arrow shards under `entry`,
    each split in the config's order (built in a temporary directory, renamed when complete)."""
    tmp = temporary_dir(entry)
    src_model, tgt_model = tokenizers.src.model_proto, tokenizers.tgt.model_proto
    if tokenizers.joint:
        tgt_model = src_model
    large = sum(s.split.size_bytes() for s in train_sources) >= PARALLEL_BYTES
    workers = min(available_cores(), 8) if large else 1
    try:
        reports: dict = {"train_shards": [], "valid_shards": [], "corpora": [], "valid_sets": []}
        for i, source in enumerate(train_sources):
            job = ShardJob(src_model, tgt_model, tuple(source.prefix_ids), False, cfg.max_len, cfg.max_ratio,
                           tuple(source.tgt_prefix_ids))
            chunks = source.split.chunks()
            if cfg.terminology.on and not cfg.terminology.resample:  # a share of the sources annotated with terms
                sampler = TermSampler(cfg.terminology, word_counts(t for block in source.split.side(1) for t in block))
                chunks = sampler.annotated(chunks, seed=i)
            done = write_shards(chunks, job, tmp, f"train{i}", workers)
            report = _combined([d.report for d in done], cfg.max_len, cfg.max_ratio)
            if report.kept == 0:
                raise nothing_kept(report, source.name if cfg.corpora else "")
            reports["train_shards"] += [d.shard for d in done if d.shard]
            reports["corpora"].append(to_dict(report))
        for i, source in enumerate(valid_sources):
            job = ShardJob(src_model, tgt_model, tuple(source.prefix_ids), True, cfg.max_len, cfg.max_ratio,
                           tuple(source.tgt_prefix_ids))
            done = write_shards(source.split.chunks(), job, tmp, f"valid{i}")
            reports["valid_shards"] += [d.shard for d in done if d.shard]
            reports["valid_sets"].append(to_dict(_combined([d.report for d in done], cfg.max_len, None)))
        train_reports = [CleaningReport(**r) for r in reports["corpora"]]
        reports["train"] = to_dict(CleaningReport.combine(train_reports))
        reports["valid"] = None
        if valid_sources:
            reports["valid"] = to_dict(CleaningReport.combine([CleaningReport(**r) for r in reports["valid_sets"]]))
        (tmp / "reports.json").write_text(json.dumps(reports, indent=2) + "\n", encoding="utf-8")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    publish(tmp, entry, "reports.json")


def _combined(reports: list[CleaningReport], max_len: int, max_ratio: float | None) -> CleaningReport:
    """One report of a source's chunks (a source with no row at all: an empty report)."""
    if not reports:
        if max_ratio:
            return CleaningReport(total=0, kept=0, max_len=max_len, max_ratio=max_ratio)
        return CleaningReport(total=0, kept=0, max_len=max_len)
    return CleaningReport.combine(reports)
