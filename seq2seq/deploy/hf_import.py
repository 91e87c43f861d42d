"""A Hugging Face `transformers` directory as a model directory, exactly: the same logits (the
inverse of `seq2seq.deploy.hf.export_hf`).

    import_hf(hf_dir, out_dir)   # MarianMTModel / BlenderbotForConditionalGeneration -> model directory

Needs the MarianTokenizer files, with SentencePiece ids pad 0, unk 1, bos 2, eos 3 (as `export_hf`
writes them), and weights in safetensors (never a pickle). The seq2seq config `export_hf` saves
beside the weights is restored when it describes the very model; otherwise the model directory
gets our defaults with the model's sizes.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch

from seq2seq.config.root import Config
from seq2seq.config import ModelConfig, from_dict, load_dict
from seq2seq.deploy.hf import HF_CONFIG, marian_permutation, permuted, tensor_map
from seq2seq.deploy.staging import ExportError, Staging, prepare_output, require
from seq2seq.model.layers import sinusoidal_table
from seq2seq.storage.model_dir import ModelDir
from seq2seq.storage.weights import load_into
from seq2seq.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer, TokenizerPair


def _hf_tokenizers(hf_dir: Path, src_vocab: int, tgt_vocab: int) -> TokenizerPair:
    """Our tokenizers from a transformers directory's MarianTokenizer files; refused unless the
    vocabulary's ids are the SentencePiece model's own ids (with pad 0, unk 1, bos 2, eos 3)."""
    from seq2seq.text.tokenizer import TokenizerError

    if not (hf_dir / "source.spm").is_file():
        raise ExportError(f"{hf_dir} has no source.spm: import-hf needs the SentencePiece model(s) of a "
                          "Marian tokenizer")
    try:
        src = Tokenizer.load(hf_dir / "source.spm")
        tgt = Tokenizer.load(hf_dir / "target.spm") if (hf_dir / "target.spm").is_file() else src
    except TokenizerError as e:
        raise ExportError(f"{e} (import-hf keeps the model's token ids, so the SentencePiece model must have "
                          "them)") from None
    for name, tok, size in (("vocab.json", src, src_vocab), ("target_vocab.json", tgt, tgt_vocab)):
        path = hf_dir / name
        if name == "target_vocab.json" and not path.is_file():
            path = hf_dir / "vocab.json"
        if path.is_file():
            vocab = json.loads(path.read_text(encoding="utf-8"))
            if any(vocab.get(tok.id_to_piece(i)) != i for i in range(tok.vocab_size)) or len(vocab) != tok.vocab_size:
                raise ExportError(
                    f"{path} does not give each piece of the SentencePiece model its own id (as in Helsinki-NLP "
                    "opus-mt models, whose vocabulary is ordered differently); import-hf needs the ids to match"
                )
        if tok.vocab_size != size:
            raise ExportError(f"{hf_dir}: the SentencePiece model has {tok.vocab_size} pieces, the model {size}")
    joint = src.model_proto == tgt.model_proto
    return TokenizerPair(src, src if joint else tgt, joint=joint)


def _model_config_from_hf(config: Any, state: dict[str, torch.Tensor]) -> ModelConfig:
    kind = config.model_type
    if kind not in ("marian", "blenderbot"):
        raise ExportError(f"import-hf reads MarianMTModel (post-norm) and BlenderbotForConditionalGeneration "
                          f"(pre-norm) directories, not {kind!r}")
    problems = []
    if not config.scale_embedding:
        problems.append("scale_embedding is false (seq2seq scales embeddings by sqrt(d_model))")
    if config.activation_function not in ("relu", "gelu"):
        problems.append(f"activation {config.activation_function!r} (seq2seq has relu and gelu)")
    if config.encoder_attention_heads != config.decoder_attention_heads:
        problems.append("different encoder and decoder head counts")
    if config.encoder_ffn_dim != config.decoder_ffn_dim:
        problems.append("different encoder and decoder FFN sizes")
    if config.pad_token_id != PAD_ID or config.eos_token_id != EOS_ID or config.decoder_start_token_id != BOS_ID:
        problems.append(f"special ids pad {config.pad_token_id}, eos {config.eos_token_id}, decoder start "
                        f"{config.decoder_start_token_id} (seq2seq uses pad {PAD_ID}, eos {EOS_ID}, start {BOS_ID})")
    bias = state.get("final_logits_bias")
    if bias is not None and bool(bias.ne(0).any()):
        problems.append("a non-zero final_logits_bias (seq2seq's output projection has no bias)")
    if getattr(config, "layernorm_embedding", False) or getattr(config, "normalize_embedding", False):
        problems.append("a LayerNorm after the embeddings")
    if problems:
        raise ExportError(f"cannot import this {kind} model exactly: " + "; ".join(problems))
    src_vocab = config.vocab_size
    tgt_vocab = getattr(config, "decoder_vocab_size", None) or config.vocab_size
    enc = state["model.encoder.embed_tokens.weight"]
    dec = state["model.decoder.embed_tokens.weight"]
    lm = state.get("lm_head.weight", dec)
    share = enc.shape == dec.shape and torch.equal(enc, dec)
    positions = "sinusoidal"
    if kind == "blenderbot":
        table = sinusoidal_table(config.max_position_embeddings, config.d_model)
        for side in ("encoder", "decoder"):
            if not torch.equal(state[f"model.{side}.embed_positions.weight"], table):
                positions = "learned"
        if positions == "learned" and not torch.equal(state["model.encoder.embed_positions.weight"],
                                                      state["model.decoder.embed_positions.weight"]) and share:
            share = False
    return ModelConfig(
        src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab, d_model=config.d_model,
        heads=config.encoder_attention_heads, ffn_dim=config.encoder_ffn_dim, layers=config.encoder_layers,
        decoder_layers=config.decoder_layers if config.decoder_layers != config.encoder_layers else None,
        dropout=config.dropout, attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout, activation=config.activation_function,
        norm="post" if kind == "marian" else "pre", positions=positions,
        max_positions=config.max_position_embeddings, share_embeddings=share,
        tie_output=lm.shape == dec.shape and torch.equal(lm, dec), pad_id=PAD_ID,
    )


def _restored_config(hf_dir: Path, model: ModelConfig) -> Config | None:
    """The full config `export_hf` saved beside the weights, if it describes this very model."""
    path = hf_dir / HF_CONFIG
    if not path.is_file():
        return None
    try:
        cfg = from_dict(Config, load_dict(path))
    except ValueError:
        return None
    return cfg if cfg.model == model else None


def import_hf(hf_dir: str | Path, out_dir: str | Path, force: bool = False) -> Path:
    """Write a transformers MarianMTModel / BlenderbotForConditionalGeneration directory (with
    MarianTokenizer files whose ids are the SentencePiece model's) as a seq2seq model directory.
    Exact: the same logits (the inverse of `export_hf`)."""
    require("transformers")
    from safetensors.torch import load_file
    from transformers import AutoConfig

    from seq2seq.model.transformer import Seq2SeqTransformer

    hf_dir = Path(hf_dir)
    if not (hf_dir / "config.json").is_file():
        raise ExportError(f"{hf_dir} is not a transformers model directory (no config.json)")
    files = sorted(hf_dir.glob("*.safetensors"))
    if not files:
        raise ExportError(f"{hf_dir} has no .safetensors weights (import-hf reads safetensors only, never pickles)")
    out = prepare_output(out_dir, force, [hf_dir])
    config = AutoConfig.from_pretrained(str(hf_dir))
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update({k: v.float() for k, v in load_file(str(f)).items()})
    # Tied tensors may be stored once: fill them in as transformers would.
    if "model.shared.weight" in state:
        for k in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"):
            state.setdefault(k, state["model.shared.weight"])
    if "lm_head.weight" not in state and getattr(config, "tie_word_embeddings", True):
        state["lm_head.weight"] = state["model.decoder.embed_tokens.weight"]
    m = _model_config_from_hf(config, state)
    tokenizers = _hf_tokenizers(hf_dir, m.src_vocab_size, m.tgt_vocab_size)
    if m.share_embeddings and not tokenizers.joint:
        m = dataclasses.replace(m, share_embeddings=False)
    cfg = _restored_config(hf_dir, m)
    if cfg is None:  # not one of our exports: our defaults, with the model's sizes
        cfg = Config(model=m)
        cfg.tokenizer.joint = tokenizers.joint
        cfg.tokenizer.vocab_size = m.tgt_vocab_size
        if not tokenizers.joint:
            cfg.tokenizer.src_vocab_size, cfg.tokenizer.tgt_vocab_size = m.src_vocab_size, m.tgt_vocab_size

    model = Seq2SeqTransformer(m)
    perm = marian_permutation(m.d_model) if m.norm == "post" else None
    ours: dict[str, torch.Tensor] = {}
    stacked: dict[str, list[torch.Tensor | None]] = {}
    for name, theirs, kind in tensor_map(m):
        if theirs not in state:
            if theirs == "model.shared.weight":
                continue
            raise ExportError(f"{hf_dir}: tensor {theirs} is missing")
        t = permuted(state[theirs], kind, perm, inverse=True)
        base, _, part = name.partition("#")
        if part:
            stacked.setdefault(base, [None, None, None])[int(part)] = t
        else:
            ours[base] = t
    for base, parts in stacked.items():
        ours[base] = torch.cat(parts, dim=0)
    if m.positions == "learned":
        ours["encoder.embed.positions.weight"] = ours.pop("encoder.positions")
        ours["decoder.embed.positions.weight"] = ours.pop("decoder.positions")
    else:
        ours.pop("encoder.positions", None)
        ours.pop("decoder.positions", None)
    output = ours.pop("decoder.output")
    if not m.tie_output:
        ours["decoder.output.weight"] = output
    own = model.state_dict()
    for k in own:  # a module shared between encoder and decoder appears under both names
        if k not in ours and k.startswith("encoder.embed.") and m.share_embeddings:
            ours[k] = ours["decoder" + k[len("encoder"):]]
    load_into(model, {k: v for k, v in ours.items() if k in own}, hf_dir)
    with Staging(out) as tmp:
        model_dir = ModelDir(tmp)
        model_dir.save_weights(model.state_dict())
        model_dir.write_config(cfg)
        tokenizers.save(tmp)
        model_dir.write_metadata({"imported_from": str(hf_dir.resolve()), "architecture": config.model_type})
    return out


__all__ = ["import_hf"]
