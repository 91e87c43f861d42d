"""`import-hf` of the fairseq-trained families: M2M100, NLLB-200 (the M2M100 architecture with the
NLLB tokenizer) and mBART-50 (`seq2seq.deploy.hf_import` hands them here).

    import_fairseq(hf_dir, out, config, state)   # config.json's model_type "m2m_100" or "mbart"

What these models compute and ours does not by default is model options (`ModelConfig`):
`position_offset` 2 (fairseq numbers positions from padding id + 1), `position_table: fairseq`
(M2M100's sinusoidal layout) or learned positions (mBART, their table kept whole with its 2 unused
rows), `embedding_norm` (mBART's `layernorm_embedding`), `decoder_start: eos` (the decoder starts
with </s>), `scale_embedding` as config.json says; both families are pre-norm with final encoder
and decoder LayerNorms (`norm: pre`). The language codes become `data.languages` with
`data.language_tag: both`: a source is `<2src> X </s>` as the tokenizers write `[src_lang] X </s>`
(NLLB in its non-legacy behaviour; M2M100's `__en__`), and the target language's tag is forced as
the first target token, as `generate(forced_bos_token_id=...)` does.

The vocabulary (`fairseq_vocabulary`): transformers' own tokenizer (M2M100Tokenizer: vocab.json +
sentencepiece.bpe.model; NllbTokenizer, MBart50Tokenizer: sentencepiece.bpe.model with fairseq's
offset of 1, language codes after the pieces) gives the model id of every piece; our SentencePiece
model is sentencepiece.bpe.model re-numbered (pad 0, unk 1, bos 2, eos 3, the language tags
`<2xx>`, the pieces, then the model ids no piece has as UNUSED pieces), and the embedding and output
rows are gathered to match. Every model id is exactly one of ours, so every logit is theirs and the
softmax is over the same numbers: our BOS is their `<s>` row, our EOS their `</s>`, and the decoder's
first input reads the EOS row (`decoder_start: eos`). Not exact: sentencepiece.bpe.model pieces
that vocab.json lacks (M2M100Tokenizer reads them as <unk>) are dropped, so we segment around them
(metadata.json counts them).

Refused in one line, nothing written: a tokenizer file missing, a tokenizer class other than those
three (mBART-cc25's MBartTokenizer puts the code after the source), NLLB's legacy behaviour, special
ids that config.json and the tokenizer do not agree on, a decoder start other than </s>, an
activation we do not have, different encoder and decoder sizes.

The model directory keeps config.json, the tokenizer files and the id map in `hf_family/`
(`seq2seq.deploy.fairseq_export`), from which `export` writes the model back as its own family.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from seq2seq.config import DataConfig, ModelConfig, TokenizerConfig
from seq2seq.config.data_section import LANGUAGE_CODE
from seq2seq.config.root import Config
from seq2seq.deploy.fairseq_export import keep_family_files
from seq2seq.deploy.hf import layer_problems, our_tensors
from seq2seq.deploy.hf_vocab import (
    CONTROL, UNKNOWN, UNUSED, USER_DEFINED, Reindexed, _SpmModel, json_file,
)
from seq2seq.deploy.staging import ExportError, Staging
from seq2seq.storage.model_dir import ModelDir
from seq2seq.storage.weights import check_tensor
from seq2seq.text.tokenizer import TokenizerPair

if TYPE_CHECKING:  # an optional dependency (the export extra)
    from transformers import PreTrainedConfig, PreTrainedTokenizerBase

FAIRSEQ_ARCHITECTURES = ("m2m_100", "mbart")  # config.json's model_type
SPM_FILE = "sentencepiece.bpe.model"
# tokenizer class -> the files (beside SPM_FILE) import-hf reads through it
TOKENIZERS = {"M2M100Tokenizer": ("vocab.json",), "NllbTokenizer": (), "MBart50Tokenizer": ()}
NAMES = {"pad": "<pad>", "unk": "<unk>", "bos": "<s>", "eos": "</s>"}  # our special pieces


@dataclasses.dataclass(frozen=True)
class FairseqVocabulary:
    """A fairseq-trained model's vocabulary in our ids."""

    reindexed: Reindexed  # our tokenizer (one, joint) and their id of each of our ids
    languages: list[str]  # the language codes, data.languages
    tokenizer_class: str


