"""The `data` section (`DataConfig`): where the parallel data is and how to clean it; its several
training corpora (`CorpusConfig`) and validation sets (`ValidSetConfig`), the language codes and
reserved pieces they name; the training-time text modifiers (`ModifierConfig`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from seq2seq.config.terminology import TerminologyConfig
from seq2seq.config.checks import require
from seq2seq.config.schema import from_dict


# A language code (what `<2xx>` language tags are made of): "de", "fra", "pt_BR", "zh-Hans", "deu_Latn".
LANGUAGE_CODE = re.compile(r"[A-Za-z]{2,3}(?:[_-][A-Za-z0-9]{1,8})*")
# A corpus tag: one reserved source piece such as "<BT>", no spaces; never a special piece nor a language tag.
CORPUS_TAG = re.compile(r"<[^\s<>]+>")
SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")
VALID_SET_NAME = re.compile(r"[\w.+-]+")


def _check_languages(item: CorpusConfig | ValidSetConfig, key: str) -> None:
    """src_lang and tgt_lang of a corpus or validation set: both or neither, each a language code."""
    require((item.src_lang is None) == (item.tgt_lang is None),
            f"{key}.src_lang and {key}.tgt_lang must be set together")
    for name in ("src_lang", "tgt_lang"):
        value = getattr(item, name)
        require(value is None or bool(LANGUAGE_CODE.fullmatch(value)),
                f"{key}.{name} {value!r} is not a language code (two or three letters, then "
                f"optional -/_ parts: de, fra, pt_BR, zh-Hans)")


def _check_piece(piece: str, key: str) -> None:
    """A corpus tag or other reserved piece: <NAME>, no spaces, neither a special piece nor a language tag."""
    require(isinstance(piece, str) and bool(CORPUS_TAG.fullmatch(piece)) and piece not in SPECIAL_PIECES,
            f"{key} {piece!r} must look like <NAME> (no spaces, not {', '.join(SPECIAL_PIECES)})")
    require(not (piece.startswith("<2") and LANGUAGE_CODE.fullmatch(piece[2:-1])),
            f"{key} {piece!r} is a language tag; the language tag comes from tgt_lang")


@dataclass(frozen=True)
class CorpusConfig:
    """One training corpus of `data.corpora`: its files, languages, sampling weight and tag.

    train_src + train_tgt: two aligned text files (.gz ok), or `train`: one .tsv/.csv/.jsonl table
        (columns data.src_column / data.tgt_column).
    src_lang / tgt_lang: the corpus's language codes (both or neither; either every corpus names its
        languages or none does). Corpora with more than one target language make the model
        multilingual: every source then starts with the reserved piece `<2xx>` of its target language.
    weight: multiplies the corpus's size in the sampling formula (see `DataConfig`); 2 reads the
        corpus as if it were twice as large.
    tag: a reserved source piece such as "<BT>" put on every source of this corpus (after the
        language tag), e.g. to mark back-translated pairs (Caswell et al. 2019).
    """

    train_src: str | None = None
    train_tgt: str | None = None
    train: str | None = None
    src_lang: str | None = None
    tgt_lang: str | None = None
    weight: float = 1.0
    tag: str | None = None

    def check(self, key: str) -> None:
        """ConfigError naming `key` (e.g. "data.corpora[1]") and the field of what is wrong."""
        require((self.train_src is None) == (self.train_tgt is None),
                f"{key}.train_src and {key}.train_tgt must be set together")
        require((self.train_src is None) != (self.train is None),
                f"{key} needs its files: train_src + train_tgt, or train (one table)")
        _check_languages(self, key)
        require(self.weight > 0, f"{key}.weight must be positive, got {self.weight}")
        if self.tag is not None:
            _check_piece(self.tag, f"{key}.tag")

    def describe(self) -> str:
        """"train.en + train.de (en->de, <BT>)": the files, then the direction and tag where set."""
        files = self.train if self.train is not None else f"{self.train_src} + {self.train_tgt}"
        notes = ([f"{self.src_lang}->{self.tgt_lang}"] if self.tgt_lang else []) + ([self.tag] if self.tag else [])
        return files + (f" ({', '.join(notes)})" if notes else "")


@dataclass(frozen=True)
class ValidSetConfig:
    """One validation set of `data.valid_sets`, scored on its own (BLEU per direction).

    src + tgt: two aligned text files. src_lang / tgt_lang: its direction (a multilingual model needs
    tgt_lang, one of its corpora's target languages: the sources get that language's tag).
    name: how the log names its scores (valid_bleu/NAME); default "SRC-TGT" (e.g. "en-de"), or
        "validN" for the N-th set without languages.
    """

    src: str | None = None
    tgt: str | None = None
    src_lang: str | None = None
    tgt_lang: str | None = None
    name: str | None = None

    def check(self, key: str) -> None:
        require(self.src is not None and self.tgt is not None, f"{key} needs both src and tgt (two aligned text files)")
        _check_languages(self, key)
        require(self.name is None or bool(VALID_SET_NAME.fullmatch(self.name)),
                f"{key}.name {self.name!r} may hold only letters, digits and . _ + -")

    def label(self, index: int) -> str:
        """The name its scores are logged under."""
        if self.name is not None:
            return self.name
        return f"{self.src_lang}-{self.tgt_lang}" if self.tgt_lang else f"valid{index}"


MODIFIERS = ("upper", "title", "typos", "merge")  # the fields of ModifierConfig


@dataclass(frozen=True)
class ModifierConfig:
    """`data.modifiers`: the share of training pairs each training-time text modifier changes, drawn anew in
    every epoch (`seq2seq.data.modifiers`; docs/documents.md, "Training-time modifiers"). Each share is a
    fraction in [0, 1], drawn for every pair on its own (a pair may be merged, upper-cased and given typos in
    one epoch); 0, the default, turns the modifier off.

    upper: both sides upper-cased (the target's ß as ẞ).
    title: both sides Title Cased, word by word (each word's first letter a capital, the rest as written);
        a pair drawn for both upper and title is upper-cased.
    typos: the source only: one character-level typo (adjacent letters swapped, one dropped, one repeated, one
        replaced by a keyboard neighbour) in each of 1 or 2 of its words; numbers, URLs and the like kept.
    merge: the pair joined with 1 or 2 other training pairs, one space between the sentences on both sides:
        the model learns to translate lines of several sentences (and is then no longer `sentence_level`).
    """

    upper: float = 0.0
    title: float = 0.0
    typos: float = 0.0
    merge: float = 0.0

    def __post_init__(self) -> None:
        for name in MODIFIERS:
            value = getattr(self, name)
            require(0.0 <= value <= 1.0, f"data.modifiers.{name} must be in [0, 1], got {value}")  # (NaN fails too)

    @property
    def on(self) -> bool:
        """Does any modifier change some pairs?"""
        return any(getattr(self, name) > 0 for name in MODIFIERS)


@dataclass(frozen=True)
class DataConfig:
    """Where the parallel data is and how to clean it.

    Training data: `train_src` + `train_tgt` (aligned text files, optionally .gz), or `train`
    (a .tsv/.csv/.jsonl table), or `hf_dataset` (+ `hf_config`, `hf_train_split`).
    Validation data likewise: `valid_src` + `valid_tgt`, or `valid`, or, with `hf_dataset`,
    `hf_valid_split`. `src_column`/`tgt_column` name the columns of tables and HF datasets;
    a TSV/CSV whose first row lacks both names is read as headerless, columns 0/1 = src/tgt.

    max_len: training pairs with more subword tokens than this on either side (BOS/EOS not
        counted) are dropped; validation pairs are truncated instead.
    max_ratio: training pairs whose longer side has more than max_ratio times the tokens of
        the shorter side are dropped, unless the longer side has at most 5 tokens.
    lowercase: lowercase both sides before training the tokenizer (texts are stored lowercased).
    cache_dir: where tokenized datasets (and trained tokenizers) are cached, shared by every run;
        null: $SEQ2SEQ_CACHE/data, else ~/.cache/seq2seq/data (`seq2seq.data.shared_cache.default_cache_root`).
    valid_max_sentences: keep only the first N validation pairs.

    Image and audio sources (model.encoder.type image/audio): `train` and `valid` are tables of
    (file path, text) rows; `src_column` defaults to the first of src, image, audio, path, file
    that the table has, `tgt_column` to the first of tgt, caption, text, transcript, sentence.
    Several rows may name the same file (several captions); a .jsonl text may also be a list.
    media_root: directory that relative paths are relative to (default: the table's directory).
    bad_sources: a missing or unreadable file fails the run naming its path ("fail"), or is
        skipped with a count and the first paths in the log ("skip").

    Subword regularization (text training pairs only; validation and decoding keep the one best
    segmentation): with `subword_alpha` set, every training pair is segmented anew each epoch,
    sampled by SentencePiece, and the epoch is batched by those lengths (`seq2seq.data.sampling`).
    subword_alpha: unigram tokenizers: the smoothing exponent of Kudo (2018), sampling from
        P(segmentation)^alpha (lower: more varied and longer segmentations; 1: the model's own
        distribution); bpe tokenizers: the merge dropout probability of BPE-dropout.
    subword_nbest: unigram only: sample among the n best segmentations (-1: all of them).
    modifiers: training-time text modifiers (upper, title, typos, merge; `ModifierConfig`): a share of the
        training pairs changed anew each epoch and encoded anew, where subword regularization samples.

    Several corpora (`corpora`, `sampling_temperature`, `valid_sets`): see `CorpusConfig` and
    docs/training.md. languages: the target languages of a model that has no training corpora to name
    them (`import-hf` of a multilingual opus-mt model writes it): language codes, each the `<2xx>` tag
    at the start of a source; any list makes the model multilingual (translation needs one of them).
    A training config names its languages in `corpora` instead: the two are never set together, and
    `target_languages` is the one place that reads either.
    reserved: more reserved source pieces (<NAME>) the trained tokenizer keeps whole, besides the language
    and corpus tags: e.g. "<BLANK>", the filler word of noised back-translation (docs/back-translation.md).
    language_tag: where a multilingual model is given its `<2xx>` target-language tag: "source" (the
        first source piece, Johnson et al. 2017; the encoder knows the target language) or "decoder"
        (the decoder's first target token, forced at decoding and left out of the output, as M2M-100
        and NLLB do; the encoder's output is the same for every target language). docs/training.md
        compares them. "both" (M2M100, NLLB-200 and mBART-50 imported by `import-hf`): the decoder's
        first token is the target language's tag, and every source starts with its own language's tag
        (translation needs the source language too; the languages are both sides' languages).
    """

    train_src: str | None = None
    train_tgt: str | None = None
    train: str | None = None
    valid_src: str | None = None
    valid_tgt: str | None = None
    valid: str | None = None
    src_column: str = "src"
    tgt_column: str = "tgt"
    hf_dataset: str | None = None
    hf_config: str | None = None
    hf_train_split: str = "train"
    hf_valid_split: str = "validation"
    max_len: int = 256
    max_ratio: float = 3.0
    lowercase: bool = False
    cache_dir: str | None = None
    valid_max_sentences: int | None = None
    media_root: str | None = None
    bad_sources: Literal["fail", "skip"] = "fail"
    subword_alpha: float | None = None
    subword_nbest: int = -1
    corpora: list[CorpusConfig] = field(default_factory=list)
    sampling_temperature: float = 1.0
    valid_sets: list[ValidSetConfig] = field(default_factory=list)
    languages: list[str] = field(default_factory=list)
    reserved: list[str] = field(default_factory=list)
    language_tag: Literal["source", "decoder", "both"] = "source"
    terminology: TerminologyConfig = field(default_factory=TerminologyConfig)  # docs/terminology.md
    modifiers: ModifierConfig = field(default_factory=ModifierConfig)  # training-time text modifiers

    def __post_init__(self) -> None:
        # Entries given as dicts become their dataclasses, checked with their keys named. The class is
        # frozen, so the normalised lists are set with object.__setattr__ (the frozen-dataclass idiom).
        object.__setattr__(self, "corpora", [from_dict(CorpusConfig, c, f"data.corpora[{i}].") if isinstance(c, dict)
                                             else c for i, c in enumerate(self.corpora)])
        object.__setattr__(self, "valid_sets", [from_dict(ValidSetConfig, v, f"data.valid_sets[{i}].")
                                                if isinstance(v, dict) else v for i, v in enumerate(self.valid_sets)])
        self._check_corpora()
        require(self.subword_alpha is None or 0.0 < self.subword_alpha <= 1.0,
                f"data.subword_alpha must be in (0, 1] (or null: off), got {self.subword_alpha}")
        for which in ("upper", "title"):  # (upper is named first where both are on)
            require(not (self.lowercase and getattr(self.modifiers, which) > 0),
                    f"data.modifiers.{which} needs cased texts, but data.lowercase is true (the "
                    f"tokenizer is trained on lowercased texts)")
        require(self.subword_nbest == -1 or self.subword_nbest >= 2,
                f"data.subword_nbest must be -1 (all segmentations) or >= 2, got {self.subword_nbest}")
        for split in ("train", "valid"):
            src, tgt = getattr(self, f"{split}_src"), getattr(self, f"{split}_tgt")
            require((src is None) == (tgt is None), f"data.{split}_src and data.{split}_tgt must be set together")
            require(src is None or getattr(self, split) is None,
                    f"set either data.{split}_src + data.{split}_tgt or data.{split}, not both")
        require((self.train_src is None and self.train is None) or self.hf_dataset is None,
                "data.hf_dataset cannot be combined with data.train_src/train_tgt or data.train")
        require(self.max_len > 0, f"data.max_len must be positive, got {self.max_len}")
        require(not self.max_ratio < 1.0, f"data.max_ratio must be at least 1, got {self.max_ratio}")
        require(self.valid_max_sentences is None or self.valid_max_sentences > 0,
                f"data.valid_max_sentences must be positive, got {self.valid_max_sentences}")

    def _check_corpora(self) -> None:
        require(self.sampling_temperature > 0,
                f"data.sampling_temperature must be positive, got {self.sampling_temperature}")
        if self.corpora:
            for single in ("train_src", "train_tgt", "train", "hf_dataset"):
                require(getattr(self, single) is None, f"set either data.corpora or data.{single}, not both")
            for i, corpus in enumerate(self.corpora):
                corpus.check(f"data.corpora[{i}]")
            any_named = any(c.tgt_lang is not None for c in self.corpora)
            for i, corpus in enumerate(self.corpora):
                require(corpus.tgt_lang is not None or not any_named,
                        f"data.corpora[{i}] names no languages (src_lang, tgt_lang); either every corpus "
                        f"names its languages or none does")
        self._check_languages()
        for i, piece in enumerate(self.reserved):
            _check_piece(piece, f"data.reserved[{i}]")
        if self.valid_sets:
            for single in ("valid_src", "valid_tgt", "valid"):
                require(getattr(self, single) is None, f"set either data.valid_sets or data.{single}, not both")
            for i, valid in enumerate(self.valid_sets):
                valid.check(f"data.valid_sets[{i}]")
            labels = [v.label(i) for i, v in enumerate(self.valid_sets)]
            for i, label in enumerate(labels):
                require(label not in labels[:i], f"data.valid_sets[{i}] has the same name as "
                                                 f"data.valid_sets[{labels.index(label)}] ({label!r}); give one a name")
        require(self.language_tag not in ("decoder", "both") or self.multilingual,
                f"data.language_tag: {self.language_tag} is for multilingual models (data.corpora with several "
                "target languages); this config has none to tag")
        if self.multilingual:
            languages = ", ".join(self.target_languages)
            what = ("data.corpora have several target languages" if self.corpora
                    else "data.languages names the target languages")
            require(self.valid_src is None and self.valid is None,
                    f"{what} ({languages}): validate them per "
                    f"direction with data.valid_sets instead of data.valid_src/valid_tgt/valid")
            for i, valid in enumerate(self.valid_sets):
                what = "names no tgt_lang" if valid.tgt_lang is None else f"has tgt_lang {valid.tgt_lang!r}"
                require(valid.tgt_lang in self.target_languages,
                        f"data.valid_sets[{i}] {what}; a multilingual model's validation sets need one "
                        f"of its target languages ({languages})")

    def _check_languages(self) -> None:
        """data.languages: language codes, each once, only in a config without training data."""
        if not self.languages:
            return
        for given in ("corpora", "train_src", "train", "hf_dataset"):
            require(getattr(self, given) in (None, []),
                    f"data.languages is for a model without training data (an imported one); a training "
                    f"config names its target languages in data.corpora (tgt_lang), not with data.{given}")
        for i, lang in enumerate(self.languages):
            require(bool(LANGUAGE_CODE.fullmatch(lang)),
                    f"data.languages[{i}] {lang!r} is not a language code (two or three letters, then "
                    f"optional -/_ parts: de, fra, pt_BR, zh-Hans)")
            require(lang not in self.languages[:i], f"data.languages[{i}] {lang!r} is listed twice")

    @property
    def target_languages(self) -> list[str]:
        """The target languages, sorted: the corpora's, or data.languages (a model without corpora);
        [] without either."""
        if self.languages:
            return sorted(self.languages)
        return sorted({c.tgt_lang for c in self.corpora if c.tgt_lang is not None})

    @property
    def multilingual(self) -> bool:
        """Sources carry a <2xx> language tag: data.corpora have more than one target language, or
        data.languages declares the tagged languages of a model without corpora (even one)."""
        return bool(self.languages) or len(self.target_languages) > 1

    def validate(self) -> None:
        """Raise ConfigError unless some training data is configured."""
        require(self.train_src is not None or self.train is not None or self.hf_dataset is not None
                or bool(self.corpora), "no training data: set data.train_src + data.train_tgt, data.train, "
                                       "data.hf_dataset or data.corpora")
