"""Loading a model directory (see `seq2seq.storage.files` for its files) for inference.

    load_model_dir(path) -> LoadedModel(model, config, tokenizers, path)

Used by translate, caption, transcribe, test and average; imports neither training nor the data
pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from seq2seq.storage import files as ckpt
from seq2seq.config.schema import ConfigError, from_dict, load_dict
from seq2seq.accel.device import choose_device
from seq2seq.model.encoders.base import Encoder
from seq2seq.model.transformer import Seq2SeqTransformer
from seq2seq.config.root import Config
from seq2seq.text.tokenizer import TokenizerPair


@dataclass
class LoadedModel:
    model: Seq2SeqTransformer
    config: Config
    tokenizers: TokenizerPair
    path: Path


def build_model(cfg: Config, encoder: Encoder | None = None) -> Seq2SeqTransformer:
    return Seq2SeqTransformer(cfg.model, encoder)


def load_model_dir(path: str | Path, device: str = "cpu", weights: str | Path | None = None,
                   encoder: Encoder | None = None) -> LoadedModel:
    """Load a model directory, refusing missing files or a tokenizer that does not fit the model.

    encoder: for a model trained with an injected encoder (`run_training(..., encoder=...)`), an
    instance of the same module; its weights are replaced by the saved ones."""
    path = Path(path)
    if not path.is_dir():
        raise ckpt.CheckpointError(f"model directory not found: {path}")
    for name in (ckpt.CONFIG, ckpt.WEIGHTS):
        if not (path / name).is_file() and not (name == ckpt.WEIGHTS and weights):
            raise ckpt.CheckpointError(f"{path} is not a complete model directory: {name} is missing")
    cfg, tokenizers = read_config_and_tokenizers(path)
    model = build_model(cfg, encoder)
    weights_path = Path(weights) if weights else path / ckpt.WEIGHTS
    ckpt.load_into(model, ckpt.load_weights(weights_path), weights_path)
    model.to(choose_device(device)).eval()
    return LoadedModel(model, cfg, tokenizers, path)


def read_config_and_tokenizers(path: Path) -> tuple[Config, TokenizerPair]:
    """A model directory's config.yaml and tokenizer, checked against each other: CheckpointError
    naming the file for a bad config or a tokenizer whose size does not fit the model, TokenizerError
    when there is none."""
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
    return cfg, tokenizers