def _tokenizer_class(hf_dir: Path, kind: str) -> str:
    """The transformers tokenizer class of the directory: tokenizer_config.json's, else the family's
    (M2M100Tokenizer where there is a vocab.json, NllbTokenizer for other m2m100 models,
    MBart50Tokenizer for mbart); ExportError for another class."""
    conf_path = hf_dir / "tokenizer_config.json"
    read = json_file(conf_path) if conf_path.is_file() else {}
    conf = read if isinstance(read, dict) else {}
    named = conf.get("tokenizer_class")
    if isinstance(named, str) and named:
        cls = named[:-4] if named.endswith("Fast") else named
        if cls not in TOKENIZERS:
            raise ExportError(f"{conf_path}: tokenizer_class {named!r} is not one import-hf reads for a {kind} model "
                              f"({', '.join(TOKENIZERS)}; mBART-cc25's MBartTokenizer puts the language code after "
                              "the source, which seq2seq does not)")
        if cls == "NllbTokenizer" and conf.get("legacy_behaviour"):
            raise ExportError(f"{conf_path}: legacy_behaviour is true (the language code after the source); "
                              "import-hf reads NLLB's non-legacy tokenization, [src_lang] X </s>")
        return cls
    if kind == "m2m_100":
        return "M2M100Tokenizer" if (hf_dir / "vocab.json").is_file() else "NllbTokenizer"
    return "MBart50Tokenizer"


def _load_tokenizer(hf_dir: Path, kind: str) -> tuple[PreTrainedTokenizerBase, str]:
    """transformers' tokenizer of the directory and its class name; ExportError naming a missing file."""
    import transformers

    cls = _tokenizer_class(hf_dir, kind)
    for name in (SPM_FILE, *TOKENIZERS[cls]):
        if not (hf_dir / name).is_file():
            raise ExportError(f"{hf_dir / name} is missing: import-hf needs the {cls} files ({SPM_FILE}"
                              f"{''.join(', ' + f for f in TOKENIZERS[cls])}) to make the model's tokenizer")
    try:
        tok = getattr(transformers, cls).from_pretrained(str(hf_dir))
    except Exception as e:  # noqa: BLE001 - transformers raises OSError, ValueError and its own errors
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise ExportError(f"{hf_dir}: transformers' {cls} cannot read the tokenizer files ({first})") from None
    return tok, cls


def _language_tokens(tok: PreTrainedTokenizerBase, cls: str, vocab: dict[str, int]) -> dict[str, tuple[str, int]]:
    """{their language token: (our language code, its id)}: M2M100's `__en__` -> "en"; NLLB's and
    mBART-50's codes as they are (`eng_Latn`, `en_XX`)."""
    if cls == "M2M100Tokenizer":
        return {tok.lang_code_to_token[code]: (code, i) for code, i in tok.lang_code_to_id.items()}
    if cls == "MBart50Tokenizer":
        return {code: (code, i) for code, i in tok.lang_code_to_id.items()}
    specials = {str(t) for t in (getattr(tok, "extra_special_tokens", None) or [])}
    specials |= {str(t) for t in (getattr(tok, "additional_special_tokens", None) or [])}
    if not specials:  # a tokenizer that does not list them: NLLB's 202 codes, those its vocabulary has
        from transformers.models.nllb import tokenization_nllb

        specials = set(getattr(tokenization_nllb, "FAIRSEQ_LANGUAGE_CODES", []))
    named = {str(t) for t in (tok.bos_token, tok.eos_token, tok.unk_token, tok.pad_token, tok.mask_token)}
    return {t: (t, vocab[t]) for t in sorted(specials - named) if t in vocab and LANGUAGE_CODE.fullmatch(t)}


