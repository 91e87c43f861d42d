"""Typed configuration: dataclasses that round-trip to and from YAML/JSON.

Every section of a config (model, data, tokenizer, training, decoding) is a plain dataclass.
`from_dict` maps a nested dict onto one, refusing unknown keys (listing the valid ones and
suggesting the closest) and values of the wrong type (naming the dotted key). `to_dict` is the
inverse, so `from_dict(C, to_dict(c)) == c`.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

T = TypeVar("T")


class ConfigError(ValueError):
    """A config problem a user can fix: the message names the key or file."""


# --------------------------------------------------------------------------------------------
# Generic dataclass <-> dict mapping
# --------------------------------------------------------------------------------------------


def to_dict(obj: Any) -> Any:
    """Dataclass (possibly nested) -> plain dict of YAML/JSON-safe values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check `value` against the annotation `tp`; convert only lossless cases (int -> float)."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin is typing.Union or origin is types.UnionType:
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError as e:
                errors.append(e)
        raise ConfigError(
            f"config key '{key}': expected {' or '.join(_type_name(a) for a in args)}, "
            f"got {type(value).__name__} {value!r}"
        )
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise ConfigError(f"config key '{key}': {value!r} is not one of {list(choices)}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config key '{key}': expected a list, got {type(value).__name__} {value!r}")
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        return [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}': expected a mapping, got {type(value).__name__}")
        return dict(value)
    if isinstance(tp, type) and issubclass(tp, EncoderConfig):
        if isinstance(value, EncoderConfig):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}': expected a mapping, got {type(value).__name__} {value!r}")
        kind = value.get("type", "text")
        return from_dict(encoder_config_class(kind, f"{key}.type"), value, prefix=f"{key}.")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}': expected a mapping, got {type(value).__name__} {value!r}")
        return from_dict(tp, value, prefix=f"{key}.")
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"config key '{key}': expected a number, got {type(value).__name__} {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"config key '{key}': expected an integer, got {type(value).__name__} {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"config key '{key}': expected true/false, got {type(value).__name__} {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"config key '{key}': expected a string, got {type(value).__name__} {value!r}")
        return value
    return value


def from_dict(cls: type[T], data: dict[str, Any] | None, prefix: str = "") -> T:
    """Build dataclass `cls` from `data`, validating keys and types recursively."""
    data = data or {}
    if not isinstance(data, dict):
        raise ConfigError(f"config section '{prefix.rstrip('.') or '<root>'}' must be a mapping")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f" Did you mean '{prefix}{close[0]}'?" if close else ""
            raise ConfigError(
                f"unknown config key '{prefix}{key}'.{hint} Valid keys in "
                f"'{prefix.rstrip('.') or '<root>'}': {', '.join(sorted(fields))}"
            )
        kwargs[key] = _coerce(value, hints[key], f"{prefix}{key}")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:
        raise ConfigError(f"config section '{prefix.rstrip('.') or '<root>'}': {e}") from None


def load_dict(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON file into a dict, with a readable error on a bad or missing file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot parse config file {path}: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return data


def save(obj: Any, path: str | Path) -> None:
    """Write a dataclass as YAML (or JSON when the suffix is .json)."""
    path = Path(path)
    data = to_dict(obj)
    text = json.dumps(data, indent=2) + "\n" if path.suffix == ".json" else yaml.safe_dump(data, sort_keys=False)
    path.write_text(text, encoding="utf-8")


def load(cls: type[T], path: str | Path) -> T:
    return from_dict(cls, load_dict(path))


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `section.key=value` strings (values parsed as YAML scalars) to a nested dict."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override '{item}' must look like section.key=value")
        dotted, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = data
        *parents, leaf = dotted.strip().split(".")
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override '{item}': '{p}' is not a section")
        node[leaf] = value
    return data


# --------------------------------------------------------------------------------------------
# The model's config
# --------------------------------------------------------------------------------------------


@dataclass
class EncoderConfig:
    """The `model.encoder` section: which encoder reads the source, and that encoder's settings.

    `type: text` (this class, no settings of its own: the text encoder uses the model's sizes) is the
    default. Each other modality registers a subclass with its own typed fields (see
    `seq2seq.model.encoders`), e.g. `{type: image, image_size: 64, patch_size: 8}`; the section is parsed
    into the subclass its `type` names, and unknown keys of that type are refused.
    """

    type: str = "text"


_ENCODER_CONFIGS: dict[str, type[EncoderConfig]] = {"text": EncoderConfig}


def register_encoder_config(cls: type[EncoderConfig]) -> type[EncoderConfig]:
    """Class decorator: make `cls` (a dataclass whose `type` field defaults to its name) the config of
    `model.encoder.type: <name>`."""
    _ENCODER_CONFIGS[cls().type] = cls
    return cls


def encoder_config_class(kind: Any, key: str = "model.encoder.type") -> type[EncoderConfig]:
    """The config dataclass registered for encoder type `kind`; ConfigError naming the choices."""
    if kind not in _ENCODER_CONFIGS:
        from seq2seq.model.encoders.base import load_plugins

        load_plugins()
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
    activation: typing.Literal["relu", "gelu"] = "relu"
    norm: typing.Literal["pre", "post"] = "pre"
    positions: typing.Literal["sinusoidal", "learned"] = "sinusoidal"
    max_positions: int = 1024
    share_embeddings: bool = False
    tie_output: bool = True
    pad_id: int = 0
    encoder: EncoderConfig = dataclasses.field(default_factory=EncoderConfig)

    def __post_init__(self) -> None:
        if self.encoder.type != "text" and self.share_embeddings:
            raise ConfigError(f"model.share_embeddings needs a text encoder (model.encoder.type is {self.encoder.type!r})")
        if self.d_model % self.heads:
            raise ConfigError(f"model.d_model ({self.d_model}) must be divisible by model.heads ({self.heads})")
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ConfigError("model.share_embeddings needs src_vocab_size == tgt_vocab_size (a joint vocabulary)")
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"model.{name} must be in [0, 1)")

    @property
    def n_encoder_layers(self) -> int:
        return self.layers if self.encoder_layers is None else self.encoder_layers

    @property
    def n_decoder_layers(self) -> int:
        return self.layers if self.decoder_layers is None else self.decoder_layers


