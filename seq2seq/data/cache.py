"""`prepare`: a data config -> tokenizers and ready-to-batch datasets, cached on disk.

Streams train/valid (see `readers`), trains or reuses the tokenizer, tokenizes and cleans (see
`cleaning`) chunk by chunk into memory-mapped Arrow shards (`shards`, in parallel processes for a
large corpus), and caches the result under a key made of the data files' contents, the tokenizer
model bytes and the cleaning settings, so a second run with the same inputs, whatever its output
directory, only maps the Arrow files. Memory stays bounded whatever the corpus's size.

The cache is shared between runs: `data.cache_dir` if set, else `$SEQ2SEQ_CACHE/data`, else
`$XDG_CACHE_HOME/seq2seq/data` (default `~/.cache/seq2seq/data`) (`default_cache_root`). Each entry
is built in a temporary directory and renamed into place when complete, so two runs building the
same entry at once both succeed (the first rename wins) and a killed run leaves no half entry. A
trained tokenizer is cached there too (`tokenizer-<key>`), keyed by the training data and settings.

Several corpora (`data.corpora`) and validation sets (`data.valid_sets`) are each read, tokenized
(their sources starting with their tags' ids, `seq2seq.text.languages`) and cleaned on their own,
then concatenated in the config's order: `PreparedData.corpora` / `valid_sets` say which rows of
`train` / `valid` each one holds. The tokenizer is trained on all corpora together, with the tags
as reserved pieces.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import datasets

from seq2seq.config import ConfigError, DataConfig, to_dict
from seq2seq.text.languages import corpus_prefix, decoder_prefix, reserved_pieces, target_reserved_pieces, valid_prefix
from seq2seq.text.tokenizer import Tokenizer, TokenizerError, TokenizerPair
from seq2seq.config import TokenizerConfig

from seq2seq.data.cleaning import CleaningReport, nothing_kept
from seq2seq.data.terminology import TermSampler
from seq2seq.text.terminology import word_counts
from seq2seq.data.readers import (CHUNK_PAIRS, Chunk, _hash, check_aligned, fingerprint, iter_line_blocks, load_hf,
                                  parallel_chunks, table_chunks)
from seq2seq.data.shards import (PARALLEL_BYTES, ShardJob, available_cores, load_shards, sample_sentences,
                                 write_shards)

logger = logging.getLogger("seq2seq.data")

CACHE_VERSION = 2  # bump when tokenization or cleaning logic changes, to invalidate caches
TOKENIZER_META = "tokenizer.meta.json"


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


@dataclass
class _Split:
    """Where one split comes from, with its content fingerprint and streamed reading."""

    name: str
    cfg: DataConfig
    files: list[str] = field(default_factory=list)
    hf_split: str | None = None
    _hf: datasets.Dataset | None = None

    def describe(self) -> str:
        return " + ".join(self.files) if self.files else f"{self.cfg.hf_dataset} [{self.hf_split}]"

    def fingerprint(self) -> str:
        if self.files:
            return fingerprint(self.files)
        return f"hf:{self.cfg.hf_dataset}:{self.cfg.hf_config}:{self.hf_split}:{self._dataset()._fingerprint}"

    def size_bytes(self) -> int:
        if self.files:
            return sum(Path(f).stat().st_size for f in self.files)
        return int(self._dataset().data.nbytes)

    def _dataset(self) -> datasets.Dataset:
        if self._hf is None:
            cfg = self.cfg
            self._hf = load_hf(cfg.hf_dataset or "", cfg.hf_config, self.hf_split or "", cfg.src_column, cfg.tgt_column)
        return self._hf

    def check(self) -> None:
        """DataError now, not after the tokenizer's training, for two plain files of unequal length."""
        if len(self.files) == 2:
            check_aligned(*self.files)

    def side(self, side: int) -> Iterator[list[str]]:
        """One side's texts (0: sources, 1: targets), stripped (and lowercased if configured), in blocks:
        of a pair of text files only that side's file is read (`chunks` checks that the two align)."""
        if len(self.files) != 2:
            yield from (chunk[side] for chunk in self.chunks())
            return
        for block in iter_line_blocks(self.files[side]):
            yield self._cased([line.strip() for line in block])

    def side_key(self, side: int) -> str:
        """What `side(side)` reads: the file itself for a pair of text files (the same file may be one
        corpus's source and another's target), else this split's side."""
        if len(self.files) == 2:
            return str(Path(self.files[side]).resolve())
        return f"{self.describe()}#{side}"

    def _cased(self, texts: list[str]) -> list[str]:
        """The texts, lowercased if data.lowercase."""
        return [t.lower() for t in texts] if self.cfg.lowercase else texts

    def chunks(self, size: int | None = None) -> Iterator[Chunk]:
        """The raw (source, target) texts in chunks of `size` pairs (default CHUNK_PAIRS; lowercased if
        configured, validation capped at valid_max_sentences)."""
        cfg, size = self.cfg, size or CHUNK_PAIRS
        if len(self.files) == 2:
            chunks = parallel_chunks(*self.files, size=size)
        elif self.files:
            chunks = table_chunks(self.files[0], cfg.src_column, cfg.tgt_column, size=size)
        else:
            chunks = ((b["src"], b["tgt"]) for b in self._dataset().iter(batch_size=size))
        cap = cfg.valid_max_sentences if self.name == "valid" else None
        seen = 0
        for src, tgt in chunks:
            if cap is not None:
                src, tgt = src[:cap - seen], tgt[:cap - seen]
            src, tgt = self._cased(src), self._cased(tgt)
            seen += len(src)
            if src:
                yield src, tgt
            if cap is not None and seen >= cap:
                return


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
    tgt_prefix: list[str] = field(default_factory=list)  # the language tag on the decoder (`decoder_prefix`)
    prefix_ids: list[int] = field(default_factory=list)  # set once the tokenizer is known
    tgt_prefix_ids: list[int] = field(default_factory=list)


