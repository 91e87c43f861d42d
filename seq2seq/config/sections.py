"""The sections of a config: the model (with its encoder), the data, the tokenizer and training.

Each is a plain dataclass checking its own invariants (ConfigError naming the key); the generic
mapping to and from dicts is `seq2seq.config.schema`, the `decoding` section `seq2seq.config.search`
and the root `Config` `seq2seq.config.root`.

`model.encoder` is polymorphic: `EncoderConfig.config_class` picks the subclass registered for its
`type`. The registry finds the built-in modalities and the entry-point plugins by importing modules
named in `BUILTIN_ENCODER_MODULES` and the `seq2seq.model.encoders` entry-point group, so this layer
never imports the model layer itself.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from seq2seq.config.terminology import TerminologyConfig
from seq2seq.config.schema import ConfigError, from_dict

# The special ids of every tokenizer (pad, unk, bos, eos; `seq2seq.text.tokenizer.SPECIAL_IDS`):
# a vocabulary must be larger than this.
N_SPECIAL_IDS = 4


# --------------------------------------------------------------------------------------------
# The model's config
# --------------------------------------------------------------------------------------------


@dataclass
class EncoderConfig:
    """The `model.encoder` section: which encoder reads the source, and that encoder's settings.

    `type: text` (this class, no settings of its own: the text encoder uses the model's sizes) is the
    default. Each other modality registers a subclass with its own typed fields (see
    `seq2seq.model.encoders`), e.g. `{type: image, image_size: 64, patch_size: 8}`; the section is parsed
    into the subclass its `type` names (`config_class`, which the mapper calls), and unknown keys of that
    type are refused.
    """

    type: str = "text"

    @classmethod
    def config_class(cls, data: dict[str, Any], key: str = "model.encoder") -> type[EncoderConfig]:
        """The class `data` is parsed into: the one registered for its `type` (read from the base class
        only; a subclass asked for by name is kept)."""
        if cls is not EncoderConfig:
            return cls
        return encoder_config_class(data.get("type", "text"), f"{key}.type" if key else "type")

    @property
    def shares_target_embedding(self) -> bool:
        """Can this encoder embed its source with the target embedding (model.share_embeddings)? Only
        the built-in text encoder (this class) can; a subclass (another encoder) cannot."""
        return type(self) is EncoderConfig


_ENCODER_CONFIGS: dict[str, type[EncoderConfig]] = {"text": EncoderConfig}

# Modules whose import registers the built-in encoder types, and the entry-point group through which
# installed packages add theirs (see `seq2seq.model.encoders.base.load_plugins`). Named, not imported
# here: the config layer sits below the model layer.
BUILTIN_ENCODER_MODULES = ("seq2seq.model.encoders",)
ENCODER_ENTRY_POINTS = "seq2seq.model.encoders"


def register_encoder_config(cls: type[EncoderConfig]) -> type[EncoderConfig]:
    """Class decorator: make `cls` (a dataclass whose `type` field defaults to its name) the config of
    `model.encoder.type: <name>`."""
    _ENCODER_CONFIGS[cls().type] = cls
    return cls


def discover_encoder_types(loaded: Iterable[str] | None = None) -> None:
    """Import the built-in encoder modules and the modules installed packages name in the
    `seq2seq.model.encoders` entry-point group, except those of names in `loaded` (default: the
    registered configs); importing them registers their configs (and modalities)."""
    for module in BUILTIN_ENCODER_MODULES:
        importlib.import_module(module)
    from importlib.metadata import entry_points

    skip = set(_ENCODER_CONFIGS if loaded is None else loaded)
    for entry in entry_points(group=ENCODER_ENTRY_POINTS):
        if entry.name not in skip:
            entry.load()


def encoder_types() -> list[str]:
    """Every registered encoder type, built-in and installed."""
    discover_encoder_types()
    return sorted(_ENCODER_CONFIGS)


def encoder_config_class(kind: Any, key: str = "model.encoder.type") -> type[EncoderConfig]:
    """The config dataclass registered for encoder type `kind`; ConfigError naming the choices."""
    if kind not in _ENCODER_CONFIGS:
        discover_encoder_types()
    if kind not in _ENCODER_CONFIGS:
        raise ConfigError(f"config key '{key}': unknown encoder type {kind!r}; choose one of {sorted(_ENCODER_CONFIGS)}")
    return _ENCODER_CONFIGS[kind]


@dataclass
class ModelConfig:
    """Sizes and choices of the encoder-decoder Transformer.

    `layers` sets both stacks; `encoder_layers` / `decoder_layers` override one side.
    `share_embeddings` ties source and target embeddings (needs a shared vocabulary);
    `tie_output` ties the target embedding with the output projection.
    `encoder` picks the source side (text, image, audio; see `EncoderConfig`); everything else in
    this section describes the Transformer and is shared by every modality.
    """

    src_vocab_size: int = 8000
    tgt_vocab_size: int = 8000
    d_model: int = 256
    heads: int = 4
    ffn_dim: int = 1024
    layers: int = 3
    encoder_layers: int | None = None
    decoder_layers: int | None = None
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    activation: typing.Literal["relu", "gelu", "swish"] = "relu"  # swish = SiLU (Marian/opus-mt)
    norm: typing.Literal["pre", "post"] = "pre"
    positions: typing.Literal["sinusoidal", "learned"] = "sinusoidal"
    max_positions: int = 1024
    share_embeddings: bool = False
    tie_output: bool = True
    pad_id: int = 0
    encoder: EncoderConfig = dataclasses.field(default_factory=EncoderConfig)

    def __post_init__(self) -> None:
        check_ranges(self, "model", {
            "src_vocab_size": (1, None), "tgt_vocab_size": (1, None), "d_model": (1, None), "heads": (1, None),
            "ffn_dim": (1, None), "layers": (1, None), "encoder_layers": (0, None), "decoder_layers": (1, None),
            "max_positions": (2, None), "pad_id": (0, None),
        })
        if self.share_embeddings and not self.encoder.shares_target_embedding:
            raise ConfigError(f"model.share_embeddings needs a text encoder (model.encoder.type is {self.encoder.type!r})")
        if self.d_model % self.heads:
            raise ConfigError(f"model.d_model ({self.d_model}) must be divisible by model.heads ({self.heads})")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ConfigError("model.share_embeddings needs src_vocab_size == tgt_vocab_size (a joint vocabulary)")
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"model.{name} must be in [0, 1)")

    def approx_parameters(self) -> int:
        """About how many parameters the Transformer has (weight matrices of its layers and embeddings)."""
        d, f = self.d_model, self.ffn_dim
        embeddings = self.tgt_vocab_size * d * (1 if self.tie_output else 2)
        if not self.share_embeddings:
            embeddings += self.src_vocab_size * d
        return embeddings + self.n_encoder_layers * (4 * d * d + 2 * d * f) + self.n_decoder_layers * (8 * d * d + 2 * d * f)

    @property
    def n_encoder_layers(self) -> int:
        return self.layers if self.encoder_layers is None else self.encoder_layers

    @property
    def n_decoder_layers(self) -> int:
        return self.layers if self.decoder_layers is None else self.decoder_layers


# --------------------------------------------------------------------------------------------
# Data and training sections
# --------------------------------------------------------------------------------------------


# A language code (what `<2xx>` language tags are made of): "de", "fra", "pt_BR", "zh-Hans", "deu_Latn".
LANGUAGE_CODE = re.compile(r"[A-Za-z]{2,3}(?:[_-][A-Za-z0-9]{1,8})*")
# A corpus tag: one reserved source piece such as "<BT>", no spaces; never a special piece nor a language tag.
CORPUS_TAG = re.compile(r"<[^\s<>]+>")
SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")
VALID_SET_NAME = re.compile(r"[\w.+-]+")


def _check_languages(item: Any, key: str) -> None:
    """src_lang and tgt_lang of a corpus or validation set: both or neither, each a language code."""
    if (item.src_lang is None) != (item.tgt_lang is None):
        raise ConfigError(f"{key}.src_lang and {key}.tgt_lang must be set together")
    for name in ("src_lang", "tgt_lang"):
        value = getattr(item, name)
        if value is not None and not LANGUAGE_CODE.fullmatch(value):
            raise ConfigError(f"{key}.{name} {value!r} is not a language code (two or three letters, then "
                              f"optional -/_ parts: de, fra, pt_BR, zh-Hans)")


def _check_piece(piece: str, key: str) -> None:
    """A corpus tag or other reserved piece: <NAME>, no spaces, neither a special piece nor a language tag."""
    if not isinstance(piece, str) or not CORPUS_TAG.fullmatch(piece) or piece in SPECIAL_PIECES:
        raise ConfigError(f"{key} {piece!r} must look like <NAME> (no spaces, not {', '.join(SPECIAL_PIECES)})")
    if piece.startswith("<2") and LANGUAGE_CODE.fullmatch(piece[2:-1]):
        raise ConfigError(f"{key} {piece!r} is a language tag; the language tag comes from tgt_lang")


@dataclass
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
        if (self.train_src is None) != (self.train_tgt is None):
            raise ConfigError(f"{key}.train_src and {key}.train_tgt must be set together")
        if (self.train_src is None) == (self.train is None):
            raise ConfigError(f"{key} needs its files: train_src + train_tgt, or train (one table)")
        _check_languages(self, key)
        if not self.weight > 0:
            raise ConfigError(f"{key}.weight must be positive, got {self.weight}")
        if self.tag is not None:
            _check_piece(self.tag, f"{key}.tag")

    def describe(self) -> str:
        """"train.en + train.de (en->de, <BT>)": the files, then the direction and tag where set."""
        files = self.train if self.train is not None else f"{self.train_src} + {self.train_tgt}"
        notes = ([f"{self.src_lang}->{self.tgt_lang}"] if self.tgt_lang else []) + ([self.tag] if self.tag else [])
        return files + (f" ({', '.join(notes)})" if notes else "")


@dataclass
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
        if self.src is None or self.tgt is None:
            raise ConfigError(f"{key} needs both src and tgt (two aligned text files)")
        _check_languages(self, key)
        if self.name is not None and not VALID_SET_NAME.fullmatch(self.name):
            raise ConfigError(f"{key}.name {self.name!r} may hold only letters, digits and . _ + -")

    def label(self, index: int) -> str:
        """The name its scores are logged under."""
        if self.name is not None:
            return self.name
        return f"{self.src_lang}-{self.tgt_lang}" if self.tgt_lang else f"valid{index}"


@dataclass
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
        null: $SEQ2SEQ_CACHE/data, else ~/.cache/seq2seq/data (`seq2seq.data.cache.default_cache_root`).
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
        compares them.
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
    language_tag: Literal["source", "decoder"] = "source"
    terminology: TerminologyConfig = field(default_factory=TerminologyConfig)  # docs/terminology.md

    def __post_init__(self) -> None:
        self.corpora = [from_dict(CorpusConfig, c, f"data.corpora[{i}].") if isinstance(c, dict) else c
                        for i, c in enumerate(self.corpora)]
        self.valid_sets = [from_dict(ValidSetConfig, v, f"data.valid_sets[{i}].") if isinstance(v, dict) else v
                           for i, v in enumerate(self.valid_sets)]
        self._check_corpora()
        if self.subword_alpha is not None and not 0.0 < self.subword_alpha <= 1.0:
            raise ConfigError(f"data.subword_alpha must be in (0, 1] (or null: off), got {self.subword_alpha}")
        if self.subword_nbest != -1 and self.subword_nbest < 2:
            raise ConfigError(f"data.subword_nbest must be -1 (all segmentations) or >= 2, got {self.subword_nbest}")
        for split in ("train", "valid"):
            src, tgt = getattr(self, f"{split}_src"), getattr(self, f"{split}_tgt")
            if (src is None) != (tgt is None):
                raise ConfigError(f"data.{split}_src and data.{split}_tgt must be set together")
            if src is not None and getattr(self, split) is not None:
                raise ConfigError(f"set either data.{split}_src + data.{split}_tgt or data.{split}, not both")
        if self.train_src is not None or self.train is not None:
            if self.hf_dataset is not None:
                raise ConfigError("data.hf_dataset cannot be combined with data.train_src/train_tgt or data.train")
        if self.max_len <= 0:
            raise ConfigError(f"data.max_len must be positive, got {self.max_len}")
        if self.max_ratio < 1.0:
            raise ConfigError(f"data.max_ratio must be at least 1, got {self.max_ratio}")
        if self.valid_max_sentences is not None and self.valid_max_sentences <= 0:
            raise ConfigError(f"data.valid_max_sentences must be positive, got {self.valid_max_sentences}")

    def _check_corpora(self) -> None:
        if not self.sampling_temperature > 0:
            raise ConfigError(f"data.sampling_temperature must be positive, got {self.sampling_temperature}")
        if self.corpora:
            single = [k for k in ("train_src", "train_tgt", "train", "hf_dataset") if getattr(self, k) is not None]
            if single:
                raise ConfigError(f"set either data.corpora or data.{single[0]}, not both")
            for i, corpus in enumerate(self.corpora):
                corpus.check(f"data.corpora[{i}]")
            named = [c.tgt_lang is not None for c in self.corpora]
            if any(named) and not all(named):
                i = named.index(False)
                raise ConfigError(f"data.corpora[{i}] names no languages (src_lang, tgt_lang); either every corpus "
                                  f"names its languages or none does")
        self._check_languages()
        for i, piece in enumerate(self.reserved):
            _check_piece(piece, f"data.reserved[{i}]")
        if self.valid_sets:
            single = [k for k in ("valid_src", "valid_tgt", "valid") if getattr(self, k) is not None]
            if single:
                raise ConfigError(f"set either data.valid_sets or data.{single[0]}, not both")
            for i, valid in enumerate(self.valid_sets):
                valid.check(f"data.valid_sets[{i}]")
            labels = [v.label(i) for i, v in enumerate(self.valid_sets)]
            for i, label in enumerate(labels):
                if label in labels[:i]:
                    first = labels.index(label)
                    raise ConfigError(f"data.valid_sets[{i}] has the same name as data.valid_sets[{first}] ({label!r}); "
                                      f"give one a name")
        if self.language_tag == "decoder" and not self.multilingual:
            raise ConfigError("data.language_tag: decoder is for multilingual models (data.corpora with several "
                              "target languages); this config has none to tag")
        if self.multilingual:
            languages = ", ".join(self.target_languages)
            if self.valid_src is not None or self.valid is not None:
                what = ("data.corpora have several target languages" if self.corpora
                        else "data.languages names the target languages")
                raise ConfigError(f"{what} ({languages}): validate them per "
                                  f"direction with data.valid_sets instead of data.valid_src/valid_tgt/valid")
            for i, valid in enumerate(self.valid_sets):
                if valid.tgt_lang not in self.target_languages:
                    what = "names no tgt_lang" if valid.tgt_lang is None else f"has tgt_lang {valid.tgt_lang!r}"
                    raise ConfigError(f"data.valid_sets[{i}] {what}; a multilingual model's validation sets need one "
                                      f"of its target languages ({languages})")

    def _check_languages(self) -> None:
        """data.languages: language codes, each once, only in a config without training data."""
        if not self.languages:
            return
        given = [k for k in ("corpora", "train_src", "train", "hf_dataset") if getattr(self, k) not in (None, [])]
        if given:
            raise ConfigError(f"data.languages is for a model without training data (an imported one); a training "
                              f"config names its target languages in data.corpora (tgt_lang), not with data.{given[0]}")
        for i, lang in enumerate(self.languages):
            if not LANGUAGE_CODE.fullmatch(lang):
                raise ConfigError(f"data.languages[{i}] {lang!r} is not a language code (two or three letters, then "
                                  f"optional -/_ parts: de, fra, pt_BR, zh-Hans)")
            if lang in self.languages[:i]:
                raise ConfigError(f"data.languages[{i}] {lang!r} is listed twice")

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
        if self.train_src is None and self.train is None and self.hf_dataset is None and not self.corpora:
            raise ConfigError("no training data: set data.train_src + data.train_tgt, data.train, data.hf_dataset "
                              "or data.corpora")


def check_fits_in_memory(model: ModelConfig, memory: int | None = None) -> None:
    """When a run starts: ConfigError when the model's float32 weights alone exceed this machine's
    memory (`memory` bytes; default: what the OS says, None where it does not say). Not a check of the
    config itself: one config.yaml is valid on every machine."""
    memory = physical_memory() if memory is None else memory
    if memory and 4 * model.approx_parameters() > memory:
        raise ConfigError(
            f"model: d_model {model.d_model}, ffn_dim {model.ffn_dim}, {model.n_encoder_layers}+{model.n_decoder_layers} "
            f"layers and vocabularies of {model.src_vocab_size}/{model.tgt_vocab_size} make ~{model.approx_parameters():.3g} "
            f"parameters, whose weights alone exceed this machine's {memory / 2**30:.0f} GiB of memory")


def physical_memory() -> int | None:
    """This machine's memory in bytes (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def check_ranges(section: Any, name: str, ranges: dict[str, tuple[float | None, float | None]]) -> None:
    """ConfigError naming the key ("model.layers must be >= 1, got -3") for a value outside its
    [low, high] range; None values (unset options) and None bounds are not checked."""
    for key, (low, high) in ranges.items():
        value = getattr(section, key)
        if value is None:
            continue
        if low is not None and value < low:
            raise ConfigError(f"{name}.{key} must be >= {low}, got {value}")
        if high is not None and value > high:
            raise ConfigError(f"{name}.{key} must be <= {high}, got {value}")


@dataclass
class TrainingConfig:
    """The `training` section: optimisation, schedule, precision, validation and checkpoints."""

    output_dir: str = "runs/model"
    seed: int = 1
    max_tokens: int = 4096  # padded tokens per batch, per side
    accum_steps: int = 1
    # Training batches drawn and collated this many steps ahead, on a background thread (0: on the training
    # thread, between steps). The same batches either way.
    prefetch: int = 2
    # Batch shapes in multiples of N (lengths padded up to a multiple, batches of N rows or more cut to a
    # multiple, as fairseq's required_batch_size_multiple): an epoch then makes a few dozen shapes, for kernels
    # that plan or compile per shape, at the cost of more padding (docs/training.md). 1: exact shapes.
    shape_multiple: int = 1
    lr: float = 7e-4
    encoder_lr: float | None = None  # learning rate of the encoder's parameters (e.g. a pretrained backbone); None: lr
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    adam_eps: float = 1e-8
    weight_decay: float = 0.0001
    schedule: Literal["inverse_sqrt", "linear", "cosine", "constant"] = "inverse_sqrt"
    warmup_steps: int = 800
    min_lr_ratio: float = 0.0  # floor for linear/cosine decay, as a fraction of lr
    # Budget-aware annealing: over the last `cooldown` fraction of the run (of max_steps or of
    # max_time_minutes, whichever ends first) the learning rate falls linearly to 0 on top of the
    # schedule. 0 turns it off.
    cooldown: float = 0.0
    max_steps: int = 20000
    max_epochs: int | None = None
    max_time_minutes: float | None = None  # wall-clock budget for the training loop
    label_smoothing: float = 0.1
    # Hybrid CTC/attention training (Watanabe et al. 2017): loss = (1 - w) * attention loss + w * CTC
    # loss of the encoder's memory (see seq2seq.training.loss.ctc_loss). 0 turns it off.
    ctc_weight: float = 0.0
    clip_norm: float | None = 1.0
    precision: Literal["fp32", "bf16", "fp16", "auto"] = "fp32"  # auto: bf16 where the hardware has it
    device: str = "auto"  # auto: cuda > mps > cpu
    threads: int | None = None  # torch intra-op threads on CPU (default: torch's choice)
    valid_every: int = 500
    valid_bleu: bool = True  # decode the validation set (greedy) and score BLEU, chrF, WER and CER
    best_metric: Literal["bleu", "chrf", "wer", "cer", "loss"] = "bleu"
    keep_last: int = 5  # checkpoints kept in checkpoints/ (for averaging)
    checkpoint_every: int | None = None  # also save (without validating) every N steps
    patience: int | None = None  # validations without improvement before stopping
    # Plateau-triggered cooldown: after this many validations without improvement of best_metric,
    # the cooldown starts now instead of at the end of the budget. The step budget shrinks to
    # step / (1 - cooldown), so the learning rate reaches 0 and the run stops after another
    # cooldown / (1 - cooldown) of the steps done so far. A machine fast enough to train past the
    # best region therefore anneals there rather than overfitting at a high learning rate.
    cooldown_patience: int | None = None
    log_every: int = 50
    tensorboard: bool = False  # also log to <output_dir>/tensorboard (pip install "seq2seq[tensorboard]")
    max_bad_steps: int = 20  # skipped non-finite steps before aborting

    def __post_init__(self) -> None:
        check_ranges(self, "training", {
            "max_tokens": (1, None), "accum_steps": (1, None), "prefetch": (0, None), "shape_multiple": (1, None),
            "valid_every": (1, None), "max_steps": (0, None),
            "max_epochs": (1, None), "warmup_steps": (0, None), "keep_last": (0, None), "checkpoint_every": (1, None),
            "patience": (1, None), "log_every": (1, None), "max_bad_steps": (1, None), "threads": (1, None),
            "weight_decay": (0.0, None), "min_lr_ratio": (0.0, 1.0), "label_smoothing": (0.0, 0.99),
            "ctc_weight": (0.0, 0.99),
        })
        for name in ("lr", "encoder_lr", "adam_eps", "clip_norm", "max_time_minutes"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigError(f"training.{name} must be positive, got {value}")
        if len(self.betas) != 2:
            raise ConfigError("training.betas must hold two numbers")
        if self.precision == "fp16" and self.device == "cpu":
            raise ConfigError("training.precision fp16 needs CUDA; use bf16 on CPU")
        if not 0.0 <= self.cooldown <= 1.0:
            raise ConfigError(f"training.cooldown must be a fraction in [0, 1], got {self.cooldown}")
        if self.cooldown_patience is not None and (self.cooldown_patience < 1 or not 0.0 < self.cooldown < 1.0):
            raise ConfigError("training.cooldown_patience needs a value >= 1 and a training.cooldown in (0, 1), "
                              f"got cooldown_patience {self.cooldown_patience} with cooldown {self.cooldown}")


@dataclass
class TokenizerConfig:
    """How to build the subword vocabularies (the `tokenizer` section; used by `seq2seq.text.tokenizer`).

    joint: one SentencePiece model shared by source and target (needed for shared embeddings).
    vocab_size: size of the joint model, and the default of src_vocab_size / tgt_vocab_size
        for separate models. Lowered automatically (with a warning) when the corpus is too small.
    input_sentence_size: at most this many sentences (randomly sampled, fixed seed) are used
        for training.
    add_dummy_prefix: SentencePiece's word-start mark before the first word, as before every
        other word (the default). False for targets that are one unbroken word (digit strings,
        codes): the first piece is then not a merge of the mark with whatever character begins
        the text.
    src_model / tgt_model: existing `.model` files to load instead of training; with
        joint=True only src_model is used.
    """

    joint: bool = True
    model_type: Literal["unigram", "bpe"] = "unigram"
    vocab_size: int = 8000
    src_vocab_size: int | None = None
    tgt_vocab_size: int | None = None
    character_coverage: float = 1.0
    input_sentence_size: int = 1_000_000
    add_dummy_prefix: bool = True
    src_model: str | None = None
    tgt_model: str | None = None

    def __post_init__(self) -> None:
        for name in ("vocab_size", "src_vocab_size", "tgt_vocab_size"):
            value = getattr(self, name)
            if value is not None and value <= N_SPECIAL_IDS:
                raise ConfigError(f"tokenizer.{name} must be larger than {N_SPECIAL_IDS}, got {value}")
        if not 0.0 < self.character_coverage <= 1.0:
            raise ConfigError(f"tokenizer.character_coverage must be in (0, 1], got {self.character_coverage}")
        if self.input_sentence_size <= 0:
            raise ConfigError(f"tokenizer.input_sentence_size must be positive, got {self.input_sentence_size}")
        if not self.joint and (self.src_model is None) != (self.tgt_model is None):
            raise ConfigError("tokenizer.src_model and tokenizer.tgt_model must be set together when joint is false")
