"""The `clean:` section applied by `seq2seq train`: each training corpus's files filtered (`clean_corpus`)
into the data cache before they are read, so that a recipe is one file.

    data = cleaned_data(cfg.data, cfg.clean, workers=2)   # the data section, reading the cleaned files

A corpus is cleaned once per (its files, the clean section): the kept pairs and the report go to
`<cache>/cleaned-<key>/` (written atomically: a run stopped while cleaning leaves nothing there), and a
later run, or another rank, finds them by the key. Validation sets are never cleaned (a score must
cover every reference). A config without `clean:` reads its files as they are: nothing here runs.
The cleaning is logged: the kept share and what each filter removed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from pathlib import Path

from seq2seq.config.clean_section import CleanConfig
from seq2seq.config.data_section import CorpusConfig, DataConfig
from seq2seq.config.schema import ConfigError, to_dict
from seq2seq.data.filters.corpus import clean_corpus
from seq2seq.data.shared_cache import default_cache_root
from seq2seq.storage.atomic import write_json_atomic

log = logging.getLogger(__name__)

CLEAN_VERSION = 1  # bump when the filters change what they keep


def cleaned_data(data: DataConfig, clean: CleanConfig, workers: int = 1) -> DataConfig:
    """`data` with each training corpus's files replaced by its cleaned files (cleaned here where the
    cache does not hold them yet). ConfigError for training data that is not a pair of text files."""
    if data.hf_dataset is not None or data.train is not None:
        raise ConfigError("clean: filters a pair of text files (data.train_src + data.train_tgt, or data.corpora "
                          "with train_src + train_tgt); run `seq2seq clean` on this data first, or drop clean:")
    root = Path(data.cache_dir or default_cache_root())
    if data.corpora:
        corpora = []
        for i, corpus in enumerate(data.corpora):
            if corpus.train_src is None or corpus.train_tgt is None:
                raise ConfigError(f"clean: filters pairs of text files; data.corpora[{i}] is a table ({corpus.train})")
            src, tgt = _cleaned(corpus.train_src, corpus.train_tgt, _languages(clean, corpus), root, workers)
            corpora.append(dataclasses.replace(corpus, train_src=src, train_tgt=tgt))
        return dataclasses.replace(data, corpora=corpora)
    assert data.train_src is not None and data.train_tgt is not None  # (DataConfig says one of its forms is given)
    src, tgt = _cleaned(data.train_src, data.train_tgt, clean, root, workers)
    return dataclasses.replace(data, train_src=src, train_tgt=tgt)


def _languages(clean: CleanConfig, corpus: CorpusConfig) -> CleanConfig:
    """The section with a corpus's own languages where it names them (a multilingual mix)."""
    return dataclasses.replace(clean, src_lang=corpus.src_lang or clean.src_lang,
                               tgt_lang=corpus.tgt_lang or clean.tgt_lang)


def _file_key(path: str) -> list[object]:
    stat = os.stat(path)
    return [str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns]


def _cleaned(src: str, tgt: str, clean: CleanConfig, root: Path, workers: int) -> tuple[str, str]:
    """The cleaned files of one corpus (made where the cache lacks them)."""
    fields = {"version": CLEAN_VERSION, "src": _file_key(src), "tgt": _file_key(tgt), "clean": to_dict(clean)}
    key = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:20]
    entry = root / f"cleaned-{key}"
    out_src, out_tgt, report_path = entry / "train.src.gz", entry / "train.tgt.gz", entry / "report.json"
    if report_path.is_file():
        log.info("clean: %s + %s cleaned before (%s)", src, tgt, entry)
        return str(out_src), str(out_tgt)
    entry.mkdir(parents=True, exist_ok=True)
    report = clean_corpus(src, tgt, str(out_src), str(out_tgt), clean, workers=workers)
    write_json_atomic(report_path, {"src": src, "tgt": tgt, **report.as_json(), "config": to_dict(clean)})
    log.info("clean: %s + %s: %s", src, tgt, report.summary().replace("\n", "; "))
    return str(out_src), str(out_tgt)
