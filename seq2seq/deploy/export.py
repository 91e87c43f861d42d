"""Deployment: a model directory as a CTranslate2 model or a Hugging Face `transformers` model, and a
Hugging Face directory as a model directory.

    export_ctranslate2(model_dir, out_dir, quantize=None)  # CTranslate2 model + SentencePiece model(s)
    export_hf(model_dir, out_dir)                          # transformers directory (+ MarianTokenizer files)
    import_hf(hf_dir, out_dir)                             # transformers directory -> model directory

Both engines are optional extras (`pip install "seq2seq[export]"`); a missing one is an `ExportError`
naming the extra. Every user-fixable problem (an architecture the target cannot express, an output
directory that holds something else) is an `ExportError` with a one-line message.

**CTranslate2** (`ctranslate2.specs.TransformerSpec`): the mapping is exact for every text model
this toolkit builds: pre- or post-norm (with the final LayerNorms of pre-norm), relu or gelu (erf),
sinusoidal positions (our interleaved table, written into the model, since CTranslate2's own
table puts all sines before all cosines) or learned ones, embeddings scaled by sqrt(d_model),
shared or separate vocabularies, tied or separate output projection. The fused q/k/v projection
maps onto CTranslate2's fused self-attention projection; cross-attention is split into q and the
fused k/v. The export directory holds `model.bin`, the vocabularies (the SentencePiece pieces in
id order), our SentencePiece model(s) and `seq2seq.json` (the model's config, for the decoding
defaults: see `seq2seq.deploy.engine`).

**transformers**: post-norm models become a `MarianMTModel`; Marian computes its own sinusoidal
table with the sines in the first half of each vector, so the export permutes the model dimension
(embeddings' columns, LayerNorms, the inputs of every projection that reads the residual stream and
the outputs of every one that writes it), which leaves every logit unchanged. Pre-norm models become
a `BlenderbotForConditionalGeneration`, the transformers architecture with exactly our pre-norm
layers, final LayerNorms and a stored (learned) position table, into which our table is written.
Refused, with the reason: post-norm with learned positions (Marian's table is fixed), pre-norm
with different source and target vocabulary sizes (Blenderbot has one vocabulary size).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from seq2seq.storage import files as ckpt
from seq2seq.config.schema import ModelConfig, from_dict, load_dict, to_dict
from seq2seq.model.layers import sinusoidal_table
from seq2seq.storage.model_dir import LoadedModel, load_model_dir
from seq2seq.config.root import Config, config_yaml
from seq2seq.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, TokenizerPair

EXTRA = "export"
EXPORT_INFO = "seq2seq.json"  # written into a CTranslate2 export directory
HF_CONFIG = "seq2seq_config.yaml"  # written into a transformers export directory
CT2_FORMAT = "seq2seq-ctranslate2"
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16")


class ExportError(ValueError):
    """An export or import that cannot be done; the message says why and what to do."""


def require(package: str) -> Any:
    """Import an optional dependency, or fail with one line naming the extra that installs it."""
    try:
        return importlib.import_module(package)
    except ImportError:
        raise ExportError(
            f"this needs the optional package '{package}': pip install \"seq2seq[{EXTRA}]\" "
            f"(or pip install {package})"
        ) from None


# --------------------------------------------------------------------------------------------
# Reading our model
# --------------------------------------------------------------------------------------------


def _check_text_model(cfg: ModelConfig, target: str) -> None:
    if cfg.encoder.type != "text":
        raise ExportError(f"{target} export needs a text model; this one has a {cfg.encoder.type!r} encoder")
    if cfg.pad_id != PAD_ID:
        raise ExportError(f"{target} export needs model.pad_id {PAD_ID}, got {cfg.pad_id}")


def _tensors(loaded: LoadedModel) -> dict[str, torch.Tensor]:
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


def _load(model_dir: str | Path, weights: str | Path | None) -> LoadedModel:
    return load_model_dir(model_dir, device="cpu", weights=weights)


def weights_digest(path: str | Path) -> str:
    """sha256 of a weights file (to tell whether an export is stale)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _vocabulary(tok: Tokenizer) -> list[str]:
    pieces = [tok.id_to_piece(i) for i in range(tok.vocab_size)]
    if len(set(pieces)) != len(pieces):
        raise ExportError(f"{tok.name} has duplicate pieces; an engine vocabulary needs unique tokens")
    return pieces