def _sources(cfg: DataConfig) -> tuple[list[_Source], list[_Source]]:
    """The training corpora and validation sets of `cfg` (one and at most one without data.corpora
    and data.valid_sets)."""
    train_split, valid_split = _splits(cfg)
    if cfg.corpora:
        train = []
        for c in cfg.corpora:
            files = [c.train] if c.train is not None else [c.train_src or "", c.train_tgt or ""]
            train.append(_Source(_Split("train", cfg, files=files), c.describe(), corpus_prefix(cfg, c), c.weight,
                                 c.src_lang, c.tgt_lang, c.tag, decoder_prefix(cfg, c.tgt_lang)))
    else:
        train = [_Source(train_split, train_split.describe())]
    if cfg.valid_sets:
        valid = [_Source(_Split("valid", cfg, files=[v.src or "", v.tgt or ""]), v.label(i), valid_prefix(cfg, v),
                         src_lang=v.src_lang, tgt_lang=v.tgt_lang, tgt_prefix=decoder_prefix(cfg, v.tgt_lang))
                 for i, v in enumerate(cfg.valid_sets)]
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


def default_cache_root() -> Path:
    """Where prepared data and trained tokenizers are cached unless data.cache_dir says otherwise:
    $SEQ2SEQ_CACHE/data, else $XDG_CACHE_HOME/seq2seq/data, else ~/.cache/seq2seq/data."""
    root = os.environ.get("SEQ2SEQ_CACHE")
    if root:
        return Path(root) / "data"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "seq2seq" / "data"


