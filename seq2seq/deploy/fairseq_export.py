"""`export` of an imported M2M100 / NLLB-200 or mBART-50 model as its own family: the transformers
architecture it came from, and the CTranslate2 model CTranslate2's own converter makes of that.

    keep_family_files(hf_dir, model_dir, ids, tokenizer_class, tokenizers)  # import-hf, into hf_family/
    export_family_hf(model_dir, out_dir)                  # M2M100/MBartForConditionalGeneration + tokenizer
    export_family_ctranslate2(model_dir, out_dir, quantize)  # ctranslate2.converters.TransformersConverter's

What makes a model one of these families is its fairseq options (`seq2seq.deploy.tensors.
is_family_model`: the model options `seq2seq.deploy.hf_fairseq` sets); `seq2seq export` sends such
a model here, any other as before (`seq2seq.deploy.hf`, `seq2seq.deploy.ctranslate2`). The family is M2M100 for sinusoidal
positions, mBART for learned ones, and every option must be what that architecture computes
(`family_problems`: pre-norm, positions numbered from 2, the decoder starting with </s>, M2M100's
fairseq sine table and one embedding shared by both sides, mBART's `layernorm_embedding` and one
token table read by both sides); a model with another is refused in one line naming the option.

The vocabulary goes back to their ids: import-hf renumbered it (our specials and language tags
first) and kept, in the model directory's `hf_family/`, the original config.json (and
generation_config.json), the tokenizer files and `seq2seq_ids.json` (their id of each of our ids,
the tokenizer class, and a checksum of our SentencePiece model). The export puts every embedding
and output row back at their id and copies the tokenizer files, so the family's tokenizer and
`AutoModelForSeq2SeqLM` read the directory as they read the original, and the logits are ours. A
model directory without `hf_family/` (a model trained here) or whose tokenizer is not the one
imported (new pieces or languages) is refused in one line.

The CTranslate2 export is that transformers directory converted by CTranslate2's converter (int8
with our 7-bit weights, `seq2seq.deploy.ctranslate2.quantize_spec_int8`): the model users of
CTranslate2 make of the original, translated with the family's tokens and the target language's code
as `target_prefix`. It has no `seq2seq.json`: `--engine ctranslate2` does not run it (its vocabulary
is the family's, not our SentencePiece model's).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import torch

from seq2seq.config import ModelConfig
from seq2seq.deploy.ctranslate2 import QUANTIZATIONS, quantize_spec_int8
from seq2seq.deploy.hf import _get, tensor_map
from seq2seq.deploy.staging import ExportError, Staging, prepare_output, require, weights_digest
from seq2seq.deploy.tensors import fairseq_options, model_tensors
from seq2seq.storage.atomic import read_json, write_json_atomic
from seq2seq.storage.model_dir import LoadedModel, ModelDir, load_model_dir
from seq2seq.text.tokenizer import JOINT_MODEL, TokenizerPair

if TYPE_CHECKING:  # an optional dependency (the export extra)
    from ctranslate2.specs import TransformerSpec
    from transformers import M2M100Config, MBartConfig, PreTrainedModel, PreTrainedTokenizerBase

FAMILY_DIR = ModelDir.HF_FAMILY  # in a model directory: what import-hf kept of the original
IDS_FILE = "seq2seq_ids.json"
TOKENIZER_FILES = ("sentencepiece.bpe.model", "vocab.json", "tokenizer.json", "tokenizer_config.json",
                   "special_tokens_map.json", "added_tokens.json")
KEPT_FILES = ("config.json", "generation_config.json", *TOKENIZER_FILES)
ARCHITECTURE = {"m2m_100": "M2M100ForConditionalGeneration", "mbart": "MBartForConditionalGeneration"}


def family_of(m: ModelConfig) -> str:
    """config.json's model_type of the family the options describe: mBART has learned positions."""
    return "mbart" if m.positions == "learned" else "m2m_100"


