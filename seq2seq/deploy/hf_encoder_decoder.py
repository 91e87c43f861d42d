"""A model with a transformers backbone (`model.encoder.type: hf`) as a transformers
`VisionEncoderDecoderModel` (image backbones) or `SpeechEncoderDecoderModel` (wav2vec2, HuBERT),
computing the same logits (`seq2seq export MODEL_DIR --to hf` writes it for such a model).

    encoder           the backbone, its tensors as they are (ours `encoder.backbone.X`, theirs `encoder.X`)
    enc_to_dec_proj   the same module under the same name, when the widths differ
    decoder           MarianForCausalLM (post-norm, sinusoidal positions; the model dimension permuted as
                      `seq2seq.deploy.hf` does) or BlenderbotForCausalLM (pre-norm, its position table
                      written), with cross-attention. The cross-attention keys and values read the memory,
                      which is not permuted, so their input columns are left as they are.

Beside the weights: preprocessor_config.json (the backbone's preprocessing, saved in our model directory),
the MarianTokenizer files of the target SentencePiece model (`AutoTokenizer` decodes the ids) and
seq2seq_config.yaml. With torchvision installed, transformers resizes images with its torchvision backend,
whose antialiasing differs slightly from the PIL backend our model was trained with; audio must be at the
extractor's sampling rate (we resample with soxr when reading files).

Refused, with the reason: Whisper backbones (transformers builds a SpeechEncoderDecoderModel's encoder from
a WhisperConfig as the whole WhisperModel, and it would attend to the padding of the 30 s window that our
model masks), post-norm decoders with learned positions (Marian's positions are fixed).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from seq2seq.config.root import config_yaml
from seq2seq.deploy.hf import (
    HF_CONFIG, MarianSizes, _get, _write_marian_tokenizer, generation_config, marian_permutation, permuted, tensor_map,
)
from seq2seq.deploy.staging import ExportError, Staging, prepare_output, require
from seq2seq.model.encoders.sources import IMAGE
from seq2seq.config.encoder_section import HFEncoderConfig
from seq2seq.model.encoders.hf import backbone_config, hf_preprocessor
from seq2seq.model.layers import sinusoidal_table
from seq2seq.storage.model_dir import LoadedModel, load_model_dir
from seq2seq.text.tokenizer import BOS_ID, EOS_ID, PAD_ID

if TYPE_CHECKING:  # an optional dependency (the export extra)
    from transformers import PreTrainedConfig, PreTrainedModel

BACKBONE = "encoder.backbone."


class _DecoderSettings(MarianSizes):
    vocab_size: int
    is_decoder: bool
    add_cross_attention: bool
    tie_word_embeddings: bool


def decoder_config(loaded: LoadedModel) -> PreTrainedConfig:
    """MarianConfig (post-norm) or BlenderbotConfig (pre-norm) of our decoder, with cross-attention."""
    m = loaded.config.model
    if m.norm == "post" and m.positions == "learned":
        raise ExportError("a post-norm decoder with learned positions has no exact transformers architecture: "
                          "MarianForCausalLM computes fixed sinusoidal positions; train with model.positions=sinusoidal")
    common: _DecoderSettings = {
        "vocab_size": m.tgt_vocab_size, "d_model": m.d_model, "decoder_layers": m.n_decoder_layers,
        "decoder_attention_heads": m.heads, "decoder_ffn_dim": m.ffn_dim, "encoder_layers": 1,
        "encoder_attention_heads": m.heads, "encoder_ffn_dim": m.ffn_dim, "max_position_embeddings": m.max_positions,
        "activation_function": m.activation, "dropout": m.dropout, "attention_dropout": m.attention_dropout,
        "activation_dropout": m.activation_dropout, "decoder_layerdrop": 0.0, "scale_embedding": True,
        "pad_token_id": PAD_ID, "bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "decoder_start_token_id": BOS_ID,
        "forced_eos_token_id": None, "is_decoder": True, "add_cross_attention": True,
        "tie_word_embeddings": m.tie_output,
    }
    # add_cross_attention is none of these dataclasses' fields: transformers' configs take other settings as
    # keyword arguments too (`strict(accept_kwargs=True)`), which their typed signatures do not show
    if m.norm == "post":
        from transformers import MarianConfig

        return MarianConfig(decoder_vocab_size=m.tgt_vocab_size, share_encoder_decoder_embeddings=False,  # type: ignore[misc]
                            **common)
    from transformers import BlenderbotConfig

    return BlenderbotConfig(**common)  # type: ignore[misc]


def decoder_map(loaded: LoadedModel) -> list[tuple[str, str, str]]:
    """(our tensor, HF tensor, kind) for the decoder (see `seq2seq.deploy.hf.tensor_map`), HF names under
    `decoder.`; the cross-attention keys/values read the unpermuted memory."""
    rows = []
    for ours, theirs, kind in tensor_map(loaded.config.model):
        if not ours.startswith("decoder."):
            continue
        if ".cross_attn.in_proj.weight#" in ours and not ours.endswith("#0"):
            kind = "none"
        rows.append((ours, f"decoder.{theirs}", kind))
    return rows


def hf_encoder_decoder(loaded: LoadedModel) -> PreTrainedModel:
    """The transformers model (eval mode) computing the same logits as `loaded.model`."""
    import transformers

    enc = loaded.config.model.encoder
    assert isinstance(enc, HFEncoderConfig)
    if enc.spec.inputs == "log-mel":
        raise ExportError(
            "a Whisper backbone has no transformers encoder-decoder to go to: SpeechEncoderDecoderModel builds it as "
            "the whole WhisperModel, and would attend to the padding of the 30 s window that this model masks")
    m = loaded.config.model
    vision = enc.spec.kind == IMAGE.name
    prefix = "VisionEncoderDecoder" if vision else "SpeechEncoderDecoder"
    config = getattr(transformers, f"{prefix}Config").from_encoder_decoder_configs(backbone_config(enc),
                                                                                   decoder_config(loaded))
    config.decoder_start_token_id, config.pad_token_id, config.eos_token_id = BOS_ID, PAD_ID, EOS_ID
    model = getattr(transformers, f"{prefix}Model")(config=config).eval()

    state = {k: v.detach().float().cpu() for k, v in loaded.model.state_dict().items()}
    state["decoder.positions"] = (state["decoder.embed.positions.weight"] if m.positions == "learned"
                                  else sinusoidal_table(m.max_positions, m.d_model))
    state["decoder.output"] = state.get("decoder.output.weight", state["decoder.embed.tokens.weight"])
    perm = marian_permutation(m.d_model) if m.norm == "post" else None
    new = {f"encoder.{k[len(BACKBONE):]}": v for k, v in state.items() if k.startswith(BACKBONE)}
    new.update({k: v for k, v in state.items() if k.startswith("enc_to_dec_proj.")})
    for ours, theirs, kind in decoder_map(loaded):
        new[theirs] = permuted(_get(state, ours, m.d_model), kind, perm)
    own = model.state_dict()
    wrong = [k for k, t in new.items() if k not in own or own[k].shape != t.shape]
    if wrong:
        raise ExportError(f"internal: transformers' {prefix}Model has no tensor of that shape for {wrong[:5]}")
    # Left as transformers initialises them: Marian's sinusoidal table, and a pooler our encoder never uses.
    missing = [k for k in own if k not in new and not k.endswith("embed_positions.weight") and ".pooler." not in k]
    if missing:
        raise ExportError(f"internal: no value for {missing[:5]}")
    with torch.no_grad():
        for k, t in new.items():
            own[k].copy_(t)
    return model


def export_encoder_decoder(model_dir: str | Path, out_dir: str | Path, weights: str | Path | None = None,
                           force: bool = False) -> Path:
    """Write MODEL_DIR as a transformers directory (`AutoModel.from_pretrained(out_dir)` gives the
    Vision/SpeechEncoderDecoderModel; see the module docstring). As `seq2seq.deploy.hf.export_hf`."""
    require("transformers")
    out = prepare_output(out_dir, force, [Path(model_dir)])
    loaded = load_model_dir(model_dir, device="cpu", weights=weights)
    if not isinstance(loaded.config.model.encoder, HFEncoderConfig):
        raise ExportError(f"{model_dir} has no transformers backbone (model.encoder.type hf); use export_hf")
    model = hf_encoder_decoder(loaded)
    model.generation_config = generation_config(loaded)
    with Staging(out) as tmp:
        model.save_pretrained(str(tmp), safe_serialization=True)
        hf_preprocessor(loaded.config.model.encoder).save_pretrained(str(tmp))
        _write_marian_tokenizer(loaded.tokenizers, tmp, loaded.config.model.max_positions)
        (tmp / HF_CONFIG).write_text(
            f"# The seq2seq config of {Path(model_dir).resolve()}.\n" + config_yaml(loaded.config), encoding="utf-8")
    return out


__all__ = ["decoder_config", "decoder_map", "export_encoder_decoder", "hf_encoder_decoder"]