def _tokenizers(tok_cfg: TokenizerConfig, out_dir: Path, cache_root: Path, train_fp: str, lowercase: bool,
                texts: Callable[[tuple[int, ...]], Iterable[list[str]]], reserved: list[str] | None = None,
                tgt_reserved: list[str] | None = None) -> TokenizerPair:
    """Reuse the tokenizer in out_dir, or in the shared cache, if it was trained with these settings on
    this data, else train (with `reserved` source pieces: language and corpus tags; `tgt_reserved`
    target pieces: language tags on the decoder) on `texts((0,))` (sources) and `texts((1,))` (targets),
    or a joint one on `texts((0, 1))`, streamed as lists of sentences, and cache it."""
    meta = {"version": CACHE_VERSION, "tokenizer": to_dict(tok_cfg), "train_data": train_fp, "lowercase": lowercase}
    if reserved:
        meta["reserved"] = list(reserved)
    if tgt_reserved:
        meta["tgt_reserved"] = list(tgt_reserved)
    meta = json.loads(json.dumps(meta))
    meta_path = out_dir / TOKENIZER_META
    if tok_cfg.src_model is not None:
        pair = TokenizerPair.train(tok_cfg, [], [], out_dir)
        meta_path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        return pair
    shared = cache_root / f"tokenizer-{_hash(meta)[:20]}"
    for directory in (out_dir, shared):
        pair = _cached_tokenizer(directory, meta, tok_cfg.joint)
        if pair is not None:
            logger.info("reusing tokenizer %s in %s", "/".join(pair.files), directory)
            if directory != out_dir:
                pair.save(out_dir)
                meta_path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
            return pair
    t0 = time.perf_counter()
    # At most input_sentence_size sentences (of both sides together, for a joint tokenizer) train it, as
    # SentencePiece would sample them; drawn here, in one pass, so that its retries reuse them.
    size = tok_cfg.input_sentence_size
    if tok_cfg.joint:
        src_texts = sample_sentences(texts((0, 1)), size)
        tgt_texts: list[str] = []
    else:
        src_texts, tgt_texts = sample_sentences(texts((0,)), size), sample_sentences(texts((1,)), size)
    logger.info("training the tokenizer on %s sentences (%.1fs to read them)", f"{len(src_texts) + len(tgt_texts):,}",
                time.perf_counter() - t0)
    pair = TokenizerPair.train(tok_cfg, src_texts, tgt_texts, out_dir, reserved=reserved or (),
                               tgt_reserved=tgt_reserved or ())
    del src_texts, tgt_texts
    _return_freed_memory()
    logger.info("trained %s tokenizer (vocab %d/%d) in %.1fs", "joint" if pair.joint else "separate",
                pair.src.vocab_size, pair.tgt.vocab_size, time.perf_counter() - t0)
    meta_path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    tmp = _temporary(shared)
    pair.save(tmp)
    (tmp / TOKENIZER_META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    _publish(tmp, shared, TOKENIZER_META)
    return pair


def _return_freed_memory() -> None:
    """Hand the heap that SentencePiece's training (~1.4 GB a million sentences) freed back to the
    system, which glibc would keep: training's own peak then does not stack on it."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _cached_tokenizer(directory: Path, meta: dict, joint: bool) -> TokenizerPair | None:
    """The tokenizer saved in `directory` if its meta is `meta`, else None."""
    meta_path = directory / TOKENIZER_META
    if not meta_path.is_file():
        return None
    try:
        pair = TokenizerPair.load(directory) if json.loads(meta_path.read_text(encoding="utf-8")) == meta else None
    except (ValueError, TokenizerError):
        return None
    return pair if pair is not None and pair.joint == joint else None


def _temporary(entry: Path) -> Path:
    """A fresh temporary directory beside `entry` for building it (stale ones of dead processes removed)."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    for stale in entry.parent.glob(f".tmp-{entry.name}-*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    tmp = entry.with_name(f".tmp-{entry.name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _publish(tmp: Path, entry: Path, complete: str) -> None:
    """Rename the finished `tmp` to `entry` (whose file `complete` marks it whole). Another process
    that finished the same entry first wins; an incomplete entry (of an older version) is replaced."""
    if entry.exists() and not (entry / complete).is_file():
        shutil.rmtree(entry, ignore_errors=True)
    try:
        os.replace(tmp, entry)
    except OSError:  # another process finished the same entry first: keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
        if not (entry / complete).is_file():
            raise


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
    train_sources, valid_sources = _sources(cfg)
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
    tokenizers = _tokenizers(tok_cfg, out_dir, cache_root, train_fp, cfg.lowercase, train_texts, reserved,
                             target_reserved_pieces(cfg))
    for source in train_sources + valid_sources:
        source.prefix_ids = _prefix_ids(tokenizers.src, source.prefix, tok_cfg)
        source.tgt_prefix_ids = _prefix_ids(tokenizers.tgt, source.tgt_prefix, tok_cfg, "target")

    settings = {k: v for k, v in to_dict(cfg).items() if k in
                ("src_column", "tgt_column", "max_len", "max_ratio", "lowercase", "valid_max_sentences")}
    if cfg.terminology.on:  # (a plain corpus keeps the key it had)
        settings["terminology"] = to_dict(cfg.terminology)
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
    logger.info("data ready in %.1fs (%s %s)", time.perf_counter() - t0, "cached" if from_cache else "built", entry)
    return PreparedData(tokenizers, train, valid, report, valid_report, key, from_cache, entry, corpora, valid_sets)


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


def _parts(sources: list[_Source], reports: list[dict]) -> list[CorpusPart]:
    """Where each source's rows are in the concatenated split, from the reports `_build_cache` wrote."""
    parts, start = [], 0
    for source, data in zip(sources, reports):
        report = CleaningReport(**data)
        parts.append(CorpusPart(source.name, start, report.kept, report, list(source.prefix), list(source.prefix_ids),
                                source.weight, source.src_lang, source.tgt_lang, source.tag, list(source.tgt_prefix),
                                list(source.tgt_prefix_ids)))
        start += report.kept
    return parts


def _build_cache(entry: Path, train_sources: list[_Source], valid_sources: list[_Source],
                 tokenizers: TokenizerPair, cfg: DataConfig) -> None:
    """Tokenize and clean every corpus and validation set, streamed, into Arrow shards under `entry`,
    each split in the config's order (built in a temporary directory, renamed when complete)."""
    tmp = _temporary(entry)
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
            if cfg.terminology.on:  # a share of the sources annotated with target terms
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
    _publish(tmp, entry, "reports.json")


def _combined(reports: list[CleaningReport], max_len: int, max_ratio: float | None) -> CleaningReport:
    """One report of a source's chunks (a source with no row at all: an empty report)."""
    if not reports:
        return CleaningReport(total=0, kept=0, max_len=max_len, **({"max_ratio": max_ratio} if max_ratio else {}))
    return CleaningReport.combine(reports)
