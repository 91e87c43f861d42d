"""Where each training corpus and validation set of a data config comes from: a `Split` (two aligned
text files, a table or a Hugging Face split; fingerprinted, sized and streamed in chunks), tagged as a
`Source` (its prefix pieces, weight and languages); `corpora_and_valid_sets` lists them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import datasets

from seq2seq.config import DataConfig
from seq2seq.text.languages import corpus_prefix, decoder_prefix, valid_prefix

from seq2seq.data.readers import (CHUNK_PAIRS, Chunk, check_aligned, fingerprint, iter_line_blocks, load_hf,
                                  parallel_chunks, table_chunks)


@dataclass
class Split:
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
            chunks = parallel_chunks(self.files[0], self.files[1], size=size)
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
class Source:
    """One training corpus or validation set to prepare: where it comes from and how it is tagged."""

    split: Split
    name: str
    prefix: list[str] = field(default_factory=list)
    weight: float = 1.0
    src_lang: str | None = None
    tgt_lang: str | None = None
    tag: str | None = None
    tgt_prefix: list[str] = field(default_factory=list)  # the language tag on the decoder (`decoder_prefix`)
    prefix_ids: list[int] = field(default_factory=list)  # set once the tokenizer is known
    tgt_prefix_ids: list[int] = field(default_factory=list)


def corpora_and_valid_sets(cfg: DataConfig) -> tuple[list[Source], list[Source]]:
    """The training corpora and validation sets of `cfg` (one and at most one without data.corpora
    and data.valid_sets)."""
    train_split, valid_split = _splits(cfg)
    if cfg.corpora:
        train = []
        for c in cfg.corpora:
            files = [c.train] if c.train is not None else [c.train_src or "", c.train_tgt or ""]
            train.append(Source(Split("train", cfg, files=files), c.describe(), corpus_prefix(cfg, c), c.weight,
                                c.src_lang, c.tgt_lang, c.tag, decoder_prefix(cfg, c.tgt_lang)))
    else:
        train = [Source(train_split, train_split.describe())]
    if cfg.valid_sets:
        valid = [Source(Split("valid", cfg, files=[v.src or "", v.tgt or ""]), v.label(i), valid_prefix(cfg, v),
                        src_lang=v.src_lang, tgt_lang=v.tgt_lang, tgt_prefix=decoder_prefix(cfg, v.tgt_lang))
                 for i, v in enumerate(cfg.valid_sets)]
    else:
        valid = [Source(valid_split, "valid")] if valid_split is not None else []
    return train, valid


def _splits(cfg: DataConfig) -> tuple[Split, Split | None]:
    if cfg.train_src is not None:
        train = Split("train", cfg, files=[cfg.train_src, cfg.train_tgt or ""])
    elif cfg.train is not None:
        train = Split("train", cfg, files=[cfg.train])
    else:
        train = Split("train", cfg, hf_split=cfg.hf_train_split)
    if cfg.valid_src is not None:
        valid: Split | None = Split("valid", cfg, files=[cfg.valid_src, cfg.valid_tgt or ""])
    elif cfg.valid is not None:
        valid = Split("valid", cfg, files=[cfg.valid])
    elif cfg.hf_dataset is not None:
        valid = Split("valid", cfg, hf_split=cfg.hf_valid_split)
    else:
        valid = None
    return train, valid