# --------------------------------------------------------------------------------------------
# Writing an output directory safely
# --------------------------------------------------------------------------------------------


def _looks_like_export(path: Path) -> bool:
    return (path / "model.bin").is_file() or (path / "config.json").is_file()


def _prepare_output(out_dir: str | Path, force: bool, protect: list[Path]) -> Path:
    """Check that `out_dir` may be written: new, empty, or (with force) an earlier export - never a
    model directory or a directory that contains one of `protect`."""
    out = Path(out_dir)
    resolved = out.resolve()
    for p in protect:
        p = p.resolve()
        if resolved == p or resolved in p.parents:
            raise ExportError(f"{out} holds the model being converted ({p}); choose another output directory")
    if out.exists():
        if not out.is_dir():
            raise ExportError(f"{out} exists and is not a directory")
        if any(out.iterdir()):
            if (out / ckpt.CONFIG).is_file() and (out / ckpt.WEIGHTS).is_file():
                raise ExportError(f"{out} is a seq2seq model directory; choose another output directory")
            if not force:
                raise ExportError(f"{out} exists and is not empty; pass --force to replace it")
            if not _looks_like_export(out):
                raise ExportError(f"{out} exists and does not look like an earlier export; refusing to replace it")
    return out


class _Staging:
    """A temporary directory beside `out` that replaces it on success (the old one is removed only then)."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def __enter__(self) -> Path:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.", suffix=".tmp", dir=self.out.parent))
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return
        old = None
        if self.out.exists():
            old = self.out.parent / f".{self.out.name}.old"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(self.out, old)
        os.replace(self.tmp, self.out)
        os.chmod(self.out, 0o777 & ~ckpt._UMASK)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# CTranslate2
# --------------------------------------------------------------------------------------------


def ctranslate2_spec(loaded: LoadedModel) -> Any:
    """The `ctranslate2.specs.TransformerSpec` of a loaded model, vocabularies registered."""
    require("ctranslate2")
    from ctranslate2.specs import common_spec, transformer_spec

    cfg = loaded.config.model
    _check_text_model(cfg, "CTranslate2")
    w = {k: v.numpy() for k, v in _tensors(loaded).items()}
    d = cfg.d_model
    activation = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU}[cfg.activation]
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg.n_encoder_layers, cfg.n_decoder_layers), cfg.heads, pre_norm=cfg.norm == "pre",
        activation=activation, alignment_layer=-1, alignment_heads=cfg.heads,
    )

    def linear(dst: Any, prefix: str, rows: slice = slice(None)) -> None:
        dst.weight = w[f"{prefix}.weight"][rows]
        dst.bias = w[f"{prefix}.bias"][rows]

    def norm(dst: Any, prefix: str) -> None:
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

    src_vocab, tgt_vocab = _vocabulary(loaded.tokenizers.src), _vocabulary(loaded.tokenizers.tgt)
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
    out = _prepare_output(out_dir, force, [model_dir])
    loaded = _load(model_dir, weights)
    spec = ctranslate2_spec(loaded)
    weights_path = Path(weights) if weights else model_dir / ckpt.WEIGHTS

    class _Converter(ct2.converters.Converter):
        def _load(self) -> Any:
            return spec

    with _Staging(out) as tmp:
        _Converter().convert(str(tmp / "ct2"), quantization=quantize, force=True)
        for f in (tmp / "ct2").iterdir():
            os.replace(f, tmp / f.name)
        (tmp / "ct2").rmdir()
        loaded.tokenizers.save(tmp)
        info = {
            "format": CT2_FORMAT,
            "version": 1,
            "ctranslate2": ct2.__version__,
            "quantization": quantize or "float32",
            "model_dir": str(model_dir.resolve()),
            "weights": str(weights_path.resolve()),
            "weights_sha256": weights_digest(weights_path),
            "tokenizer": loaded.tokenizers.files,
            "config": to_dict(loaded.config),
        }
        ckpt.write_json_atomic(tmp / EXPORT_INFO, info)
    return out


# --------------------------------------------------------------------------------------------
# Hugging Face transformers
# --------------------------------------------------------------------------------------------


def marian_permutation(d_model: int) -> torch.Tensor:
    """Index p with marian[..., j] = ours[..., p[j]]: Marian's sinusoidal table holds sin(pos * f_i)
    in column i and cos(pos * f_i) in column D/2 + i; ours interleaves them (columns 2i, 2i + 1)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def _layer_map(prefix_ours: str, prefix_hf: str, decoder: bool) -> list[tuple[str, str, str]]:
    """(our tensor, HF tensor, kind) for one layer; kind says how the model dimension is permuted:
    'in' (columns read the residual stream), 'out' (rows write it), 'vec' (a LayerNorm / bias vector on
    it), 'none'."""
    rows = []

    def attention(ours: str, hf: str) -> None:
        for part, name in enumerate(("q_proj", "k_proj", "v_proj")):
            rows.append((f"{prefix_ours}.{ours}.in_proj.weight#{part}", f"{prefix_hf}.{hf}.{name}.weight", "in"))
            rows.append((f"{prefix_ours}.{ours}.in_proj.bias#{part}", f"{prefix_hf}.{hf}.{name}.bias", "none"))
        rows.append((f"{prefix_ours}.{ours}.out_proj.weight", f"{prefix_hf}.{hf}.out_proj.weight", "out"))
        rows.append((f"{prefix_ours}.{ours}.out_proj.bias", f"{prefix_hf}.{hf}.out_proj.bias", "vec"))

    def norm(ours: str, hf: str) -> None:
        rows.append((f"{prefix_ours}.{ours}.norm.weight", f"{prefix_hf}.{hf}.weight", "vec"))
        rows.append((f"{prefix_ours}.{ours}.norm.bias", f"{prefix_hf}.{hf}.bias", "vec"))

    attention("self_attn", "self_attn")
    if decoder:
        norm("self_block", "self_attn_layer_norm")
        attention("cross_attn", "encoder_attn")
        norm("cross_block", "encoder_attn_layer_norm")
    else:
        norm("attn_block", "self_attn_layer_norm")
    rows += [
        (f"{prefix_ours}.ffn.w1.weight", f"{prefix_hf}.fc1.weight", "in"),
        (f"{prefix_ours}.ffn.w1.bias", f"{prefix_hf}.fc1.bias", "none"),
        (f"{prefix_ours}.ffn.w2.weight", f"{prefix_hf}.fc2.weight", "out"),
        (f"{prefix_ours}.ffn.w2.bias", f"{prefix_hf}.fc2.bias", "vec"),
    ]
    norm("ffn_block", "final_layer_norm")
    return rows


