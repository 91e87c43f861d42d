"""Fine-tuning: a training run that starts from a model directory's weights and tokenizer.

    seq2seq train CONFIG --init-from MODEL_DIR        (run_training(cfg, init_from=MODEL_DIR))

The new run keeps the parent's tokenizer (its spm*.model files are loaded instead of training a
new one, and saved byte-identical into the new model directory) and its shape (the `model`
section), starts from its best weights (`model.safetensors`), and gets a fresh optimizer, schedule
and step count from CONFIG's `training` section. CONFIG supplies the data, training and decoding.

How CONFIG's `model` and `tokenizer` sections meet the parent's:
  * a key left at its default takes the parent's value (a fine-tuning config needs neither section);
  * a key set to the parent's value is fine;
  * the dropouts (model.dropout, attention_dropout, activation_dropout), model.encoder.augment, a
    pretrained backbone's name_or_path / freeze / unfreeze_top_layers / unfreeze_after_steps and
    data.lowercase may differ: they are training settings, not the shape;
  * any other difference is refused, all the differing keys named in one message, as is another
    encoder type or another tokenizer file (tokenizer.src_model / tgt_model).

`--resume` continues a fine-tuning run like any other (the train state holds its weights); the run
records its parent in metadata.json (`init_from`), so `--init-from` may be repeated or left out.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import torch

from seq2seq.config import ConfigError, EncoderConfig, to_dict
from seq2seq.model.encoders.base import source_kind
from seq2seq.storage import CheckpointError
from seq2seq.storage.model_dir import ModelDir
from seq2seq.config.root import Config
from seq2seq.text.tokenizer import TokenizerError, TokenizerPair
from seq2seq.config import TokenizerConfig

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")
SectionT = TypeVar("SectionT", bound="DataclassInstance")

log = logging.getLogger(__name__)

# model keys that are training settings: CONFIG may change them for the fine-tuning run
FREE_MODEL_KEYS = ("dropout", "attention_dropout", "activation_dropout")
# model.encoder keys that are training settings (on-the-fly augmentation; a pretrained backbone's source
# and which of its weights train)
FREE_ENCODER_KEYS = ("augment", "name_or_path", "freeze", "unfreeze_top_layers", "unfreeze_after_steps")
# model keys that run_training derives from the tokenizer
DERIVED_MODEL_KEYS = ("src_vocab_size", "tgt_vocab_size", "pad_id")
# tokenizer keys that describe the tokenizer (the others only steer its training)
TOKENIZER_KEYS = ("joint", "model_type", "vocab_size", "src_vocab_size", "tgt_vocab_size", "character_coverage",
                  "add_dummy_prefix")
# an image or audio model has one (target) tokenizer, always joint: `joint` and the per-side sizes do not apply
MEDIA_TOKENIZER_KEYS = ("model_type", "vocab_size", "character_coverage", "add_dummy_prefix")
METADATA_KEY = "init_from"


@dataclass
class Parent:
    """The model directory a run starts from."""

    path: Path
    config: Config  # its config.yaml
    tokenizers: TokenizerPair
    weights: Path | None  # None: resuming, the train state holds the weights

    @property
    def tokenizer_files(self) -> list[Path]:
        return [self.path / name for name in self.tokenizers.files]

    def init_weights(self, model: torch.nn.Module) -> None:
        """Load the parent's weights into `model` (a freshly built model of the merged config)."""
        if self.weights is None:
            return
        ModelDir(self.path).load_weights_into(model, self.weights)
        log.info("fine-tuning: weights from %s", self.weights)


def load_parent(path: str | Path, weights: bool = True, what: str = "--init-from") -> Parent:
    """Read a model directory's config and tokenizer (checking they fit each other); CheckpointError
    naming the directory for anything missing or broken."""
    model_dir = ModelDir(Path(path).resolve())
    path = model_dir.path
    if not path.is_dir():
        raise CheckpointError(f"{what} {path}: model directory not found")
    missing = model_dir.missing(weights=weights)
    if missing:
        raise CheckpointError(f"{what} {path}: not a complete model directory ({missing} is missing)")
    try:
        config = model_dir.config()
        tokenizers = model_dir.tokenizers(config)
    except (CheckpointError, TokenizerError) as e:
        raise CheckpointError(f"{what} {e}") from None
    return Parent(path, config, tokenizers, model_dir.weights_path if weights else None)


def recorded_parent(out_dir: str | Path) -> str | None:
    """The parent a run in out_dir was fine-tuned from (metadata.json), or None."""
    try:
        return ModelDir(out_dir).metadata().get(METADATA_KEY)
    except (CheckpointError, AttributeError):
        return None


def setup(cfg: Config, init_from: str | Path | None, out_dir: str | Path, resume: bool) -> tuple[Config, Parent | None]:
    """A fine-tuning run's config merged with its parent (see the module docstring), and the parent.

    Returns cfg as it is and None for a run from scratch. Resuming a fine-tuning run (resume=True and a
    train state in out_dir) needs no init_from: the run's own config and tokenizer, copied from the
    parent at its start, stand in for the parent's, and the weights come from the train state.
    Raises ConfigError (one message, naming every difference) when CONFIG does not fit the parent.
    """
    out_dir = Path(out_dir)
    resuming = resume and ModelDir(out_dir).train_state() is not None
    recorded = recorded_parent(out_dir) if resume else None
    if init_from is None and recorded is not None and not resuming:
        init_from = recorded  # --resume of a fine-tuning run stopped before its first checkpoint: start it again
        log.info("--resume: the run in %s has no checkpoint yet; fine-tuning %s from the start", out_dir, recorded)
    if init_from is None:
        if recorded is None:
            return cfg, None
        parent = load_parent(out_dir, weights=False, what="resuming the fine-tuning run in")
        log.info("resuming a fine-tuning run (from %s)", recorded)
    else:
        parent = load_parent(init_from, weights=not resuming)
        if resuming and recorded is None:
            raise ConfigError(f"--init-from {init_from}: {out_dir} holds a run trained from scratch; "
                              f"resume it without --init-from, or set training.output_dir to a new directory")
        if resuming and recorded is not None and Path(recorded).resolve() != parent.path:
            raise ConfigError(f"--init-from {init_from}: the run in {out_dir} was fine-tuned from {recorded}; "
                              f"resume it with --init-from {recorded} or without --init-from")
    return _merge(cfg, parent, init_from if init_from is not None else out_dir), parent


