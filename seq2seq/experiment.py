"""An experiment: the root config, the training pipeline, and loading a model directory.

    Config = data + tokenizer + model + training + decoding      (configs/*.yaml)
    run_training(cfg): prepare data -> build model -> Trainer -> model directory
    load_model_dir(path) -> LoadedModel(model, config, tokenizers)  (translate, test, average)
"""

from __future__ import annotations

import dataclasses
import logging
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from . import __version__
from . import checkpoint as ckpt
from .batching import Batch, IndexedRows, TokenBatchSampler, collate_text
from .config import ConfigError, ModelConfig, apply_overrides, from_dict, load_dict, to_dict
from .data import DataConfig, prepare
from .model import Seq2SeqTransformer
from .search import SearchConfig
from .tokenizer import PAD_ID, TokenizerConfig, TokenizerPair
from .train import Trainer, TrainingConfig, ValidData, choose_device

log = logging.getLogger(__name__)


@dataclass
class Config:
    """The whole experiment, as written in a YAML file under configs/."""

    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    decoding: SearchConfig = field(default_factory=SearchConfig)


def load_config(path: str | Path | None, overrides: list[str] = ()) -> Config:
    """Read a YAML/JSON config, apply `section.key=value` overrides, validate every key."""
    data = load_dict(path) if path is not None else {}
    return from_dict(Config, apply_overrides(data, list(overrides)))


def config_yaml(cfg: Config) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


# --------------------------------------------------------------------------------------------
# Loading a model directory
# --------------------------------------------------------------------------------------------


@dataclass
class LoadedModel:
    model: Seq2SeqTransformer
    config: Config
    tokenizers: TokenizerPair
    path: Path


def build_model(cfg: Config) -> Seq2SeqTransformer:
    return Seq2SeqTransformer(cfg.model)


def load_model_dir(path: str | Path, device: str = "cpu", weights: str | Path | None = None) -> LoadedModel:
    """Load a model directory, refusing missing files or a tokenizer that does not fit the model."""
    path = Path(path)
    if not path.is_dir():
        raise ckpt.CheckpointError(f"model directory not found: {path}")
    for name in (ckpt.CONFIG, ckpt.WEIGHTS):
        if not (path / name).is_file() and not (name == ckpt.WEIGHTS and weights):
            raise ckpt.CheckpointError(f"{path} is not a complete model directory: {name} is missing")
    try:
        cfg = from_dict(Config, load_dict(path / ckpt.CONFIG))
    except ConfigError as e:
        raise ckpt.CheckpointError(f"{path / ckpt.CONFIG}: {e}") from None
    tokenizers = TokenizerPair.load(path)
    for side, tok, expected in (("source", tokenizers.src, cfg.model.src_vocab_size), ("target", tokenizers.tgt, cfg.model.tgt_vocab_size)):
        if tok.vocab_size != expected:
            raise ckpt.CheckpointError(
                f"{path}: the {side} tokenizer has {tok.vocab_size} pieces but the model was built for "
                f"{expected}; the tokenizer does not belong to this model"
            )
    model = build_model(cfg)
    weights_path = Path(weights) if weights else path / ckpt.WEIGHTS
    ckpt.load_into(model, ckpt.load_weights(weights_path), weights_path)
    model.to(choose_device(device)).eval()
    return LoadedModel(model, cfg, tokenizers, path)


# --------------------------------------------------------------------------------------------
# Training pipeline
# --------------------------------------------------------------------------------------------


def valid_batches(dataset: Any, max_tokens: int) -> list[Batch]:
    """Validation batches in length order (fixed across validations)."""
    sampler = TokenBatchSampler(list(dataset["src_len"]), list(dataset["tgt_len"]), max_tokens=max_tokens, shuffle=False, seed=0)
    rows = IndexedRows(dataset)
    return [collate_text(rows.__getitems__(idx)) for idx in sampler]


def run_training(cfg: Config, resume: bool = False, config_source: str | None = None) -> dict[str, Any]:
    """Prepare data, build the model and train it into cfg.training.output_dir."""
    out_dir = Path(cfg.training.output_dir)
    state_dir = ckpt.train_state_dir(out_dir)
    if state_dir is not None and not resume:
        raise ConfigError(
            f"{out_dir} already holds a training run; pass --resume to continue it, or set "
            f"training.output_dir to a new directory"
        )
    if resume and state_dir is None:
        log.warning("--resume: nothing to resume in %s, starting a new run", out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    prepared = prepare(cfg.data, cfg.tokenizer, out_dir, Path(cfg.data.cache_dir or out_dir / "cache"))
    tok = prepared.tokenizers
    cfg.model = dataclasses.replace(
        cfg.model, src_vocab_size=tok.src.vocab_size, tgt_vocab_size=tok.tgt.vocab_size, pad_id=PAD_ID
    )
    if cfg.model.share_embeddings and not tok.joint:
        raise ConfigError("model.share_embeddings needs a joint tokenizer (tokenizer.joint: true)")
    torch.manual_seed(cfg.training.seed)
    model = build_model(cfg)

    train = prepared.train
    src_lens, tgt_lens = list(train["src_len"]), list(train["tgt_len"])
    sampler = TokenBatchSampler(src_lens, tgt_lens, max_tokens=cfg.training.max_tokens, shuffle=True, seed=cfg.training.seed)
    columns = train.select_columns(["src_ids", "tgt_ids"]).to_dict()  # in memory: collation is per step
    src_col, tgt_col = columns["src_ids"], columns["tgt_ids"]

    def collate(indices: list[int]) -> Batch:
        return collate_text([{"src_ids": src_col[i], "tgt_ids": tgt_col[i], "index": i} for i in indices])

    valid = None
    if prepared.valid is not None and len(prepared.valid):
        valid = ValidData(
            batches=valid_batches(prepared.valid, cfg.training.max_tokens),
            references=list(prepared.valid["tgt"]),
            detokenize=tok.tgt.decode,
        )

    # The model directory's static part, written before training so a checkpoint is always usable.
    ckpt.write_text_atomic(out_dir / ckpt.CONFIG, config_yaml(cfg))
    tok.save(out_dir)
    meta_path = out_dir / ckpt.METADATA
    meta = ckpt.read_json(meta_path) if meta_path.is_file() else {}
    meta.update(
        {
            "seq2seq_version": __version__,
            "torch_version": torch.__version__,
            "python_version": platform.python_version(),
            "config_source": config_source,
            "data_fingerprint": prepared.fingerprint,
            "cleaning": prepared.report.summary(),
            "train_pairs": len(train),
            "valid_pairs": 0 if prepared.valid is None else len(prepared.valid),
            "parameters": model.num_parameters(),
        }
    )
    ckpt.write_json_atomic(meta_path, meta)

    search_cfg = dataclasses.replace(cfg.decoding, strategy="greedy", beam=1, nbest=1)
    trainer = Trainer(model, cfg.training, sampler, collate, valid, out_dir, search_cfg, pad_id=PAD_ID)
    log.info("resolved config:\n%s", config_yaml(cfg))
    log.info("model: %s parameters; device: %s; precision: %s", f"{model.num_parameters():,}", trainer.device, trainer.precision)
    log.info(
        "data: %s train pairs, %s valid pairs; %s; %d batches/epoch, padding %.1f%%",
        f"{len(train):,}", f"{meta['valid_pairs']:,}", prepared.report.summary(), len(sampler),
        100 * sampler.padding_ratio(),
    )
    if resume:
        trainer.resume()
    result = trainer.train()
    result["out_dir"] = str(out_dir)
    return result
