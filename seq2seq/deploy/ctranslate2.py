"""A model directory as a CTranslate2 model (`ctranslate2.specs.TransformerSpec`).

    export_ctranslate2(model_dir, out_dir, quantize=None)  # CTranslate2 model + SentencePiece model(s)

The mapping is exact for every text model this toolkit builds: pre- or post-norm (with the final
LayerNorms of pre-norm), relu or gelu (erf), sinusoidal positions (our interleaved table, written
into the model, since CTranslate2's own table puts all sines before all cosines) or learned ones,
embeddings scaled by sqrt(d_model), shared or separate vocabularies, tied or separate output
projection. The fused q/k/v projection maps onto CTranslate2's fused self-attention projection;
cross-attention is split into q and the fused k/v. The export directory holds `model.bin`, the
vocabularies (the SentencePiece pieces in id order), our SentencePiece model(s) and `seq2seq.json`
(the model's config, for the decoding defaults: see `seq2seq.deploy.engine`). A model imported from
M2M100 / NLLB / mBART is refused here: `seq2seq.deploy.fairseq_export` converts it with CTranslate2's
own converter (`seq2seq export` chooses).

int8 quantizations (`int8`, `int8_float32`, `int8_float16`, `int8_bfloat16`) store the weights with 7
bits (integers in [-63, 63], one scale per output row), not CTranslate2's 8. CPUs without VNNI (most
AVX2 laptops and VMs) multiply int8 matrices with u8 x s8 instructions that add the products of
pairs into 16-bit sums: with activations up to 255 (u8) and 8-bit weights up to 127, such a sum
reaches 2 * 255 * 127 = 64770 and saturates at 32767, which garbles outputs (oneDNN and OpenVINO
document this; benchmarks/README.md has what it cost a trained model). With 7-bit
weights the sum stays under 2 * 255 * 63 = 32130: the model computes the same on every CPU and GPU,
at the cost of one bit of weight precision.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from seq2seq.config import to_dict
from seq2seq.deploy.staging import ExportError, ExportInfo, Staging, prepare_output, require, weights_digest, write_export_info
from seq2seq.deploy.tensors import check_text_model, model_tensors, vocabulary
from seq2seq.storage.model_dir import LoadedModel, ModelDir, load_model_dir
from seq2seq.text.languages import model_languages
from seq2seq.text.tokenizer import BOS_ID, EOS_ID, UNK_ID

if TYPE_CHECKING:  # (ctranslate2 ships no type information: mypy leaves these names unchecked)
    from ctranslate2.specs import common_spec, model_spec, transformer_spec

QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16")
INT8_WEIGHT_BITS = 7  # see the module docstring: no 16-bit saturation on CPUs without VNNI


def quantize_spec_int8(spec: model_spec.ModelSpec, quantization: str, bits: int = INT8_WEIGHT_BITS) -> None:
    """Quantize `spec`'s weights in place for an int8 `quantization`, as CTranslate2 would but with
    `bits`-bit integers: each weight that has a scale ([N, K], one scale per row: w ~ q / scale) becomes
    int8 in [-(2^(bits-1) - 1), 2^(bits-1) - 1]; the other float variables take the float type the
    quantization names (int8_float16: float16, ...). The spec is then saved with no further quantization."""
    import numpy as np
    from ctranslate2.specs import model_spec

    qmax = 2 ** (bits - 1) - 1
    float_type = {"int8": None, "int8_float32": None, "int8_float16": "float16", "int8_bfloat16": "bfloat16"}[quantization]

    def visit(layer: model_spec.LayerSpec, name: str, value: object) -> None:
        if not isinstance(value, model_spec.Variable) or value.is_scalar() or value.dtype != "float32":
            return
        key = name.split("/")[-1]
        if hasattr(layer, f"{key}_scale"):
            w = value.numpy().astype(np.float32, copy=False)
            amax = np.abs(w).max(axis=1)
            scale = (qmax / np.where(amax > 0, amax, 1.0)).astype(np.float32)
            setattr(layer, key, np.rint(w * scale[:, None]).astype(np.int8))
            setattr(layer, f"{key}_scale", scale)
        elif float_type is not None:
            setattr(layer, key, value.to(float_type))

    model_spec.visit_spec(spec, visit)


def ctranslate2_spec(loaded: LoadedModel) -> transformer_spec.TransformerSpec:
    """The `ctranslate2.specs.TransformerSpec` of a loaded model, vocabularies registered."""
    require("ctranslate2")
    from ctranslate2.specs import common_spec, transformer_spec

    cfg = loaded.config.model
    check_text_model(cfg, "CTranslate2")
    w = {k: v.numpy() for k, v in model_tensors(loaded).items()}
    d = cfg.d_model
    activation = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
                  "swish": common_spec.Activation.SWISH}[cfg.activation]
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg.n_encoder_layers, cfg.n_decoder_layers), cfg.heads, pre_norm=cfg.norm == "pre",
        activation=activation, alignment_layer=-1, alignment_heads=cfg.heads,
    )

    def linear(dst: common_spec.LinearSpec, prefix: str, rows: slice = slice(None)) -> None:
        dst.weight = w[f"{prefix}.weight"][rows]
        dst.bias = w[f"{prefix}.bias"][rows]

    def norm(dst: common_spec.LayerNormSpec, prefix: str) -> None:
        dst.gamma = w[f"{prefix}.weight"]
        dst.beta = w[f"{prefix}.bias"]

    enc, dec = spec.encoder, spec.decoder
    enc.embeddings[0].weight = w["encoder.embed.tokens.weight"]
    enc.position_encodings.encodings = w["encoder.positions"]
    dec.embeddings.weight = w["decoder.embed.tokens.weight"]
    dec.position_encodings.encodings = w["decoder.positions"]
    dec.projection.weight = w["decoder.output"]
    if cfg.norm == "pre":
        norm(enc.layer_norm, "encoder.final_norm")
        norm(dec.layer_norm, "decoder.final_norm")
    for i, layer in enumerate(enc.layer):
        p = f"encoder.layers.{i}"
        linear(layer.self_attention.linear[0], f"{p}.self_attn.in_proj")
        linear(layer.self_attention.linear[1], f"{p}.self_attn.out_proj")
        norm(layer.self_attention.layer_norm, f"{p}.attn_block.norm")
        linear(layer.ffn.linear_0, f"{p}.ffn.w1")
        linear(layer.ffn.linear_1, f"{p}.ffn.w2")
        norm(layer.ffn.layer_norm, f"{p}.ffn_block.norm")
    for i, layer in enumerate(dec.layer):
        p = f"decoder.layers.{i}"
        linear(layer.self_attention.linear[0], f"{p}.self_attn.in_proj")
        linear(layer.self_attention.linear[1], f"{p}.self_attn.out_proj")
        norm(layer.self_attention.layer_norm, f"{p}.self_block.norm")
        linear(layer.attention.linear[0], f"{p}.cross_attn.in_proj", slice(0, d))
        linear(layer.attention.linear[1], f"{p}.cross_attn.in_proj", slice(d, 3 * d))
        linear(layer.attention.linear[2], f"{p}.cross_attn.out_proj")
        norm(layer.attention.layer_norm, f"{p}.cross_block.norm")
        linear(layer.ffn.linear_0, f"{p}.ffn.w1")
        linear(layer.ffn.linear_1, f"{p}.ffn.w2")
        norm(layer.ffn.layer_norm, f"{p}.ffn_block.norm")

    src_vocab, tgt_vocab = vocabulary(loaded.tokenizers.src), vocabulary(loaded.tokenizers.tgt)
    spec.register_source_vocabulary(src_vocab)
    spec.register_target_vocabulary(tgt_vocab)
    spec.config.add_source_eos = True
    spec.config.unk_token = tgt_vocab[UNK_ID]
    spec.config.bos_token = tgt_vocab[BOS_ID]
    spec.config.eos_token = tgt_vocab[EOS_ID]
    spec.config.decoder_start_token = tgt_vocab[BOS_ID]
    spec.config.layer_norm_epsilon = 1e-5  # torch.nn.LayerNorm's
    if src_vocab[EOS_ID] != tgt_vocab[EOS_ID] or src_vocab[UNK_ID] != tgt_vocab[UNK_ID]:
        raise ExportError("the source and target SentencePiece models name their special pieces differently")
    return spec


def export_ctranslate2(
    model_dir: str | Path,
    out_dir: str | Path,
    quantize: str | None = None,
    weights: str | Path | None = None,
    force: bool = False,
) -> Path:
    """Write MODEL_DIR as a CTranslate2 model into `out_dir` (see the module docstring).

    quantize: CTranslate2's weight quantization (int8, int16, float16, ...); None keeps fp32.
    weights: other weights than MODEL_DIR/model.safetensors (e.g. averaged checkpoints).
    """
    ct2 = require("ctranslate2")
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ExportError(f"unknown quantization {quantize!r}; choose one of {', '.join(QUANTIZATIONS)}")
    model_dir = Path(model_dir)
    out = prepare_output(out_dir, force, [model_dir])
    loaded = load_model_dir(model_dir, device="cpu", weights=weights)
    languages = model_languages(loaded.config)
    if languages:
        raise ExportError(f"{model_dir} is multilingual ({', '.join(languages)}): the CTranslate2 engine has no "
                          f"language tags, so it could not choose the target language; translate it with the torch "
                          f"engine (--tgt-lang)")
    spec = ctranslate2_spec(loaded)
    weights_path = Path(weights) if weights else ModelDir(model_dir).weights_path

    int8 = quantize is not None and quantize.startswith("int8")
    if quantize is not None and int8:
        spec.validate()  # the variables as CTranslate2 holds them (`Variable`s), aliases not yet made
        quantize_spec_int8(spec, quantize)

    from ctranslate2.converters import Converter

    class _Converter(Converter):
        def _load(self) -> transformer_spec.TransformerSpec:
            return spec

    with Staging(out) as tmp:
        _Converter().convert(str(tmp / "ct2"), quantization=None if int8 else quantize, force=True)
        for f in (tmp / "ct2").iterdir():
            os.replace(f, tmp / f.name)
        (tmp / "ct2").rmdir()
        loaded.tokenizers.save(tmp)
        info: ExportInfo = {"ctranslate2": ct2.__version__, "quantization": quantize or "float32"}
        if int8:
            info["weight_bits"] = INT8_WEIGHT_BITS
        info.update({
            "model_dir": str(model_dir.resolve()),
            "weights": str(weights_path.resolve()),
            "weights_sha256": weights_digest(weights_path),
            "tokenizer": loaded.tokenizers.files,
            "parameters": sum(p.numel() for p in loaded.model.parameters()),
            "config": to_dict(loaded.config),
        })
        write_export_info(tmp, info)
    return out


__all__ = ["INT8_WEIGHT_BITS", "QUANTIZATIONS", "ctranslate2_spec", "export_ctranslate2", "quantize_spec_int8"]
