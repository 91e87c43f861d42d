"""Our model as the exporters read it: a text model's weights by name, its vocabularies, and the
checks every target makes."""

from __future__ import annotations


import torch

from seq2seq.config import ModelConfig
from seq2seq.deploy.staging import ExportError
from seq2seq.model.layers import sinusoidal_table
from seq2seq.storage.model_dir import LoadedModel
from seq2seq.text.tokenizer import PAD_ID, Tokenizer


def check_text_model(cfg: ModelConfig, target: str) -> None:
    if cfg.encoder.type != "text":
        raise ExportError(f"{target} export needs a text model; this one has a {cfg.encoder.type!r} encoder")
    if cfg.pad_id != PAD_ID:
        raise ExportError(f"{target} export needs model.pad_id {PAD_ID}, got {cfg.pad_id}")
    changed = fairseq_options(cfg)
    if changed:  # `seq2seq export` writes these models as their own architecture (fairseq_export)
        raise ExportError(f"{target} export of seq2seq's own architecture does not write model."
                          f"{', model.'.join(changed)} (the options of an imported M2M100 / NLLB / mBART model: "
                          "seq2seq.deploy.fairseq_export writes it as that architecture)")


# the model options import-hf sets for the fairseq-trained families (M2M100, NLLB, mBART), and what
# seq2seq's own architecture computes
FAIRSEQ_DEFAULTS: dict[str, object] = {"scale_embedding": True, "position_offset": 0, "position_table": "interleaved",
                                    "embedding_norm": False, "decoder_start": "bos"}


def fairseq_options(m: ModelConfig) -> list[str]:
    """The fairseq options of `m` that differ from our architecture's, as `key: value`."""
    return [f"{k}: {getattr(m, k)}" for k, default in FAIRSEQ_DEFAULTS.items() if getattr(m, k) != default]


def is_family_model(m: ModelConfig) -> bool:
    """Do the fairseq options say this model is exported as M2M100 / mBART (fairseq_export)?
    scale_embedding alone does not: Marian and Blenderbot have that switch, and refuse it themselves."""
    return any(getattr(m, k) != default for k, default in FAIRSEQ_DEFAULTS.items() if k != "scale_embedding")


def model_tensors(loaded: LoadedModel) -> dict[str, torch.Tensor]:
    """The model's weights in fp32 on the CPU, plus `*.positions` (the position table, learned or
    sinusoidal) and `decoder.output` (the output projection, the target embedding when tied)."""
    cfg = loaded.config.model
    state = {k: v.detach().float().cpu() for k, v in loaded.model.state_dict().items()}
    if cfg.positions == "learned":
        state["encoder.positions"] = state["encoder.embed.positions.weight"]
        state["decoder.positions"] = state["decoder.embed.positions.weight"]
    else:
        state["encoder.positions"] = state["decoder.positions"] = sinusoidal_table(cfg.max_positions, cfg.d_model)
    state["decoder.output"] = state.get("decoder.output.weight", state["decoder.embed.tokens.weight"])
    return state


def vocabulary(tok: Tokenizer) -> list[str]:
    pieces = [tok.id_to_piece(i) for i in range(tok.vocab_size)]
    if len(set(pieces)) != len(pieces):
        raise ExportError(f"{tok.name} has duplicate pieces; an engine vocabulary needs unique tokens")
    return pieces


__all__ = ["FAIRSEQ_DEFAULTS", "check_text_model", "fairseq_options", "is_family_model", "model_tensors", "vocabulary"]
