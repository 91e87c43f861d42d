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
    # the options of imported fairseq-trained models (M2M100, NLLB, mBART) that no exporter writes yet
    fairseq = {"scale_embedding": True, "position_offset": 0, "position_table": "interleaved", "embedding_norm": False,
               "decoder_start": "bos"}
    changed = [f"{k}: {getattr(cfg, k)}" for k, default in fairseq.items() if getattr(cfg, k) != default]
    if changed:
        raise ExportError(f"{target} export does not write models with model.{', model.'.join(changed)} yet "
                          "(an import of M2M100 / NLLB / mBART: use the original transformers directory)")


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


__all__ = ["check_text_model", "model_tensors", "vocabulary"]