def fairseq_vocabulary(hf_dir: Path, config: PreTrainedConfig) -> FairseqVocabulary:
    """Our tokenizer for the directory's transformers tokenizer and the id map (see the module
    docstring); ExportError for what cannot be mapped one to one."""
    tok, cls = _load_tokenizer(hf_dir, config.model_type)
    size = config.vocab_size
    vocab = {str(p): int(i) for p, i in tok.get_vocab().items()}
    theirs = {"pad": config.pad_token_id, "unk": tok.unk_token_id, "bos": config.bos_token_id,
              "eos": config.eos_token_id}
    problems = []
    bos = tok.bos_token or getattr(tok, "cls_token", None) or "<s>"  # MBart50Tokenizer names <s> its cls token only
    for key, token in (("pad", tok.pad_token), ("eos", tok.eos_token), ("bos", bos)):
        if vocab.get(str(token)) != theirs[key]:
            problems.append(f"config.json's {key}_token_id is {theirs[key]} but the tokenizer gives {token} the id "
                            f"{vocab.get(str(token))}")
    if config.decoder_start_token_id != config.eos_token_id:
        problems.append(f"the decoder starts with id {config.decoder_start_token_id}, not with </s> "
                        f"({config.eos_token_id}) as fairseq-trained models do")
    if len(set(theirs.values())) != 4 or any(not isinstance(i, int) or not 0 <= i < size for i in theirs.values()):
        problems.append(f"special ids pad/unk/bos/eos {list(theirs.values())} (four different ids below the model's "
                        f"{size} are needed)")
    languages = _language_tokens(tok, cls, vocab)
    if not languages:
        problems.append("the tokenizer has no language codes")
    bad = [t for t, (code, _) in languages.items() if not LANGUAGE_CODE.fullmatch(code)]
    if bad:
        problems.append(f"language tokens whose code is not a language code ({', '.join(bad[:3])})")
    beyond = [t for t, (_, i) in languages.items() if not 0 <= i < size]
    if beyond:
        problems.append(f"language tokens with ids beyond the model's vocabulary of {size} ({', '.join(beyond[:3])})")
    if problems:
        raise ExportError(f"{hf_dir}: " + "; ".join(problems))

    spm_model = _SpmModel(hf_dir / SPM_FILE)
    tag_of = {t: f"<2{code}>" for t, (code, _) in languages.items()}
    ids = [theirs["pad"], theirs["unk"], theirs["bos"], theirs["eos"]]
    pieces: list[tuple[str, float, int]] = []
    for token, (_, i) in sorted(languages.items(), key=lambda kv: kv[1][1]):
        pieces.append((tag_of[token], 0.0, USER_DEFINED))
        ids.append(i)
    taken = set(ids)
    kept, dropped = [], 0
    for piece, score, kind in spm_model.pieces:
        if kind in (UNKNOWN, CONTROL) or piece in NAMES.values():
            continue
        model_id = vocab.get(piece)
        if model_id is None or model_id in taken or not 0 <= model_id < size:
            dropped += 1  # their tokenizer reads it as <unk>: we segment around it
            continue
        kept.append((model_id, piece, score, kind))
        taken.add(model_id)
    for model_id, piece, score, kind in sorted(kept):
        pieces.append((piece, score, kind))
        ids.append(model_id)
    # every other model id (<mask>, M2M100's madeup words, rows past the tokenizer): an UNUSED piece of ours,
    # never produced by encoding, so that each logit of theirs is one of ours
    names = {i: p for p, i in vocab.items()}
    used = {p for p, _, _ in pieces} | set(NAMES.values())
    unused = 0
    for i in range(size):
        if i in taken:
            continue
        name = names.get(i, "")
        if not name or name in used or name in tag_of.values():
            name = f"<unused{i}>"
        pieces.append((name, 0.0, UNUSED))
        used.add(name)
        ids.append(i)
        unused += 1
    assert sorted(ids) == list(range(size)), "internal: the id map is not one to one"
    ours = spm_model.with_pieces(pieces, NAMES)
    info = {"vocabulary": f"re-indexed from {SPM_FILE}" + (" and vocab.json" if cls == "M2M100Tokenizer" else ""),
            "tokenizer_class": cls, "language_codes": len(languages), "spm_pieces_dropped": dropped,
            "model_ids_without_piece": unused,
            "language_tags": {t: tag_of[t] for t in sorted(languages, key=lambda t: languages[t][1])}}
    reindexed = Reindexed(TokenizerPair(ours, ours, joint=True), ids, ids, size, size, info,
                          sorted(code for code, _ in languages.values()))
    return FairseqVocabulary(reindexed, reindexed.languages, cls)