def family_problems(m: ModelConfig, kind: str) -> list[str]:
    """`model.key: value` phrases for each option the family `kind` does not compute."""
    wanted: dict[str, object] = {"norm": "pre", "position_offset": 2, "decoder_start": "eos"}
    if kind == "mbart":
        wanted.update(positions="learned", embedding_norm=True)
    else:
        wanted.update(positions="sinusoidal", position_table="fairseq", embedding_norm=False, share_embeddings=True)
    problems = [f"model.{k}: {getattr(m, k)} ({ARCHITECTURE[kind]} has {v})" for k, v in wanted.items()
                if getattr(m, k) != v]
    if m.encoder.type != "text":
        problems.append(f"model.encoder.type: {m.encoder.type} ({ARCHITECTURE[kind]} reads text)")
    if m.src_vocab_size != m.tgt_vocab_size:
        problems.append(f"model.src_vocab_size: {m.src_vocab_size} and model.tgt_vocab_size: {m.tgt_vocab_size} "
                        f"({ARCHITECTURE[kind]} has one vocabulary)")
    return problems


def keep_family_files(hf_dir: Path, model_dir: Path, ids: list[int], tokenizer_class: str,
                      tokenizers: TokenizerPair) -> None:
    """import-hf: `hf_dir`'s config and tokenizer files and the id map (their id of each of our ids)
    into `model_dir`/hf_family, for `export` (`tokenizers`: ours, as saved in `model_dir`)."""
    kept = model_dir / FAMILY_DIR
    kept.mkdir()
    for name in KEPT_FILES:
        if (hf_dir / name).is_file():
            shutil.copyfile(hf_dir / name, kept / name)
    write_json_atomic(kept / IDS_FILE, {"tokenizer_class": tokenizer_class,
                                        "tokenizer_sha256": weights_digest(model_dir / tokenizers.files[0]),
                                        "ids": ids})


class FamilyIds(TypedDict):
    """hf_family/seq2seq_ids.json: the tokenizer class, the digest of the SentencePiece model import-hf
    made, and their id of each of our ids."""

    tokenizer_class: str
    tokenizer_sha256: str
    ids: list[int]


def _family_files(loaded: LoadedModel, model_dir: Path) -> tuple[str, FamilyIds, Path]:
    """(config.json's model_type, seq2seq_ids.json, hf_family/) of a model the family can express;
    ExportError naming the option, or the missing or outdated hf_family/."""
    m = loaded.config.model
    kind = family_of(m)
    problems = family_problems(m, kind)
    if problems:
        raise ExportError(f"{model_dir} has {', '.join(fairseq_options(m))} (the options of an imported "
                          f"{kind} model), but {ARCHITECTURE[kind]} cannot express " + "; ".join(problems))
    kept = model_dir / FAMILY_DIR
    if not (kept / IDS_FILE).is_file() or not (kept / "config.json").is_file():
        raise ExportError(f"{model_dir} has no {FAMILY_DIR}/{IDS_FILE} (the family's config, tokenizer files and id "
                          f"map that import-hf keeps): only a model imported from an M2M100 / NLLB / mBART "
                          f"directory is exported as one")
    info: FamilyIds = read_json(kept / IDS_FILE)
    original = read_json(kept / "config.json")
    if original.get("model_type") != kind:
        raise ExportError(f"{kept / 'config.json'}: model_type {original.get('model_type')!r}, but the model's "
                          f"options are those of {kind}")
    if not loaded.tokenizers.joint or weights_digest(model_dir / JOINT_MODEL) != info.get("tokenizer_sha256"):
        raise ExportError(f"{model_dir}: the SentencePiece model is not the one import-hf made ({FAMILY_DIR}/"
                          f"{IDS_FILE} maps that one's ids): a model with new pieces or languages has no "
                          f"{ARCHITECTURE[kind]} tokenizer to export with it")
    if len(info["ids"]) != m.tgt_vocab_size or sorted(info["ids"]) != list(range(m.tgt_vocab_size)):
        raise ExportError(f"{kept / IDS_FILE}: the id map does not number the model's {m.tgt_vocab_size} rows")
    return kind, info, kept


