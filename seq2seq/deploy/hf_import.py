"""A Hugging Face `transformers` directory as a model directory (the inverse of
`seq2seq.deploy.hf.export_hf`).

    import_hf(hf_dir, out_dir)   # MarianMTModel / BlenderbotForConditionalGeneration -> model directory

M2M100 / NLLB-200 (M2M100ForConditionalGeneration) and mBART-50 (MBartForConditionalGeneration)
directories go to `seq2seq.deploy.hf_fairseq` after config.json and the weights are read here.

Weights are read from safetensors only (never a pickle); a non-zero `final_logits_bias` is refused
(our output projection has no bias). A directory that cannot be read (no config.json, a config.json
that is not JSON or not a transformers config, weights that are truncated, garbage or only pickles)
is refused in one line naming the file. Two kinds of vocabulary (`seq2seq.deploy.hf_vocab`):

* **Ours** (what `export_hf` writes): MarianTokenizer files whose vocab.json gives every piece its
  SentencePiece id, with pad 0, unk 1, bos 2, eos 3. The model directory keeps the ids and gets the
  same logits; the seq2seq config `export_hf` saves beside the weights is restored when it describes
  the very model, otherwise the model directory gets our defaults with the model's sizes.
* **Re-indexed** (Helsinki-NLP opus-mt and other Marian conversions): each side gets a new
  SentencePiece model with our ids and the embedding / output rows are gathered to match, so the
  logits over corresponding ids are the same (the details, and what is refused or not exact, in
  `seq2seq.deploy.hf_vocab`). A multilingual opus-mt model's `>>xx<<` tokens become our `<2xx>`
  language tags and its config's `data.languages`, so `translate --tgt-lang xx` puts the tag where
  MarianTokenizer reads `>>xx<<`: at the start of the source.

Marian's default FFN activation, "swish" (SiLU, as in most opus-mt models), is `model.activation:
swish`; relu and gelu import as themselves, any other activation is refused by the architecture check.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import torch

from seq2seq.config.root import Config
from seq2seq.config import DataConfig, ModelConfig, TokenizerConfig, from_dict, load_dict
from seq2seq.deploy.hf import HF_CONFIG, layer_problems, our_tensors
from seq2seq.deploy.hf_fairseq import FAIRSEQ_ARCHITECTURES
from seq2seq.deploy.hf_vocab import gather_rows, hf_tokenizers, json_file, needs_reindexing, reindex
from seq2seq.deploy.staging import ExportError, Staging, prepare_output, require
from seq2seq.model.layers import sinusoidal_table
from seq2seq.storage.model_dir import ModelDir
from seq2seq.storage.weights import load_into
from seq2seq.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, TokenizerPair

if TYPE_CHECKING:  # an optional dependency (the export extra)
    from transformers import PreTrainedConfig


ARCHITECTURES = ("marian", "blenderbot")  # config.json's model_type (and FAIRSEQ_ARCHITECTURES: hf_fairseq)
PICKLES = ("*.bin", "*.pt", "*.pth", "*.ckpt")  # weights import-hf never unpickles


def _unsupported_architecture(kind: object) -> str:
    return (f"import-hf reads MarianMTModel (post-norm), BlenderbotForConditionalGeneration (pre-norm), "
            f"M2M100ForConditionalGeneration (M2M100, NLLB-200) and MBartForConditionalGeneration (mBART-50) "
            f"directories, not {kind!r}")


def _check_architecture(config: PreTrainedConfig, state: dict[str, torch.Tensor], reindexed: bool = False) -> None:
    """ExportError with every reason why our model cannot compute what this one does; `reindexed`: the
    vocabulary is re-indexed (`reindex`), so the special ids need not be ours."""
    kind = config.model_type
    if kind not in ARCHITECTURES:
        raise ExportError(_unsupported_architecture(kind))
    problems = []
    if not config.scale_embedding:
        problems.append("scale_embedding is false (seq2seq scales embeddings by sqrt(d_model))")
    problems += layer_problems(config)
    if not reindexed and (config.pad_token_id != PAD_ID or config.eos_token_id != EOS_ID
                          or config.decoder_start_token_id != BOS_ID):
        problems.append(f"special ids pad {config.pad_token_id}, eos {config.eos_token_id}, decoder start "
                        f"{config.decoder_start_token_id} (seq2seq uses pad {PAD_ID}, eos {EOS_ID}, start {BOS_ID})")
    bias = state.get("final_logits_bias")
    if bias is not None and bool(bias.ne(0).any()):
        problems.append("a non-zero final_logits_bias (seq2seq's output projection has no bias)")
    if getattr(config, "layernorm_embedding", False) or getattr(config, "normalize_embedding", False):
        problems.append("a LayerNorm after the embeddings")
    if problems:
        raise ExportError(f"cannot import this {kind} model exactly: " + "; ".join(problems))


def _model_config_from_hf(config: PreTrainedConfig, state: dict[str, torch.Tensor], reindexed: bool = False) -> ModelConfig:
    """Our model config for a transformers config (refused with every reason when not exact); `reindexed`:
    the embeddings are already in our ids (`gather_rows`), and their sizes are the vocabulary's."""
    _check_architecture(config, state, reindexed)
    kind = config.model_type
    enc = state["model.encoder.embed_tokens.weight"]
    dec = state["model.decoder.embed_tokens.weight"]
    src_vocab = enc.size(0) if reindexed else config.vocab_size
    tgt_vocab = dec.size(0) if reindexed else getattr(config, "decoder_vocab_size", None) or config.vocab_size
    lm = state.get("lm_head.weight", dec)
    share = enc.shape == dec.shape and torch.equal(enc, dec)
    positions: Literal["sinusoidal", "learned"] = "sinusoidal"
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
        activation_dropout=config.activation_dropout,
        activation="swish" if config.activation_function == "silu" else config.activation_function,
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


