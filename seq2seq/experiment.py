"""An experiment's training pipeline: data -> model -> Trainer -> model directory.

    run_training(cfg): prepare data -> build model -> Trainer -> model directory

The root `Config` lives in `seq2seq.settings` and model-directory loading in `seq2seq.model_dir`
(both re-exported here).
"""

from __future__ import annotations

import dataclasses
import logging
import platform
from pathlib import Path
from typing import Any

import torch

from . import __version__
from . import checkpoint as ckpt
from .batching import Batch, IndexedRows, TokenBatchSampler, collate_text
from .config import ConfigError
from .data import prepare
from .model_dir import LoadedModel, build_model, load_model_dir  # noqa: F401 - re-exported
from .settings import Config, config_yaml, load_config  # noqa: F401 - re-exported
from .tokenizer import PAD_ID
from .train import Trainer, ValidData

log = logging.getLogger(__name__)


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
