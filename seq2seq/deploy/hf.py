"""A model directory as a Hugging Face `transformers` model, computing the same logits.

    export_hf(model_dir, out_dir)   # transformers directory (+ MarianTokenizer files)

Post-norm models become a `MarianMTModel`; Marian computes its own sinusoidal table with the sines
in the first half of each vector, so the export permutes the model dimension (embeddings' columns,
LayerNorms, the inputs of every projection that reads the residual stream and the outputs of every
one that writes it), which leaves every logit unchanged. Pre-norm models become a
`BlenderbotForConditionalGeneration`, the transformers architecture with exactly our pre-norm
layers, final LayerNorms and a stored (learned) position table, into which our table is written.
Refused, with the reason: post-norm with learned positions (Marian's table is fixed), pre-norm
with different source and target vocabulary sizes (Blenderbot has one vocabulary size), the options
of a model imported from M2M100 / NLLB / mBART (`seq2seq.deploy.fairseq_export` writes it as that
architecture; `seq2seq export` chooses).

`tensor_map` (our tensor, theirs, how the model dimension is permuted) is the mapping both ways:
`seq2seq.deploy.hf_import` reads it backwards.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import torch

from seq2seq.config.root import Config, config_yaml
from seq2seq.config import ModelConfig
from seq2seq.deploy.staging import ExportError, Staging, prepare_output, require
from seq2seq.deploy.tensors import check_text_model, model_tensors, vocabulary
from seq2seq.storage.model_dir import LoadedModel, load_model_dir
from seq2seq.text.languages import tags_on_decoder
from seq2seq.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, TokenizerPair

if TYPE_CHECKING:  # an optional dependency (the export extra)
    from transformers import BlenderbotConfig, GenerationConfig, MarianConfig, PreTrainedConfig, PreTrainedModel

HF_CONFIG = "seq2seq_config.yaml"  # written into a transformers export directory


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


def tensor_map(cfg: ModelConfig) -> list[tuple[str, str, str]]:
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


def permuted(t: torch.Tensor, kind: str, perm: torch.Tensor | None, inverse: bool = False) -> torch.Tensor:
    if perm is None or kind == "none":
        return t
    if inverse:
        perm = torch.argsort(perm)
    if kind == "in":
        return t[:, perm]
    return t[perm]  # 'out' rows, 'vec'


class MarianSizes(TypedDict):
    """The settings a MarianConfig and a BlenderbotConfig of our model share (sizes, dropouts, special ids)."""

    d_model: int
    encoder_layers: int
    decoder_layers: int
    encoder_attention_heads: int
    decoder_attention_heads: int
    encoder_ffn_dim: int
    decoder_ffn_dim: int
    max_position_embeddings: int
    activation_function: str
    dropout: float
    attention_dropout: float
    activation_dropout: float
    decoder_layerdrop: float
    scale_embedding: bool
    pad_token_id: int
    bos_token_id: int
    eos_token_id: int
    decoder_start_token_id: int
    forced_eos_token_id: int | None


class _Seq2SeqSettings(MarianSizes):
    encoder_layerdrop: float
    is_encoder_decoder: bool


def hf_config(cfg: Config) -> MarianConfig | BlenderbotConfig:
    """The transformers config of our model: MarianConfig (post-norm) or BlenderbotConfig (pre-norm)."""
    require("transformers")
    m = cfg.model
    check_text_model(m, "Hugging Face")
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
    common = _Seq2SeqSettings(
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


def hf_model(loaded: LoadedModel) -> PreTrainedModel:
    """The transformers model (eval mode) that computes the same logits as `loaded.model`."""
    config = hf_config(loaded.config)
    m = loaded.config.model
    model: PreTrainedModel
    if m.norm == "post":
        from transformers import MarianConfig, MarianMTModel

        assert isinstance(config, MarianConfig)  # hf_config's class for a post-norm model
        model = MarianMTModel(config).eval()
    else:
        from transformers import BlenderbotConfig, BlenderbotForConditionalGeneration

        assert isinstance(config, BlenderbotConfig)
        model = BlenderbotForConditionalGeneration(config).eval()
    state = model_tensors(loaded)
    perm = marian_permutation(m.d_model) if m.norm == "post" else None
    own = model.state_dict()
    new = {}
    for ours, theirs, kind in tensor_map(m):
        t = permuted(_get(state, ours, m.d_model), kind, perm)
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
    vocab = {p: i for i, p in enumerate(vocabulary(tokenizers.src))}
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=0) + "\n", encoding="utf-8")
    conf = {
        "tokenizer_class": "MarianTokenizer", "separate_vocabs": not tokenizers.joint,
        "unk_token": tokenizers.src.id_to_piece(UNK_ID), "eos_token": tokenizers.src.id_to_piece(EOS_ID),
        "pad_token": tokenizers.src.id_to_piece(PAD_ID), "additional_special_tokens": [],
        "model_max_length": max_positions - 1,
    }
    if not tokenizers.joint:
        tgt_vocab = {p: i for i, p in enumerate(vocabulary(tokenizers.tgt))}
        (out / "target_vocab.json").write_text(json.dumps(tgt_vocab, ensure_ascii=False, indent=0) + "\n",
                                               encoding="utf-8")
        conf["target_vocab_file"] = "target_vocab.json"
    (out / "tokenizer_config.json").write_text(json.dumps(conf, indent=2) + "\n", encoding="utf-8")


def generation_config(loaded: LoadedModel) -> GenerationConfig:
    """The transformers GenerationConfig closest to the model's `decoding` settings: our special ids,
    its beam (1 for greedy), PAD and BOS never generated, at least `min_len` tokens. Beam search ranks
    lengths as transformers does, not as ours (GNMT penalty with EOS counted), so only greedy outputs
    are token for token the same."""
    from transformers import GenerationConfig

    d = loaded.config.decoding
    return GenerationConfig(
        decoder_start_token_id=BOS_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
        num_beams=d.beam if d.strategy == "beam" else 1, max_length=loaded.config.model.max_positions - 1,
        min_new_tokens=d.min_len, bad_words_ids=[[PAD_ID], [BOS_ID]],
    )


def export_hf(
    model_dir: str | Path, out_dir: str | Path, weights: str | Path | None = None, force: bool = False
) -> Path:
    """Write MODEL_DIR as a transformers directory (`AutoModelForSeq2SeqLM.from_pretrained(out_dir)`),
    with the MarianTokenizer files for its SentencePiece model(s). See the module docstring (a model with
    a transformers backbone: `seq2seq.deploy.hf_encoder_decoder.export_encoder_decoder`)."""
    require("transformers")
    model_dir = Path(model_dir)
    out = prepare_output(out_dir, force, [model_dir])
    loaded = load_model_dir(model_dir, device="cpu", weights=weights)
    if tags_on_decoder(loaded.config):
        raise ExportError(f"{model_dir} starts its translations with a forced language tag (data.language_tag: "
                          f"decoder), which a transformers MarianMTModel does not do; export a model with the tag on "
                          f"the source, or translate this one with seq2seq (--tgt-lang)")
    model = hf_model(loaded)
    model.generation_config = generation_config(loaded)
    with Staging(out) as tmp:
        model.save_pretrained(str(tmp), safe_serialization=True)
        _write_marian_tokenizer(loaded.tokenizers, tmp, loaded.config.model.max_positions)
        (tmp / HF_CONFIG).write_text(
            f"# The seq2seq config of {model_dir.resolve()}: `seq2seq import-hf` restores it.\n"
            + config_yaml(loaded.config), encoding="utf-8",
        )
    return out


__all__ = ["HF_CONFIG", "export_hf", "hf_config", "hf_model", "marian_permutation", "permuted", "tensor_map"]


def our_tensors(m: ModelConfig, state: dict[str, torch.Tensor], hf_dir: Path) -> dict[str, torch.Tensor]:
    """Their tensors under our names (`tensor_map` read backwards): the model dimension permuted back,
    q/k/v stacked, the position tables and the output projection as our model keeps them."""
    perm = marian_permutation(m.d_model) if m.norm == "post" else None
    ours: dict[str, torch.Tensor] = {}
    stacked: dict[str, list[torch.Tensor | None]] = {}
    for name, theirs, kind in tensor_map(m):
        if theirs not in state:
            if theirs == "model.shared.weight":
                continue
            raise ExportError(f"{hf_dir}: tensor {theirs} is missing")
        try:
            t = permuted(state[theirs], kind, perm, inverse=True)
        except IndexError:
            raise ExportError(f"{hf_dir}: tensor {theirs} has shape {tuple(state[theirs].shape)}, which does not "
                              f"fit config.json's d_model {m.d_model}") from None
        base, _, part = name.partition("#")
        if part:
            stacked.setdefault(base, [None, None, None])[int(part)] = t
        else:
            ours[base] = t
    for base, slots in stacked.items():
        parts = [p for p in slots if p is not None]
        assert len(parts) == len(slots)  # tensor_map names the q, k and v of each (a missing one is refused above)
        try:
            ours[base] = torch.cat(parts, dim=0)
        except RuntimeError:
            raise ExportError(f"{hf_dir}: the q, k and v projections of {base} have the shapes "
                              f"{', '.join(str(tuple(p.shape)) for p in parts)}, which do not stack") from None
    if m.positions == "learned":
        ours["encoder.embed.positions.weight"] = ours.pop("encoder.positions")
        ours["decoder.embed.positions.weight"] = ours.pop("decoder.positions")
    else:
        ours.pop("encoder.positions", None)
        ours.pop("decoder.positions", None)
    output = ours.pop("decoder.output")
    if not m.tie_output:
        ours["decoder.output.weight"] = output
    return ours


def layer_problems(config: PreTrainedConfig) -> list[str]:
    """What in a transformers encoder-decoder config.json our layers cannot compute exactly (an
    activation we lack, encoder and decoder of different widths): one phrase each, for the importers'
    one-line refusal."""
    problems = []
    if config.activation_function not in ("relu", "gelu", "swish", "silu"):
        problems.append(f"activation {config.activation_function!r} (seq2seq has relu, gelu and swish)")
    if config.encoder_attention_heads != config.decoder_attention_heads:
        problems.append("different encoder and decoder head counts")
    if config.encoder_ffn_dim != config.decoder_ffn_dim:
        problems.append("different encoder and decoder FFN sizes")
    return problems