def record(meta: dict[str, object], parent: Parent | None, out_dir: str | Path) -> None:
    """Note the parent in the run's metadata (kept across resumes; dropped for a run from scratch)."""
    if parent is None:
        meta.pop(METADATA_KEY, None)
    elif parent.path != Path(out_dir).resolve():
        meta[METADATA_KEY] = str(parent.path)


# ---- merging the configs ------------------------------------------------------------------------


def _merge(cfg: Config, parent: Parent, source: str | Path) -> Config:
    """cfg with the parent's model and tokenizer sections (with cfg's free keys); ConfigError for a mismatch."""
    pcfg = parent.config
    what = f"--init-from {source}"
    own_type, parent_type = cfg.model.encoder.type, pcfg.model.encoder.type
    if own_type != parent_type and own_type != EncoderConfig().type:  # the default: left unset, it is inherited
        raise ConfigError(f"{what}: the model has a {parent_type} encoder (model.encoder.type: {parent_type}) but "
                          f"the config asks for {own_type}; fine-tuning keeps the model's encoder type")
    _check_tokenizer_files(cfg.tokenizer, parent, what)

    problems: list[str] = []
    model = _merged(cfg.model, pcfg.model, "model", problems, free=FREE_MODEL_KEYS,
                    skip=DERIVED_MODEL_KEYS + ("encoder",))
    if own_type == parent_type:
        encoder = _merged(cfg.model.encoder, pcfg.model.encoder, "model.encoder", problems, free=FREE_ENCODER_KEYS)
    else:
        encoder = pcfg.model.encoder
    tokenizer = _merged(cfg.tokenizer, pcfg.tokenizer, "tokenizer", problems,
                        only=MEDIA_TOKENIZER_KEYS if source_kind(pcfg.model.encoder).reads_files else TOKENIZER_KEYS)
    if problems:
        raise ConfigError(
            f"{what}: the config does not fit the model, which fine-tuning keeps as it is: {'; '.join(problems)}. "
            f"Remove these keys from the config (or set them to the model's values)"
        )
    lowercase = _merged_value(cfg.data.lowercase, pcfg.data.lowercase, False)
    if lowercase != cfg.data.lowercase:
        log.info("fine-tuning: data.lowercase %s, as the model was trained", lowercase)
    files = parent.tokenizer_files
    tokenizer = dataclasses.replace(tokenizer, joint=parent.tokenizers.joint, src_model=str(files[0]),
                                    tgt_model=str(files[-1]) if not parent.tokenizers.joint else None)
    return dataclasses.replace(cfg, model=dataclasses.replace(model, encoder=encoder), tokenizer=tokenizer,
                               data=dataclasses.replace(cfg.data, lowercase=lowercase))


def _check_tokenizer_files(tok: TokenizerConfig, parent: Parent, what: str) -> None:
    """CONFIG may name tokenizer files only if they are the parent's own (byte for byte)."""
    own = {p.read_bytes() for p in parent.tokenizer_files}
    for key in ("src_model", "tgt_model"):
        given = getattr(tok, key)
        if given is None:
            continue
        path = Path(given)
        if not path.is_file() or path.read_bytes() not in own:
            raise ConfigError(
                f"{what}: the config sets tokenizer.{key}={given}, but a fine-tuned model keeps the tokenizer it was "
                f"trained with ({', '.join(p.name for p in parent.tokenizer_files)} in {parent.path}); remove "
                f"tokenizer.src_model and tokenizer.tgt_model from the config"
            )


def _merged_value(own: T, theirs: T, default: T) -> T:
    return theirs if own == default else own


def _merged(own: SectionT, theirs: SectionT, section: str, problems: list[str], free: tuple[str, ...] = (),
            skip: tuple[str, ...] = (), only: tuple[str, ...] | None = None) -> SectionT:
    """A copy of dataclass `theirs` with `own`'s free keys; appends 'section.key=X (the model's: Y)' to
    `problems` for every other key that `own` sets (to a non-default value) differently."""
    defaults = type(own)()
    values = {}
    for f in dataclasses.fields(own):
        name = f.name
        if name in skip or (only is not None and name not in only):
            continue
        mine, parents, default = getattr(own, name), getattr(theirs, name), getattr(defaults, name)
        if _same(mine, parents) or _same(mine, default):
            continue
        if name in free:
            values[name] = mine
        else:
            problems.append(f"{section}.{name}={_show(mine)} (the model's: {_show(parents)})")
    return dataclasses.replace(theirs, **values)


def _same(a: object, b: object) -> bool:
    return to_dict(a) == to_dict(b)


def _show(value: object) -> str:
    return "null" if value is None else str(to_dict(value)).replace("True", "true").replace("False", "false")
