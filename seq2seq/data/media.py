"""Training data for image and audio sources: tables of (file, text) rows -> batches.

    read_source_table(path, cfg, noun)     -> [SourceRow(path, text, where)]   (TSV, CSV, JSONL)
    load_sources(paths, processor, policy)  -> {path: example}, every file read once, up front
    prepare_media(cfg, out_dir)             -> MediaData: target tokenizer, train rows, valid set

Every file is loaded (and so checked) before training starts, so a missing or unreadable file is
reported with its path at once, never mid-epoch: `data.bad_sources: fail` stops with the count
and the first paths, `skip` drops those rows and logs the same. Examples stay in memory as the
compact tensors the modality's `SourceProcessor.load` returns (uint8 images, float32 waveforms).

A validation source with several rows (captions) is decoded once and scored against all of
them; its validation loss uses its first caption.

Training batches may be augmented on the fly (`model.encoder.augment`, docs/augmentation.md):
`collate_media(..., epoch=e, seed=s)` hands each example to `SourceProcessor.collate_augmented` with
its own generator, `example_rng(s, e, row)`, so what a row becomes depends on (seed, epoch, row)
alone: not on the batch it is in, and the same in a resumed run as in an uninterrupted one.
Validation batches are collated without an epoch, never augmented.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from seq2seq.data.batching import Batch, teacher_forced
from seq2seq.config import ConfigError, DataConfig, json_reader
from seq2seq.data import DataError, fingerprint, read_table, read_text
from seq2seq.data.readers import read_jsonl
from seq2seq.model.encoders.sources import SourceError, SourceProcessor
from seq2seq.text.tokenizer import PAD_ID, TokenizerPair
from seq2seq.config import TokenizerConfig

log = logging.getLogger(__name__)

SRC_COLUMNS = ("src", "image", "audio", "path", "file")
TGT_COLUMNS = ("tgt", "caption", "text", "transcript", "sentence")


@dataclass
class SourceRow:
    path: str  # resolved file path
    text: str
    where: str  # "table.tsv, line 3", for messages


# --------------------------------------------------------------------------------------------
# Reading tables
# --------------------------------------------------------------------------------------------


def _columns_of(path: Path) -> list[str]:
    """The header names of a TSV/CSV, or the keys of a JSONL file's first object ([] if none)."""
    first = next((line for line in read_text(path).split("\n") if line.strip()), "")
    if path.name.endswith((".jsonl", ".jsonl.gz")):
        try:
            row = json_reader.loads(first)
        except json.JSONDecodeError:
            return []
        return list(row) if isinstance(row, dict) else []
    return [c.strip() for c in first.split("\t" if ".tsv" in path.suffixes else ",")]


def _pick(wanted: str, defaults: tuple[str, ...], header: list[str]) -> str:
    """The configured column, or (when left at its default) the first conventional name present."""
    if wanted != defaults[0] or wanted in header:
        return wanted
    return next((name for name in defaults if name in header), wanted)