def _check_architecture(config: PreTrainedConfig) -> None:
    problems = layer_problems(config)
    if problems:
        raise ExportError(f"cannot import this {config.model_type} model exactly: " + "; ".join(problems))


def _model_config(config: PreTrainedConfig, state: dict[str, torch.Tensor]) -> ModelConfig:
    """Our model config for an M2M100 / mBART config (`state`: their tensors, rows in our ids)."""
    mbart = config.model_type == "mbart"
    enc, dec = state["model.encoder.embed_tokens.weight"], state["model.decoder.embed_tokens.weight"]
    share = enc.shape == dec.shape and torch.equal(enc, dec)
    if mbart:  # our shared embedding module holds the positions and the LayerNorm too
        for name in ("embed_positions.weight", "layernorm_embedding.weight", "layernorm_embedding.bias"):
            share = share and torch.equal(state[f"model.encoder.{name}"], state[f"model.decoder.{name}"])
    lm = state.get("lm_head.weight", dec)
    return ModelConfig(
        src_vocab_size=enc.size(0), tgt_vocab_size=dec.size(0), d_model=config.d_model,
        heads=config.encoder_attention_heads, ffn_dim=config.encoder_ffn_dim, layers=config.encoder_layers,
        decoder_layers=config.decoder_layers if config.decoder_layers != config.encoder_layers else None,
        dropout=config.dropout, attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout,
        activation="swish" if config.activation_function == "silu" else config.activation_function,
        norm="pre", positions="learned" if mbart else "sinusoidal", max_positions=config.max_position_embeddings,
        share_embeddings=share, tie_output=lm.shape == dec.shape and torch.equal(lm, dec), pad_id=0,
        scale_embedding=bool(config.scale_embedding),
        # M2M100 numbers positions from padding id + 1; mBART's learned table has 2 rows before them
        position_offset=2 if mbart else config.pad_token_id + 1,
        position_table="interleaved" if mbart else "fairseq", embedding_norm=mbart, decoder_start="eos",
    )


def _gather(state: dict[str, torch.Tensor], hf_dir: Path, v: FairseqVocabulary) -> None:
    """The token embeddings and the output projection in our ids (in place), one gathered copy for a
    matrix they share (M2M100 and NLLB tie all three: one copy, not three, of a 256k-row table)."""
    r = v.reindexed
    index = torch.tensor(r.tgt_ids)
    shared = state.pop("model.shared.weight", None)
    gathered: list[tuple[torch.Tensor, torch.Tensor]] = []  # (theirs, ours)
    for name in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"):
        if name not in state:
            raise ExportError(f"{hf_dir}: the safetensors weights have no {name}")
        t = state[name]
        if t.size(0) != r.tgt_size:
            raise ExportError(f"{hf_dir}: {name} has {t.size(0)} rows, but the vocabulary {r.tgt_size} ids")
        same = next((ours for theirs, ours in gathered if theirs is t or (theirs.shape == t.shape and torch.equal(
            theirs, t))), None)
        state[name] = same if same is not None else t[index]
        gathered.append((t, state[name]))
    del shared, gathered