def _weight_files(hf_dir: Path) -> list[Path]:
    """The directory's safetensors files, refused in one line when it is not a transformers directory or
    holds only pickles (which import-hf never reads)."""
    if not (hf_dir / "config.json").is_file():
        raise ExportError(f"{hf_dir} is not a transformers model directory (no config.json)")
    files = sorted(hf_dir.glob("*.safetensors"))
    if not files:
        pickles = sorted(p for pattern in PICKLES for p in hf_dir.glob(pattern))
        only = f", only {', '.join(map(str, pickles))}" if pickles else ""
        raise ExportError(f"{hf_dir} has no .safetensors weights{only} (import-hf reads safetensors only, never "
                          "pickles: docs/deployment.md says how to convert one you trust)")
    return files


def _one_line(error: BaseException) -> str:
    return next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)


def _read_config(hf_dir: Path) -> PreTrainedConfig:
    """config.json as transformers reads it; ExportError naming the file when it is not JSON, not an
    object or not a config transformers knows."""
    from transformers import AutoConfig

    path = hf_dir / "config.json"
    conf = json_file(path)
    if not isinstance(conf, dict):
        raise ExportError(f"{path} is not a transformers config (a JSON object)")
    if conf.get("model_type") not in ARCHITECTURES + FAIRSEQ_ARCHITECTURES:
        raise ExportError(f"{path}: {_unsupported_architecture(conf.get('model_type'))}")
    try:
        return AutoConfig.from_pretrained(str(hf_dir))
    except Exception as e:  # noqa: BLE001 - transformers raises OSError, ValueError and its own validation errors
        raise ExportError(f"{path}: transformers cannot read it ({_one_line(e)})") from None