def _config(loaded: LoadedModel, kind: str, kept: Path, tokenizer_class: str) -> MBartConfig | M2M100Config:
    """The original config.json with the model's sizes and dropouts, and the tokenizer class
    (CTranslate2 reads mBART-50's decoder start from it)."""
    import transformers

    m = loaded.config.model
    values = read_json(kept / "config.json")
    values.update(
        d_model=m.d_model, encoder_layers=m.n_encoder_layers, decoder_layers=m.n_decoder_layers,
        encoder_attention_heads=m.heads, decoder_attention_heads=m.heads, encoder_ffn_dim=m.ffn_dim,
        decoder_ffn_dim=m.ffn_dim, max_position_embeddings=m.max_positions, scale_embedding=m.scale_embedding,
        vocab_size=m.tgt_vocab_size, dropout=m.dropout, attention_dropout=m.attention_dropout,
        activation_dropout=m.activation_dropout, tie_word_embeddings=m.tie_output,
        tokenizer_class=tokenizer_class, architectures=[ARCHITECTURE[kind]],
    )
    if values.get("activation_function") not in ((m.activation, "silu") if m.activation == "swish" else (m.activation,)):
        values["activation_function"] = m.activation
    for key in ("transformers_version", "torch_dtype", "dtype"):
        values.pop(key, None)
    config_class = transformers.MBartConfig if kind == "mbart" else transformers.M2M100Config
    return config_class(**values)


def family_model(loaded: LoadedModel, model_dir: Path) -> tuple[PreTrainedModel, Path, str]:
    """The transformers model (eval mode) of the family with the model's weights in their ids, the
    hf_family/ directory, and the tokenizer class."""
    import transformers

    kind, info, kept = _family_files(loaded, model_dir)
    m = loaded.config.model
    config = _config(loaded, kind, kept, info["tokenizer_class"])
    state = model_tensors(loaded)
    if kind == "mbart" and not torch.equal(state["encoder.embed.tokens.weight"], state["decoder.embed.tokens.weight"]):
        raise ExportError(f"{model_dir} has model.share_embeddings: false with different source and target token "
                          f"embeddings, but {ARCHITECTURE[kind]} has one token table for both sides")
    index = torch.tensor(info["ids"])
    placed: dict[int, torch.Tensor] = {}  # one copy in their ids of a table several names share

    def their_rows(t: torch.Tensor) -> torch.Tensor:
        if t.data_ptr() not in placed:
            rows = t.new_empty(t.shape)
            rows[index] = t
            placed[t.data_ptr()] = rows
        return placed[t.data_ptr()]

    new = {}
    for ours, theirs, _ in tensor_map(m):  # pre-norm: no permutation
        t = _get(state, ours, m.d_model)
        new[theirs] = their_rows(t) if theirs.endswith("embed_tokens.weight") or theirs == "lm_head.weight" else t
    new["model.shared.weight"] = new["model.decoder.embed_tokens.weight"]
    if kind == "mbart":
        for side in ("encoder", "decoder"):
            for part in ("weight", "bias"):
                new[f"model.{side}.layernorm_embedding.{part}"] = state[f"{side}.embed.norm.{part}"]
    model = (transformers.MBartForConditionalGeneration(config) if isinstance(config, transformers.MBartConfig)
             else transformers.M2M100ForConditionalGeneration(config)).eval()  # (`_config`: the kind's class)
    own = model.state_dict()
    missing = [k for k in own if k not in new and k != "final_logits_bias"]
    if missing:
        raise ExportError(f"internal: no value for {missing[:5]}")
    with torch.no_grad():
        for k, t in new.items():
            if k not in own:  # M2M100's sinusoidal table: a buffer transformers computes, as ours does
                continue
            if own[k].shape != t.shape:
                raise ExportError(f"internal: transformers' {k} {tuple(own[k].shape)} does not fit {tuple(t.shape)}")
            own[k].copy_(t)
        if "final_logits_bias" in own:
            own["final_logits_bias"].zero_()
    if (kept / "generation_config.json").is_file():
        model.generation_config = transformers.GenerationConfig.from_pretrained(str(kept))
    else:
        model.generation_config = transformers.GenerationConfig.from_model_config(config)
    return model, kept, info["tokenizer_class"]


def _write_family(model: PreTrainedModel, kept: Path, out: Path) -> list[str]:
    """The transformers directory: weights, config, the original tokenizer files (their names)."""
    model.save_pretrained(str(out), safe_serialization=True)
    names = [name for name in TOKENIZER_FILES if (kept / name).is_file()]
    for name in names:
        shutil.copyfile(kept / name, out / name)
    return names