def _our_model(m: ModelConfig, state: dict[str, torch.Tensor], hf_dir: Path, mbart: bool) -> torch.nn.Module:
    """Our model with their weights: `hf_import`'s tensor map, plus mBART's embedding LayerNorms. Built
    on the meta device and given their tensors as its parameters, so that the weights are in memory
    once (a 600M model: 2.4 GB, not twice that)."""
    from seq2seq.model.layers import Embedding, position_table
    from seq2seq.model.transformer import Seq2SeqTransformer

    if not mbart:  # M2M100's sinusoidal tables are not stored: ours computes the very same rows
        for side in ("encoder", "decoder"):
            state.setdefault(f"model.{side}.embed_positions.weight", torch.empty(0))
    ours = our_tensors(m, state, hf_dir)
    if mbart:
        for side in ("encoder", "decoder"):
            for part in ("weight", "bias"):
                name = f"model.{side}.layernorm_embedding.{part}"
                if name not in state:
                    raise ExportError(f"{hf_dir}: tensor {name} is missing")
                ours[f"{side}.embed.norm.{part}"] = state[name]
    state.clear()  # what is not in `ours` now is not needed
    with torch.device("meta"):
        model = Seq2SeqTransformer(m)
    own = model.state_dict()
    if m.share_embeddings:  # one module under both names: the decoder's tensors (equal, `_model_config`)
        for k in own:
            if k.startswith("encoder.embed."):
                ours[k] = ours["decoder" + k[len("encoder"):]]
    ours = {k: t for k, t in ours.items() if k in own}
    missing, unexpected = sorted(set(own) - set(ours)), sorted(set(ours) - set(own))
    if missing or unexpected:
        raise ExportError(f"{hf_dir} does not match the model config: missing {missing[:5]}, unexpected "
                          f"{unexpected[:5]}")
    for name, t in ours.items():  # load_into's checks (it copies into allocated weights; these are assigned)
        if own[name].shape != t.shape:
            raise ExportError(f"{hf_dir}: tensor '{name}' has shape {tuple(t.shape)}, the model config expects "
                              f"{tuple(own[name].shape)}")
        check_tensor(name, t, own[name].dtype, hf_dir)
    model.load_state_dict({k: t.contiguous() for k, t in ours.items()}, assign=True)
    for module in model.modules():  # buffers are no state: computed again, off the meta device
        if isinstance(module, Embedding) and not module.learned:
            module.table = position_table(m)
    return model


def import_fairseq(hf_dir: Path, out: Path, config: PreTrainedConfig, state: dict[str, torch.Tensor]) -> Path:
    """Write the M2M100 / NLLB / mBART-50 directory `hf_dir` (config.json read as `config`, its
    safetensors as `state`) as the model directory `out` (see the module docstring)."""
    mbart = config.model_type == "mbart"
    _check_architecture(config)
    if mbart:
        for side in ("encoder", "decoder"):
            name = f"model.{side}.embed_positions.weight"
            if name not in state:
                raise ExportError(f"{hf_dir}: the safetensors weights have no {name}")
    v = fairseq_vocabulary(hf_dir, config)
    _gather(state, hf_dir, v)
    m = _model_config(config, state)
    model = _our_model(m, state, hf_dir, mbart)
    tokenizers = v.reindexed.tokenizers
    cfg = Config(model=m, data=DataConfig(languages=list(v.languages), language_tag="both"),
                 tokenizer=TokenizerConfig(joint=True, vocab_size=m.tgt_vocab_size))
    with Staging(out) as tmp:
        model_dir = ModelDir(tmp)
        model_dir.save_weights(model.state_dict())
        model_dir.write_config(cfg)
        tokenizers.save(tmp)
        keep_family_files(hf_dir, tmp, v.reindexed.tgt_ids, v.tokenizer_class, tokenizers)
        model_dir.write_metadata({"imported_from": str(hf_dir.resolve()), "architecture": config.model_type,
                                  "hf_vocabulary": v.reindexed.info})
    return out


__all__ = ["FAIRSEQ_ARCHITECTURES", "FairseqVocabulary", "fairseq_vocabulary", "import_fairseq"]
