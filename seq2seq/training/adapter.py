"""A LoRA training run: `seq2seq train CONFIG --init-from BASE` with `training.adapter.type: lora`.

The run is a fine-tuning run (`seq2seq.training.finetune`: BASE's model and tokenizer), with three
changes made by `attach` before the Trainer is built:

  * the base's weights are frozen and the targeted layers get LoRA updates (`seq2seq.adapters.lora`);
  * the model's class becomes `AdaptedTransformer`, whose state_dict holds the updates only: every
    checkpoint, the resume state and the best weights hold adapter tensors only (the base stays in BASE);
  * the best weights are written as adapter.safetensors (the Trainer's checkpoints use `AdapterRunDir`),
    beside adapter.json, which names BASE and the fingerprint of its weights (`seq2seq.adapters.files`).

`--resume` reloads BASE's weights (named in metadata.json's init_from) and refuses a BASE whose weights
changed since the run started.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, cast

from torch import nn
from torch.nn.modules.module import _IncompatibleKeys

from seq2seq.adapters.files import ADAPTER_JSON, ADAPTER_WEIGHTS, read_adapter, write_adapter_json
from seq2seq.adapters.lora import add_lora, embedding_keys, is_lora_key
from seq2seq.config import ConfigError
from seq2seq.config.root import Config
from seq2seq.model.transformer import Seq2SeqTransformer
from seq2seq.storage.model_dir import ModelDir
from seq2seq.training import distributed, finetune

if TYPE_CHECKING:
    from seq2seq.training.trainer import Trainer

log = logging.getLogger(__name__)


NO_BASE = ("training.adapter: LoRA fine-tunes a trained model; give it with --init-from MODEL_DIR (or set "
           "training.adapter.type: null to train from scratch)")


class AdaptedTransformer(Seq2SeqTransformer):
    """A Seq2SeqTransformer with LoRA updates whose state_dict and load_state_dict are the updates only
    (NAME.lora_A, NAME.lora_B), plus the embedding tables named in `adapter_saved` (train_embeddings): what
    a LoRA run saves and resumes. Its class is set on a built model."""

    adapter_saved: tuple[str, ...] = ()

    def state_dict(self, *args: Any, destination: Any = None, prefix: str = "", keep_vars: bool = False) -> Any:
        full = super().state_dict(*args, destination=destination, prefix=prefix, keep_vars=keep_vars)
        for key in [k for k in full if not is_lora_key(k) and k not in self.adapter_saved]:
            del full[key]
        return full

    def load_state_dict(self, state_dict: Mapping[str, object], strict: bool = True,
                        assign: bool = False) -> _IncompatibleKeys:
        own = set(self.state_dict())
        missing, unexpected = sorted(own - set(state_dict)), sorted(set(state_dict) - own)
        if strict and (missing or unexpected):
            raise RuntimeError(f"adapter state: missing {missing[:5]}, unexpected {unexpected[:5]}")
        return super().load_state_dict(state_dict, strict=False, assign=assign)


class AdapterRunDir(ModelDir):
    """A LoRA run's output directory as its Trainer writes it: the best weights are adapter.safetensors."""

    WEIGHTS = ADAPTER_WEIGHTS


def check_start(cfg: Config, parent: finetune.Parent | None, out_dir: Path, overwrite: bool) -> None:
    """Before any data is read: ConfigError for an adapter run without a base (--init-from), or into a
    directory holding a finished adapter (unless `overwrite`)."""
    if not cfg.training.adapter.on:
        return
    if parent is None:
        raise ConfigError(NO_BASE)
    if getattr(cfg.model.encoder, "unfreeze_after_steps", None) is not None:  # (its weights would train unsaved)
        raise ConfigError("training.adapter trains LoRA updates only, but model.encoder.unfreeze_after_steps would "
                          "train the backbone's own weights too; remove one of them")
    run = AdapterRunDir(out_dir)
    if run.train_state() is None and run.weights_path.is_file() and not overwrite:
        raise ConfigError(f"{out_dir} already holds a trained adapter ({ADAPTER_WEIGHTS}); pass --overwrite to "
                          f"replace it, or set training.output_dir (-o) to a new directory")


def attach(cfg: Config, model: nn.Module, parent: finetune.Parent | None, out_dir: str | Path) -> list[str] | None:
    """Make `model` (built, with the parent's weights where the run starts fresh) a LoRA run's model, as the
    module docstring says; returns the adapted layers' names, or None when training.adapter is off.
    ConfigError without a base (--init-from) or for target_modules that name no linear layer."""
    adapter = cfg.training.adapter
    if not adapter.on:
        return None
    out_dir = Path(out_dir)
    if parent is None:
        raise ConfigError(NO_BASE)
    base = parent.path
    if base == out_dir.resolve():  # resuming without --init-from: the parent is the run itself
        recorded = finetune.recorded_parent(out_dir)
        if recorded is None:
            raise ConfigError(f"training.adapter: the run in {out_dir} does not name its base (metadata.json's "
                              f"{finetune.METADATA_KEY}); resume it with --init-from BASE")
        base = Path(recorded)
    base_dir = ModelDir(base)
    if parent.weights is None:  # resuming: the train state holds the updates, the base its weights
        if (out_dir / ADAPTER_JSON).is_file() and (out_dir / ADAPTER_WEIGHTS).is_file():
            read_adapter(out_dir).check_base(base)
        base_dir.load_weights_into(model)
    names = add_lora(model, adapter, seed=cfg.training.seed)
    model.__class__ = AdaptedTransformer
    tables = embedding_keys(model) if adapter.train_embeddings else []
    cast(AdaptedTransformer, model).adapter_saved = tuple(tables)
    if distributed.is_main():
        write_adapter_json(out_dir, adapter, names, base, tables)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    log.info("LoRA: rank %d, alpha %g on %d layers of %s%s: %s trainable parameters (%.2f%% of %s)", adapter.rank,
             adapter.alpha, len(names), base, " and its embedding tables" if adapter.train_embeddings else "",
             f"{trained:,}", 100 * trained / total, f"{total:,}")
    return names


def own_checkpoints(trainer: Trainer) -> None:
    """Make `trainer` write its best weights as adapter.safetensors (`AdapterRunDir`)."""
    trainer.checkpoints.model_dir = AdapterRunDir(trainer.checkpoints.model_dir.path)


def trainable_share(model: nn.Module) -> float:
    """The fraction of `model`'s parameters that train."""
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad) / max(1, sum(p.numel() for p in params))


__all__ = ["AdaptedTransformer", "AdapterRunDir", "attach", "check_start", "own_checkpoints", "trainable_share"]