def _tensor_map(cfg: ModelConfig) -> list[tuple[str, str, str]]:
    """Every (our tensor, HF tensor, kind) pair of the model (see `_layer_map`)."""
    rows = [
        ("encoder.embed.tokens.weight", "model.encoder.embed_tokens.weight", "in"),
        ("decoder.embed.tokens.weight", "model.decoder.embed_tokens.weight", "in"),
        ("decoder.output", "lm_head.weight", "in"),
    ]
    if cfg.share_embeddings:
        rows.append(("decoder.embed.tokens.weight", "model.shared.weight", "in"))
    for i in range(cfg.n_encoder_layers):
        rows += _layer_map(f"encoder.layers.{i}", f"model.encoder.layers.{i}", decoder=False)
    for i in range(cfg.n_decoder_layers):
        rows += _layer_map(f"decoder.layers.{i}", f"model.decoder.layers.{i}", decoder=True)
    if cfg.norm == "pre":
        rows += [
            ("encoder.final_norm.weight", "model.encoder.layer_norm.weight", "vec"),
            ("encoder.final_norm.bias", "model.encoder.layer_norm.bias", "vec"),
            ("decoder.final_norm.weight", "model.decoder.layer_norm.weight", "vec"),
            ("decoder.final_norm.bias", "model.decoder.layer_norm.bias", "vec"),
            ("encoder.positions", "model.encoder.embed_positions.weight", "none"),
            ("decoder.positions", "model.decoder.embed_positions.weight", "none"),
        ]
    return rows


def _get(state: dict[str, torch.Tensor], name: str, d: int) -> torch.Tensor:
    """Our tensor `name`; `name#k` is the k-th of the stacked q/k/v rows of an in_proj tensor."""
    base, _, part = name.partition("#")
    t = state[base]
    return t[int(part) * d : (int(part) + 1) * d] if part else t