def read_source_table(path: str | Path, cfg: DataConfig, noun: str = "source") -> list[SourceRow]:
    """A table of (file path, text) rows; relative paths resolved against cfg.media_root or the
    table's directory. DataError naming the file and line for missing columns or empty paths."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    header = _columns_of(path)
    src_column = _pick(cfg.src_column, SRC_COLUMNS, header)
    tgt_column = _pick(cfg.tgt_column, TGT_COLUMNS, header)
    if path.name.endswith((".jsonl", ".jsonl.gz")):
        srcs, texts, wheres = read_jsonl(path, read_text(path), src_column, tgt_column, several_targets=True)
    else:
        table = read_table(path, src_column, tgt_column)
        srcs, texts = table["src"], table["tgt"]
        first = 2 if src_column in header else 1  # data rows start after a header line
        wheres = [f"{path}, row {i + first}" for i in range(len(srcs))]
    root = Path(cfg.media_root) if cfg.media_root else path.parent
    rows = []
    for src, text, where in zip(srcs, texts, wheres):
        if not src:
            raise DataError(f"{where}: empty {noun} path")
        file = Path(src).expanduser()
        rows.append(SourceRow(str(file if file.is_absolute() else root / file), text, where))
    return rows


# --------------------------------------------------------------------------------------------
# Loading files
# --------------------------------------------------------------------------------------------


def load_sources(paths: list[str], processor: SourceProcessor, policy: str = "fail", noun: str = "source",
                 desc: str = "loading") -> tuple[dict[str, object], list[str]]:
    """Load each distinct path once: ({path: example}, [messages of the files that failed]).

    policy "fail": raise DataError with the number of bad files, the first messages and the way
    to skip them; "skip": return the failures for the caller to drop and log."""
    examples: dict[str, object] = {}
    bad: list[str] = []
    unique = list(dict.fromkeys(paths))
    for path in tqdm(unique, desc=desc, unit=noun.split()[0], leave=False, disable=None):
        try:
            examples[path] = processor.load(path)
        except SourceError as e:
            bad.append(str(e))
    if bad and policy == "fail":
        shown = "; ".join(bad[:3]) + (f"; ... ({len(bad) - 3} more)" if len(bad) > 3 else "")
        raise DataError(f"{len(bad)} of {len(unique)} {noun}s cannot be used: {shown}. "
                        f"Fix or remove them, or set data.bad_sources=skip to train without them")
    return examples, bad


# --------------------------------------------------------------------------------------------
# prepare
# --------------------------------------------------------------------------------------------


@dataclass
class MediaSplit:
    """Rows of one split: row r uses examples[paths[r]] and target ids tgt_ids[r]."""

    paths: list[str]
    texts: list[str]
    tgt_ids: list[list[int]]
    examples: dict[str, object]

    def __len__(self) -> int:
        return len(self.paths)


@dataclass
class MediaData:
    tokenizers: TokenizerPair
    train: MediaSplit
    valid: MediaSplit | None  # one row per distinct source (its first text)
    valid_references: list[list[str]]  # every text of each valid row's source
    fingerprint: str
    summary: str  # what reading and cleaning kept and dropped


def _load_split(name: str, table: str, cfg: DataConfig, processor: SourceProcessor,
                report: Counter) -> tuple[list[SourceRow], dict[str, object]]:
    noun = processor.kind.noun
    rows = read_source_table(table, cfg, noun)
    examples, bad = load_sources([r.path for r in rows], processor, cfg.bad_sources, noun, f"loading {name}")
    if bad:
        log.warning("%s: skipped %d unusable %s(s) (data.bad_sources=skip): %s", table, len(bad), noun,
                    "; ".join(bad[:3]) + (" ..." if len(bad) > 3 else ""))
        report[f"unreadable {noun}s"] += len(bad)
    kept = [r for r in rows if r.path in examples]
    empty = sum(1 for r in kept if not r.text)
    if empty:
        report[f"empty {name} texts"] += empty
    kept = [r for r in kept if r.text]
    if not kept:
        raise DataError(f"{table}: no usable rows ({len(rows)} read)")
    return kept, examples


def prepare_media(cfg: DataConfig, tok_cfg: TokenizerConfig, processor: SourceProcessor,
                  out_dir: str | Path) -> MediaData:
    """Read and load the train/valid tables, train (or load) the target tokenizer into out_dir,
    tokenize, and drop training rows with more than data.max_len target tokens."""
    kind = processor.kind
    if cfg.train is None:
        raise ConfigError(f"an {kind.name} encoder reads its training data from a table: set data.train "
                          f"(a .tsv/.csv/.jsonl of {kind.noun} path and text)")
    for key in ("train_src", "train_tgt", "valid_src", "valid_tgt", "hf_dataset", "corpora", "valid_sets"):
        if getattr(cfg, key) not in (None, []):
            raise ConfigError(f"data.{key} is for text sources; an {kind.name} encoder reads data.train/data.valid tables")
    report: Counter = Counter()
    train_rows, train_examples = _load_split("train", cfg.train, cfg, processor, report)
    valid_rows: list[SourceRow] = []
    valid_examples: dict[str, object] = {}
    if cfg.valid is not None:
        valid_rows, valid_examples = _load_split("valid", cfg.valid, cfg, processor, report)
    if cfg.lowercase:
        train_rows = [dataclasses.replace(r, text=r.text.lower()) for r in train_rows]
        valid_rows = [dataclasses.replace(r, text=r.text.lower()) for r in valid_rows]

    # A target tokenizer only: trained on the training texts, stored as the model dir's spm.model.
    tok_cfg = dataclasses.replace(tok_cfg, joint=True)
    texts = [r.text for r in train_rows]
    tokenizers = TokenizerPair.train(tok_cfg, [], texts, out_dir)
    ids = tokenizers.tgt.encode(texts)
    keep = [i for i, t in enumerate(ids) if len(t) <= cfg.max_len]
    if len(keep) < len(ids):
        report[f"train texts over data.max_len={cfg.max_len} tokens"] += len(ids) - len(keep)
    train = MediaSplit([train_rows[i].path for i in keep], [texts[i] for i in keep], [ids[i] for i in keep],
                       train_examples)

    valid, references = None, []
    if valid_rows:
        by_source: dict[str, list[str]] = {}
        for r in valid_rows:
            by_source.setdefault(r.path, []).append(r.text)
        paths = list(by_source)
        firsts = [by_source[p][0] for p in paths]
        valid_ids = [t[: cfg.max_len] for t in tokenizers.tgt.encode(firsts)]
        if cfg.valid_max_sentences is not None:
            n = cfg.valid_max_sentences
            paths, firsts, valid_ids = paths[:n], firsts[:n], valid_ids[:n]
        valid = MediaSplit(paths, firsts, valid_ids, valid_examples)
        references = [by_source[p] for p in paths]

    summary = f"{len(train):,} train rows from {len(set(train.paths)):,} {kind.noun}s"
    if report:
        summary += "; dropped " + ", ".join(f"{n:,} {what}" for what, n in report.items())
    files = [cfg.train] + ([cfg.valid] if cfg.valid else [])
    return MediaData(tokenizers, train, valid, references, fingerprint(files), summary)


def example_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The generator that augments training row `index` in `epoch`: a function of these three alone."""
    return np.random.default_rng([seed % 2**63, epoch, index])


def collate_media(split: MediaSplit, processor: SourceProcessor, indices: list[int], pad_id: int = PAD_ID,
                  epoch: int | None = None, seed: int = 0, multiple: int = 1) -> Batch:
    """Rows `indices` of `split` -> Batch(src = processor.collate(examples), tgt_in, tgt_out), the target's
    length padded up to a multiple of `multiple`.

    epoch (training batches): src = processor.collate_augmented(examples, [example_rng(seed, epoch, row)
    for each row]), unchanged where the modality's augmentation is off."""
    examples = [split.examples[split.paths[i]] for i in indices]
    if epoch is None:
        src = processor.collate(examples)
    else:
        src = processor.collate_augmented(examples, [example_rng(seed, epoch, i) for i in indices])
    return teacher_forced(src, [split.tgt_ids[i] for i in indices], indices, pad_id, multiple=multiple)


def source_lengths(split: MediaSplit, processor: SourceProcessor) -> list[int]:
    """Encoder positions of each row's source, for token-bounded batching."""
    per_path = {p: processor.length(x) for p, x in split.examples.items()}
    return [per_path[p] for p in split.paths]