def _read_weights(hf_dir: Path, files: list[Path], config: PreTrainedConfig) -> dict[str, torch.Tensor]:
    """Every tensor of the safetensors files, as float32, tied tensors filled in as transformers would;
    ExportError naming the file that is not safetensors (truncated, garbage, a header that does not
    describe the data), or the tensor the model cannot do without."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            tensors = load_file(str(f))
            floats = {k: v.float() for k, v in tensors.items()}
        except (SafetensorError, OSError, ValueError, TypeError, RuntimeError) as e:
            raise ExportError(f"{f} is not a readable safetensors file ({_one_line(e)}): a truncated or damaged "
                              "download? Fetch it again") from None
        bias = tensors.get("final_logits_bias")
        if bias is not None and bool(bias.ne(0).any()):
            raise ExportError(f"{f}: final_logits_bias is not zero, and seq2seq's output projection has no bias, so "
                              "this model cannot be imported exactly")
        state.update(floats)
    # Tied tensors may be stored once: fill them in as transformers would.
    if "model.shared.weight" in state:
        for k in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"):
            state.setdefault(k, state["model.shared.weight"])
    if "lm_head.weight" not in state and getattr(config, "tie_word_embeddings", True) \
            and "model.decoder.embed_tokens.weight" in state:
        state["lm_head.weight"] = state["model.decoder.embed_tokens.weight"]
    needed = ["model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"]
    if config.model_type == "blenderbot":
        needed += ["model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"]
    for name in needed:
        if name not in state:
            raise ExportError(f"{hf_dir}: the safetensors weights have no {name}")
    return state


def _default_config(m: ModelConfig, tokenizers: TokenizerPair, languages: Sequence[str] = ()) -> Config:
    """Our defaults with the model's sizes: the run config of an import that is not one of our exports;
    `languages`: the target languages of a multilingual model (its `>>xx<<` tokens), `data.languages`."""
    joint = tokenizers.joint  # separate tokenizers: each side's size too
    tokenizer = TokenizerConfig(joint=joint, vocab_size=m.tgt_vocab_size, src_vocab_size=None if joint else m.src_vocab_size,
                                tgt_vocab_size=None if joint else m.tgt_vocab_size)
    return Config(model=m, data=DataConfig(languages=list(languages)), tokenizer=tokenizer)


def _load_model(m: ModelConfig, state: dict[str, torch.Tensor], hf_dir: Path) -> torch.nn.Module:
    """Our model with their weights (refused by tensor name when one is missing or of another shape)."""
    from seq2seq.model.transformer import Seq2SeqTransformer

    model = Seq2SeqTransformer(m)
    ours = our_tensors(m, state, hf_dir)
    own = model.state_dict()
    for k in own:  # a module shared between encoder and decoder appears under both names
        if k not in ours and k.startswith("encoder.embed.") and m.share_embeddings:
            ours[k] = ours["decoder" + k[len("encoder"):]]
    load_into(model, {k: v for k, v in ours.items() if k in own}, hf_dir)
    return model


def import_hf(hf_dir: str | Path, out_dir: str | Path, force: bool = False) -> Path:
    """Write a transformers MarianMTModel / BlenderbotForConditionalGeneration directory (with its
    MarianTokenizer files) as a seq2seq model directory: the same logits over corresponding ids. A
    vocabulary that is not ours (opus-mt) is re-indexed; see the module docstring. M2M100 / NLLB-200
    and mBART-50 directories are `seq2seq.deploy.hf_fairseq`'s."""
    require("transformers")
    hf_dir = Path(hf_dir)
    files = _weight_files(hf_dir)
    out = prepare_output(out_dir, force, [hf_dir])
    config = _read_config(hf_dir)
    state = _read_weights(hf_dir, files, config)
    if config.model_type in FAIRSEQ_ARCHITECTURES:  # M2M100, NLLB-200, mBART-50
        from seq2seq.deploy.hf_fairseq import import_fairseq

        return import_fairseq(hf_dir, out, config, state)
    reindexed = None
    if needs_reindexing(hf_dir):  # opus-mt: our SentencePiece models, the embedding and output rows in our ids
        _check_architecture(config, state, reindexed=True)
        reindexed = reindex(hf_dir, config)
        gather_rows(state, hf_dir, reindexed)
    m = _model_config_from_hf(config, state, reindexed=reindexed is not None)
    if reindexed is not None:
        tokenizers = reindexed.tokenizers
    else:
        tokenizers = hf_tokenizers(hf_dir, m.src_vocab_size, m.tgt_vocab_size)
    if m.share_embeddings and not tokenizers.joint:
        m = dataclasses.replace(m, share_embeddings=False)
    languages = reindexed.languages if reindexed is not None else []
    cfg = None if languages else _restored_config(hf_dir, m)
    if cfg is None:  # not one of our exports
        cfg = _default_config(m, tokenizers, languages)
    model = _load_model(m, state, hf_dir)
    with Staging(out) as tmp:
        model_dir = ModelDir(tmp)
        model_dir.save_weights(model.state_dict())
        model_dir.write_config(cfg)
        tokenizers.save(tmp)
        meta: dict[str, object] = {"imported_from": str(hf_dir.resolve()), "architecture": config.model_type}
        if reindexed is not None:
            meta["hf_vocabulary"] = reindexed.info
        model_dir.write_metadata(meta)
    return out


__all__ = ["import_hf"]