def _permuted(t: torch.Tensor, kind: str, perm: torch.Tensor | None, inverse: bool = False) -> torch.Tensor:
    if perm is None or kind == "none":
        return t
    if inverse:
        perm = torch.argsort(perm)
    if kind == "in":
        return t[:, perm]
    return t[perm]  # 'out' rows, 'vec'


def hf_config(cfg: Config) -> Any:
    """The transformers config of our model: MarianConfig (post-norm) or BlenderbotConfig (pre-norm)."""
    require("transformers")
    m = cfg.model
    _check_text_model(m, "Hugging Face")
    if m.norm == "post" and m.positions == "learned":
        raise ExportError(
            "a post-norm model with learned positions has no exact transformers architecture: MarianMTModel "
            "(post-norm) computes fixed sinusoidal positions; train with model.positions=sinusoidal, or use "
            "--to ctranslate2"
        )
    if m.norm == "pre" and m.src_vocab_size != m.tgt_vocab_size:
        raise ExportError(
            "a pre-norm model is exported as BlenderbotForConditionalGeneration (the transformers architecture "
            "with pre-norm layers), which has one vocabulary size; this model has "
            f"{m.src_vocab_size} source and {m.tgt_vocab_size} target pieces (use --to ctranslate2)"
        )
    common = dict(
        d_model=m.d_model, encoder_layers=m.n_encoder_layers, decoder_layers=m.n_decoder_layers,
        encoder_attention_heads=m.heads, decoder_attention_heads=m.heads, encoder_ffn_dim=m.ffn_dim,
        decoder_ffn_dim=m.ffn_dim, max_position_embeddings=m.max_positions, activation_function=m.activation,
        dropout=m.dropout, attention_dropout=m.attention_dropout, activation_dropout=m.activation_dropout,
        encoder_layerdrop=0.0, decoder_layerdrop=0.0, scale_embedding=True, pad_token_id=PAD_ID,
        bos_token_id=BOS_ID, eos_token_id=EOS_ID, decoder_start_token_id=BOS_ID, forced_eos_token_id=None,
        is_encoder_decoder=True,
    )
    if m.norm == "post":
        from transformers import MarianConfig

        return MarianConfig(
            vocab_size=m.src_vocab_size, decoder_vocab_size=m.tgt_vocab_size,
            share_encoder_decoder_embeddings=m.share_embeddings, tie_word_embeddings=m.tie_output, **common,
        )
    from transformers import BlenderbotConfig

    return BlenderbotConfig(vocab_size=m.tgt_vocab_size, tie_word_embeddings=m.share_embeddings and m.tie_output,
                            encoder_no_repeat_ngram_size=0, **common)


def hf_model(loaded: LoadedModel) -> Any:
    """The transformers model (eval mode) that computes the same logits as `loaded.model`."""
    config = hf_config(loaded.config)
    m = loaded.config.model
    if m.norm == "post":
        from transformers import MarianMTModel as cls
    else:
        from transformers import BlenderbotForConditionalGeneration as cls
    model = cls(config).eval()
    state = _tensors(loaded)
    perm = marian_permutation(m.d_model) if m.norm == "post" else None
    own = model.state_dict()
    new = {}
    for ours, theirs, kind in _tensor_map(m):
        t = _permuted(_get(state, ours, m.d_model), kind, perm)
        if theirs not in own or own[theirs].shape != t.shape:
            shape = tuple(own[theirs].shape) if theirs in own else None
            raise ExportError(f"internal: transformers' {theirs} {shape} does not fit our {ours} {tuple(t.shape)}")
        new[theirs] = t
    if m.norm == "pre" and not (m.share_embeddings and m.tie_output):
        new["model.shared.weight"] = new["model.decoder.embed_tokens.weight"]  # unused by the forward pass
    missing = [k for k in own if k not in new and not k.endswith("embed_positions.weight") and k != "final_logits_bias"]
    if missing:
        raise ExportError(f"internal: no value for {missing[:5]}")
    with torch.no_grad():
        for k, t in new.items():
            own[k].copy_(t)
        if "final_logits_bias" in own:
            own["final_logits_bias"].zero_()
    return model