# --------------------------------------------------------------------------------------------
# Data and training sections
# --------------------------------------------------------------------------------------------


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
    cache_dir: where tokenized datasets are cached; overrides the directory given to `prepare`.
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

    def __post_init__(self) -> None:
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

    def validate(self) -> None:
        """Raise ConfigError unless some training data is configured."""
        if self.train_src is None and self.train is None and self.hf_dataset is None:
            raise ConfigError("no training data: set data.train_src + data.train_tgt, data.train, or data.hf_dataset")


@dataclass
class TrainingConfig:
    """The `training` section: optimisation, schedule, precision, validation and checkpoints."""

    output_dir: str = "runs/model"
    seed: int = 1
    max_tokens: int = 4096  # padded tokens per batch, per side
    accum_steps: int = 1
    lr: float = 7e-4
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
        if self.accum_steps < 1 or self.max_tokens < 1 or self.valid_every < 1:
            raise ConfigError("training.accum_steps, max_tokens and valid_every must be >= 1")
        if len(self.betas) != 2:
            raise ConfigError("training.betas must hold two numbers")
        if self.precision == "fp16" and self.device == "cpu":
            raise ConfigError("training.precision fp16 needs CUDA; use bf16 on CPU")
        if not 0.0 <= self.cooldown <= 1.0:
            raise ConfigError(f"training.cooldown must be a fraction in [0, 1], got {self.cooldown}")
        if self.cooldown_patience is not None and (self.cooldown_patience < 1 or not 0.0 < self.cooldown < 1.0):
            raise ConfigError("training.cooldown_patience needs a value >= 1 and a training.cooldown in (0, 1), "
                              f"got cooldown_patience {self.cooldown_patience} with cooldown {self.cooldown}")