def _load(model_dir: str | Path, out_dir: str | Path, weights: str | Path | None,
          force: bool) -> tuple[LoadedModel, Path, Path]:
    require("transformers")
    model_dir = Path(model_dir)
    out = prepare_output(out_dir, force, [model_dir])
    return load_model_dir(model_dir, device="cpu", weights=weights), model_dir, out


def export_family_hf(model_dir: str | Path, out_dir: str | Path, weights: str | Path | None = None,
                     force: bool = False) -> Path:
    """Write MODEL_DIR as its family's transformers directory `out_dir` (see the module docstring)."""
    loaded, model_dir, out = _load(model_dir, out_dir, weights, force)
    model, kept, _ = family_model(loaded, model_dir)
    with Staging(out) as tmp:
        _write_family(model, kept, tmp)
    return out


def family_vocabulary(tokenizer: PreTrainedTokenizerBase, size: int) -> list[str]:
    """Their token of each of their ids, as CTranslate2's vocabulary: the tokenizer's, with the ids it
    has no token of its own for (M2M100's madeup words, read as <unk>) named `madeupwordN` as
    CTranslate2's converter names them."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(size)))
    assert isinstance(tokens, list)  # (a list of ids: a list of tokens)
    seen: set[str] = set()
    madeup = 0
    for i, token in enumerate(tokens):
        if token is None or token in seen:
            while f"madeupword{madeup}" in seen:
                madeup += 1
            token = tokens[i] = f"madeupword{madeup}"
        seen.add(token)
    return tokens


def export_family_ctranslate2(model_dir: str | Path, out_dir: str | Path, quantize: str | None = None,
                              weights: str | Path | None = None, force: bool = False) -> Path:
    """Write MODEL_DIR as the CTranslate2 model CTranslate2's converter makes of its family's
    transformers directory, with the tokenizer files (see the module docstring). quantize: as
    `seq2seq.deploy.ctranslate2.export_ctranslate2`'s."""
    require("ctranslate2")
    from ctranslate2.converters import TransformersConverter

    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ExportError(f"unknown quantization {quantize!r}; choose one of {', '.join(QUANTIZATIONS)}")
    loaded, model_dir, out = _load(model_dir, out_dir, weights, force)
    model, kept, _ = family_model(loaded, model_dir)
    # what CTranslate2's BartLoader reads and transformers' MBartConfig does not say: pre-norm layers
    model.config.normalize_before = True
    model.config.normalize_embedding = model.config.model_type == "mbart"
    int8 = quantize is not None and quantize.startswith("int8")

    class _Converter(TransformersConverter):
        def load_model(self, model_class: type[PreTrainedModel], model_name_or_path: str,
                       **kwargs: object) -> PreTrainedModel:
            return model  # the model in memory, not a second copy read back from the directory

        def load_tokenizer(self, tokenizer_class: type[PreTrainedTokenizerBase], model_name_or_path: str,
                           **kwargs: object) -> PreTrainedTokenizerBase:
            self.tokenizer = super().load_tokenizer(tokenizer_class, model_name_or_path, **kwargs)
            return self.tokenizer

        def _load(self) -> TransformerSpec:
            spec = super()._load()
            # the converter's M2M100 vocabulary misses the language codes that transformers 5's
            # tokenizer no longer lists among its special tokens: every id's token, from the tokenizer
            tokens = family_vocabulary(self.tokenizer, model.config.vocab_size)
            spec._vocabularies["source"] = [tokens]
            spec._vocabularies["target"] = [tokens]
            # MBart50Tokenizer names <s> its cls token only (bos_token None), which CTranslate2 cannot load
            spec.config.bos_token = tokens[model.config.bos_token_id]
            if int8:
                assert quantize is not None
                spec.validate()
                quantize_spec_int8(spec, quantize)
            return spec

    with Staging(out) as tmp:
        hf_dir = tmp / "hf"
        names = _write_family(model, kept, hf_dir)
        _Converter(str(hf_dir), copy_files=names).convert(str(tmp / "ct2"), quantization=None if int8 else quantize,
                                                          force=True)
        shutil.rmtree(hf_dir)
        for f in (tmp / "ct2").iterdir():
            f.replace(tmp / f.name)
        (tmp / "ct2").rmdir()
    return out


__all__ = ["FAMILY_DIR", "IDS_FILE", "export_family_ctranslate2", "export_family_hf", "family_model", "family_problems", "family_vocabulary", "keep_family_files"]
