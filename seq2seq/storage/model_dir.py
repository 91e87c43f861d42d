"""The model directory, and its one owner: `ModelDir`. Every module that reads or writes one goes
through it; nothing else knows its file names.

A model directory holds everything needed to translate, and nothing else needs to travel with it:

    model.safetensors   weights of the best model (safetensors: no pickle), or the weights a recipe
                        chose on val (`install_weights`)
    model.best.safetensors  the best model's weights, kept here when a recipe installed others
    config.yaml         the full experiment config (model, tokenizer, data, training, decoding); its
                        `decoding` section is the default of every decoding command and class
    spm.model           the SentencePiece model (or spm.src.model + spm.tgt.model)
    lexicon.tsv         the word lexicon of the training pairs (`seq2seq.text.lexicon`; text models): what
                        places inline tags and non-translatables beside the cross-attention
    metadata.json       versions, data fingerprint, best scores, training time; `decoding_chosen_on`
                        when a recipe set the decoding defaults (`set_decoding`)
    checkpoints/        the last K checkpoints, step_<N>.safetensors (for averaging)
    train_state/        what `--resume` needs: last weights, optimizer, scheduler, RNG, data position
    log.csv, curves.png the training log and its plot

Every file is written atomically (`seq2seq.storage.atomic`): a crash or kill mid-save leaves the
previous file intact (`set_decoding` and `install_weights` too: what they replace stays until its
replacement is whole). `train_state/` is a set of files, so it is written as a new directory and
swapped in; a crash in the middle of the swap leaves `train_state.old/`, which `train_state()`
falls back to.

    load_model_dir(path, device, weights, encoder) -> LoadedModel(model, config, tokenizers, path)

loads one for inference (translate, caption, transcribe, test, serve, export); this module imports
neither training nor the data pipeline.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, TypedDict

from typing_extensions import Unpack

import torch
import yaml

from seq2seq.accel.device import choose_device, use_fast_attention_kernels
from seq2seq.config.root import Config, config_yaml
from seq2seq.config import ConfigError, SearchConfig, from_dict, load_dict
from seq2seq.config.search import SearchFields
from seq2seq.model.encoders.base import Encoder
from seq2seq.model.transformer import Seq2SeqTransformer
from seq2seq.storage import CheckpointError
from seq2seq.storage.atomic import atomic_path, read_json, write_json_atomic, write_text_atomic
from seq2seq.storage.weights import average_checkpoints, load_into, load_weights, save_weights
from seq2seq.text.lexicon import Lexicon
from seq2seq.text.tokenizer import JOINT_MODEL, SRC_MODEL, TGT_MODEL, TokenizerPair


@dataclass
class LoadedModel:
    model: Seq2SeqTransformer
    config: Config
    tokenizers: TokenizerPair
    path: Path


class DecodingChoice(TypedDict):
    """What `ModelDir.set_decoding` records in metadata.json (`decoding_chosen_on`): the decoding values
    it set, the data they were chosen on, who chose them and the weights they were chosen with."""

    values: dict[str, object]
    chosen_on: str
    chosen_by: str
    weights: str | None


class ModelDir:
    """A model directory at `path` (which need not exist yet): its layout, reading it and writing it."""

    WEIGHTS = "model.safetensors"
    BEST_WEIGHTS = "model.best.safetensors"
    DECODING_CHOSEN_ON = "decoding_chosen_on"  # metadata.json: who set the decoding defaults, on what
    CONFIG = "config.yaml"
    METADATA = "metadata.json"
    CHECKPOINTS = "checkpoints"
    TRAIN_STATE = "train_state"
    LOG = "log.csv"
    CURVES = "curves.png"
    CHECKPOINT_PREFIX = "step_"
    CHECKPOINT_SUFFIX = ".safetensors"
    TOKENIZER_META = "tokenizer.meta.json"  # what the tokenizers were trained on (seq2seq.data.tokenizer_cache)
    LEXICON = "lexicon.tsv"  # the word lexicon of the training pairs (seq2seq.text.lexicon)
    HF_FAMILY = "hf_family"  # what import-hf kept of an M2M100/NLLB/mBART original (seq2seq.deploy.fairseq_export)

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"ModelDir({str(self.path)!r})"

    # ---- the layout ------------------------------------------------------------------------------

    @property
    def lexicon_path(self) -> Path:
        return self.path / self.LEXICON

    @property
    def config_path(self) -> Path:
        return self.path / self.CONFIG

    @property
    def weights_path(self) -> Path:
        return self.path / self.WEIGHTS

    @property
    def best_weights_path(self) -> Path:
        return self.path / self.BEST_WEIGHTS

    @property
    def metadata_path(self) -> Path:
        return self.path / self.METADATA

    @property
    def checkpoint_dir(self) -> Path:
        return self.path / self.CHECKPOINTS

    @property
    def log_path(self) -> Path:
        return self.path / self.LOG

    @property
    def curves_path(self) -> Path:
        return self.path / self.CURVES

    def checkpoint_path(self, step: int) -> Path:
        return self.checkpoint_dir / f"{self.CHECKPOINT_PREFIX}{step}{self.CHECKPOINT_SUFFIX}"

    @classmethod
    def checkpoint_step(cls, path: str | Path) -> int | None:
        """N of a `step_N.safetensors` file name; None for any other name."""
        name = Path(path).name
        if not (name.startswith(cls.CHECKPOINT_PREFIX) and name.endswith(cls.CHECKPOINT_SUFFIX)):
            return None
        tail = name[len(cls.CHECKPOINT_PREFIX): -len(cls.CHECKPOINT_SUFFIX)]
        return int(tail) if tail.isdigit() else None

    def is_complete(self) -> bool:
        """Whether config.yaml and model.safetensors are both there."""
        return self.config_path.is_file() and self.weights_path.is_file()

    def missing(self, weights: bool = True) -> str | None:
        """The first file a complete model directory needs that is missing (config.yaml, then
        model.safetensors unless `weights` is False), or None."""
        for name in (self.CONFIG, self.WEIGHTS) if weights else (self.CONFIG,):
            if not (self.path / name).is_file():
                return name
        return None

    # ---- reading ---------------------------------------------------------------------------------

    def config(self) -> Config:
        """config.yaml; CheckpointError naming the file when it is missing or not a valid config."""
        try:
            return from_dict(Config, load_dict(self.config_path))
        except ConfigError as e:
            raise CheckpointError(f"{self.config_path}: {e}") from None

    def tokenizers(self, config: Config | None = None) -> TokenizerPair:
        """The SentencePiece model(s), checked against the model config (`config`, else config.yaml):
        CheckpointError for a tokenizer whose size does not fit the model, TokenizerError when there is
        none."""
        config = config if config is not None else self.config()
        tokenizers = TokenizerPair.load(self.path)
        for side, tok, expected in (("source", tokenizers.src, config.model.src_vocab_size),
                                    ("target", tokenizers.tgt, config.model.tgt_vocab_size)):
            if tok.vocab_size != expected:
                raise CheckpointError(
                    f"{self.path}: the {side} tokenizer has {tok.vocab_size} pieces but the model was built for "
                    f"{expected}; the tokenizer does not belong to this model"
                )
        return tokenizers

    def weights(self, path: str | Path | None = None) -> dict[str, torch.Tensor]:
        """The weights in `path` (default: model.safetensors)."""
        return load_weights(path if path is not None else self.weights_path)

    def load_weights_into(self, model: torch.nn.Module, path: str | Path | None = None) -> None:
        """Load the weights in `path` (default: model.safetensors) into `model`, refusing any mismatch."""
        path = Path(path) if path is not None else self.weights_path
        load_into(model, load_weights(path), path)

    def own_files(self) -> list[Path]:
        """The files of this directory's layout that are there: config.yaml, the weights, the
        tokenizers, the lexicon, metadata.json, the log and its plot, checkpoints/, train_state/ and
        hf_family/ (what no command's output may replace: `seq2seq.storage.outputs.check_output_path`)."""
        names = [self.CONFIG, self.WEIGHTS, self.BEST_WEIGHTS, self.METADATA, self.LOG, self.CURVES,
                 self.TOKENIZER_META, self.LEXICON, JOINT_MODEL, SRC_MODEL, TGT_MODEL]
        files = [self.path / name for name in names]
        for folder in (self.checkpoint_dir, self.path / self.TRAIN_STATE, self.path / f"{self.TRAIN_STATE}.old",
                       self.path / self.HF_FAMILY):
            if folder.is_dir():
                files += sorted(folder.iterdir())
        return [p for p in files if p.is_file()]

    def lexicon(self) -> Lexicon | None:
        """The word lexicon of the training pairs (None: a model trained before it was written, or not on
        text pairs)."""
        return Lexicon.load(self.lexicon_path) if self.lexicon_path.is_file() else None

    def metadata(self) -> dict[str, Any]:
        """metadata.json ({} when there is none yet)."""
        return read_json(self.metadata_path) if self.metadata_path.is_file() else {}

    def trained_weights_path(self) -> Path:
        """The weights training kept as the best: model.best.safetensors where a recipe installed other
        weights as model.safetensors (`install_weights`), else model.safetensors."""
        return self.best_weights_path if self.best_weights_path.is_file() else self.weights_path

    def decoding_choice(self) -> DecodingChoice | None:
        """What `set_decoding` recorded in metadata.json (values, chosen_on, chosen_by, weights), or None."""
        return self.metadata().get(self.DECODING_CHOSEN_ON)

    def checkpoints(self) -> list[Path]:
        """The step_N.safetensors files of checkpoints/, oldest step first."""
        if not self.checkpoint_dir.is_dir():
            return []
        found = [(self.checkpoint_step(p), p) for p in self.checkpoint_dir.iterdir()]
        return [p for step, p in sorted((s, p) for s, p in found if s is not None)]

    def last_checkpoints(self, last: int | None = None) -> list[Path]:
        """The last `last` checkpoints (all when None), oldest first; CheckpointError when there are none,
        or fewer than `last` (averaging and checkpoint ensembles take them from here)."""
        paths = self.checkpoints()
        if not paths:
            raise CheckpointError(f"no checkpoints (step_N.safetensors) in {self.checkpoint_dir}")
        if last is not None:
            if last > len(paths):
                raise CheckpointError(f"{self.checkpoint_dir} holds only {len(paths)} checkpoint(s), not {last}")
            paths = paths[-last:]
        return paths

    def average(self, last: int | None = None) -> tuple[dict[str, torch.Tensor], list[Path]]:
        """The mean of the last `last` checkpoints (all when None, see `last_checkpoints`), and their
        paths. When config.yaml is there, the result is checked against the model it describes."""
        paths = self.last_checkpoints(last)
        state = average_checkpoints(paths)
        if self.config_path.is_file():  # refuse checkpoints that do not fit the model config
            load_into(Seq2SeqTransformer(self.config().model), state, paths[-1])
        return state, paths

    def train_state(self) -> Path | None:
        """The newest complete train-state directory, or None (nothing to resume)."""
        for candidate in (self.path / self.TRAIN_STATE, self.path / f"{self.TRAIN_STATE}.old"):
            if (candidate / "COMPLETE").is_file():
                return candidate
        return None

    def train_state_step(self) -> int | None:
        """The step the newest complete train state was saved at, or None (nothing to resume)."""
        state = self.train_state()
        return None if state is None else int(read_json(state / "state.json")["step"])

    def load(self, device: str = "cpu", weights: str | Path | None = None,
             encoder: Encoder | None = None) -> LoadedModel:
        """See `load_model_dir`."""
        if not self.path.is_dir():
            raise CheckpointError(f"model directory not found: {self.path}")
        missing = self.missing(weights=not weights)
        if missing:
            raise CheckpointError(f"{self.path} is not a complete model directory: {missing} is missing")
        cfg = self.config()
        tokenizers = self.tokenizers(cfg)
        model = Seq2SeqTransformer(cfg.model, encoder)
        self.load_weights_into(model, weights)
        placed = choose_device(device)
        use_fast_attention_kernels(placed)  # (a decoding step is a new shape: no per-shape cuDNN plans)
        model.to(placed).eval()
        return LoadedModel(model, cfg, tokenizers, self.path)

    # ---- writing (training, import) --------------------------------------------------------------

    def write_config(self, cfg: Config) -> None:
        write_text_atomic(self.config_path, config_yaml(cfg))

    def write_lexicon(self, lexicon: Lexicon) -> None:
        write_text_atomic(self.lexicon_path, lexicon.tsv())

    def write_lexicon_file(self, path: str | Path) -> None:
        """lexicon.tsv: a copy of the lexicon file at `path`."""
        write_text_atomic(self.lexicon_path, Path(path).read_text(encoding="utf-8"))

    def write_metadata(self, meta: Mapping[str, object]) -> None:
        write_json_atomic(self.metadata_path, meta)

    def update_metadata(self, values: Mapping[str, object]) -> None:
        """metadata.json with `values` set (the other keys kept)."""
        meta = self.metadata()
        meta.update(values)
        self.write_metadata(meta)

    def save_weights(self, state: dict[str, torch.Tensor]) -> None:
        """model.safetensors: the weights translation uses."""
        save_weights(state, self.weights_path)

    def set_decoding(self, chosen_by: str, chosen_on: str = "val", weights: str | None = None,
                     **values: Unpack[SearchFields]) -> SearchConfig:
        """Make `values` (fields of the `decoding` section, e.g. beam=5, lenpen=1.4) the defaults every
        decoding command and class takes from this directory, and record who chose them on what.

        config.yaml is rewritten with only those keys changed (everything else kept as it is), after
        the whole config has been checked as a config file is: a value that `SearchConfig` refuses
        (an unknown key, a wrong type, a broken rule) raises ConfigError naming `decoding.KEY`, and
        nothing is written. The write is atomic (the old file stays if it fails). metadata.json's
        `decoding_chosen_on` then records {values, chosen_on, chosen_by, weights}: `weights` names
        the weights the choice was made with (see `install_weights`). Returns the new section."""
        self.config()  # a missing or broken config.yaml: CheckpointError naming it
        raw = load_dict(self.config_path)
        cfg = from_dict(Config, {**raw, "decoding": {**(raw.get("decoding") or {}), **values}})  # names decoding.KEY
        typed = {key: getattr(cfg.decoding, key) for key in values}
        raw["decoding"] = {**(raw.get("decoding") or {}), **typed}
        write_text_atomic(self.config_path, yaml.safe_dump(raw, sort_keys=False))
        self.update_metadata({self.DECODING_CHOSEN_ON: {"values": typed, "chosen_on": chosen_on,
                                                        "chosen_by": chosen_by, "weights": weights}})
        return cfg.decoding

    def install_weights(self, path: str | Path) -> None:
        """Make the weights in `path` (e.g. averaged checkpoints, model.avg10.safetensors, or
        `trained_weights_path()` to undo) what model.safetensors holds, so that every command that
        loads this directory uses them. The first time, training's best weights are kept as
        model.best.safetensors (`trained_weights_path`); both copies are atomic."""
        path = Path(path)
        if path.resolve() == self.weights_path.resolve():
            return
        if not self.best_weights_path.is_file():
            with atomic_path(self.best_weights_path) as tmp:
                shutil.copyfile(self.weights_path, tmp)
        with atomic_path(self.weights_path) as tmp:
            shutil.copyfile(path, tmp)

    def forget_choices(self) -> None:
        """What a recipe chose for earlier weights no longer holds (a training run starts): drop
        metadata.json's `decoding_chosen_on` and model.best.safetensors."""
        meta = self.metadata()
        if meta.pop(self.DECODING_CHOSEN_ON, None) is not None:
            self.write_metadata(meta)
        self.best_weights_path.unlink(missing_ok=True)

    def save_checkpoint(self, state: dict[str, torch.Tensor], step: int, keep_last: int) -> None:
        """checkpoints/step_N.safetensors, then all but the last `keep_last` removed."""
        save_weights(state, self.checkpoint_path(step))
        kept = self.checkpoints()
        for old in kept[: max(0, len(kept) - keep_last)]:
            old.unlink()

    def discard_partial_writes(self) -> list[Path]:
        """Remove what saves killed midway left (temporary `.*.tmp` files, an incomplete train_state.new/);
        returns them. A complete train_state.new/ whose swap was cut short (train_state/ already moved
        aside) becomes train_state/. Call only when no other process writes this directory (a training
        run, at its start)."""
        new, final = self.path / f"{self.TRAIN_STATE}.new", self.path / self.TRAIN_STATE
        if (new / "COMPLETE").is_file() and not final.exists():
            os.replace(new, final)
        leftovers = [*self.path.glob(".*.tmp"), *self.checkpoint_dir.glob(".*.tmp"), new]
        found = [p for p in leftovers if p.exists()]
        for p in found:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        return found

    def save_train_state(self, files: dict[str, Any]) -> None:
        """Write the resume state as a directory swapped in atomically.

        `files` maps file names to content: `.safetensors` -> dict of tensors, `.json` -> data.
        """
        final = self.path / self.TRAIN_STATE
        new = self.path / f"{self.TRAIN_STATE}.new"
        old = self.path / f"{self.TRAIN_STATE}.old"
        shutil.rmtree(new, ignore_errors=True)
        new.mkdir(parents=True)
        for name, content in files.items():
            target = new / name
            if name.endswith(".safetensors"):
                save_weights(content, target)
            elif name.endswith(".json"):
                write_json_atomic(target, content)
            else:
                raise ValueError(f"unknown train-state file type: {name}")
        (new / "COMPLETE").write_text("ok\n")
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
        os.replace(new, final)
        shutil.rmtree(old, ignore_errors=True)


def load_model_dir(path: str | Path, device: str = "cpu", weights: str | Path | None = None,
                   encoder: Encoder | None = None) -> LoadedModel:
    """Load a model directory, refusing missing files or a tokenizer that does not fit the model.

    weights: other weights than model.safetensors (e.g. averaged checkpoints).
    encoder: for a model trained with an injected encoder (`run_training(..., encoder=...)`), an
    instance of the same module; its weights are replaced by the saved ones."""
    return ModelDir(path).load(device, weights, encoder)


__all__ = ["LoadedModel", "ModelDir", "load_model_dir"]