def _write_marian_tokenizer(tokenizers: TokenizerPair, out: Path, max_positions: int) -> None:
    """source.spm / target.spm / vocab.json (+ target_vocab.json): what `MarianTokenizer` reads."""
    tokenizers.src.save(out / "source.spm")
    tokenizers.tgt.save(out / "target.spm")
    vocab = {p: i for i, p in enumerate(_vocabulary(tokenizers.src))}
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    conf = {
        "tokenizer_class": "MarianTokenizer", "separate_vocabs": not tokenizers.joint,
        "unk_token": tokenizers.src.id_to_piece(UNK_ID), "eos_token": tokenizers.src.id_to_piece(EOS_ID),
        "pad_token": tokenizers.src.id_to_piece(PAD_ID), "additional_special_tokens": [],
        "model_max_length": max_positions - 1,
    }
    if not tokenizers.joint:
        tgt_vocab = {p: i for i, p in enumerate(_vocabulary(tokenizers.tgt))}
        (out / "target_vocab.json").write_text(json.dumps(tgt_vocab, ensure_ascii=False, indent=0) + "\n",
                                               encoding="utf-8")
        conf["target_vocab_file"] = "target_vocab.json"
    (out / "tokenizer_config.json").write_text(json.dumps(conf, indent=2) + "\n", encoding="utf-8")


def export_hf(
    model_dir: str | Path, out_dir: str | Path, weights: str | Path | None = None, force: bool = False
) -> Path:
    """Write MODEL_DIR as a transformers directory (`AutoModelForSeq2SeqLM.from_pretrained(out_dir)`),
    with the MarianTokenizer files for its SentencePiece model(s). See the module docstring."""
    require("transformers")
    model_dir = Path(model_dir)
    out = _prepare_output(out_dir, force, [model_dir])
    loaded = _load(model_dir, weights)
    model = hf_model(loaded)
    d = loaded.config.decoding
    from transformers import GenerationConfig

    model.generation_config = GenerationConfig(
        decoder_start_token_id=BOS_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
        num_beams=d.beam if d.strategy == "beam" else 1, max_length=loaded.config.model.max_positions - 1,
        bad_words_ids=[[PAD_ID], [BOS_ID]],
    )
    with _Staging(out) as tmp:
        model.save_pretrained(str(tmp), safe_serialization=True)
        _write_marian_tokenizer(loaded.tokenizers, tmp, loaded.config.model.max_positions)
        (tmp / HF_CONFIG).write_text(
            f"# The seq2seq config of {model_dir.resolve()}: `seq2seq import-hf` restores it.\n"
            + config_yaml(loaded.config), encoding="utf-8",
        )
    return out


# --------------------------------------------------------------------------------------------
# Import from Hugging Face transformers
# --------------------------------------------------------------------------------------------


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
    out = _prepare_output(out_dir, force, [hf_dir])
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
    for name, theirs, kind in _tensor_map(m):
        if theirs not in state:
            if theirs == "model.shared.weight":
                continue
            raise ExportError(f"{hf_dir}: tensor {theirs} is missing")
        t = _permuted(state[theirs], kind, perm, inverse=True)
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
    ckpt.load_into(model, {k: v for k, v in ours.items() if k in own}, hf_dir)
    with _Staging(out) as tmp:
        ckpt.save_weights(model.state_dict(), tmp / ckpt.WEIGHTS)
        from seq2seq.config.schema import save

        save(cfg, tmp / ckpt.CONFIG)
        tokenizers.save(tmp)
        ckpt.write_json_atomic(tmp / ckpt.METADATA, {"imported_from": str(hf_dir.resolve()),
                                                     "architecture": config.model_type})
    return out


def read_export_info(path: str | Path) -> dict[str, Any]:
    """`seq2seq.json` of a CTranslate2 export directory, with its config parsed (`info['config']`)."""
    path = Path(path)
    info = ckpt.read_json(path / EXPORT_INFO)
    if info.get("format") != CT2_FORMAT:
        raise ExportError(f"{path / EXPORT_INFO} is not a seq2seq CTranslate2 export")
    info["config"] = from_dict(Config, info["config"])
    return info


__all__ = [
    "EXTRA", "ExportError", "QUANTIZATIONS", "ctranslate2_spec", "export_ctranslate2", "export_hf", "hf_config",
    "hf_model", "import_hf", "marian_permutation", "read_export_info", "require", "weights_digest",
]
