"""A Hugging Face `transformers` directory as a model directory (the inverse of
`seq2seq.deploy.hf.export_hf`).

    import_hf(hf_dir, out_dir)   # MarianMTModel / BlenderbotForConditionalGeneration -> model directory

Weights are read from safetensors only (never a pickle); a non-zero `final_logits_bias` is refused
(our output projection has no bias). Two kinds of vocabulary:

* **Ours** (what `export_hf` writes): MarianTokenizer files whose vocab.json gives every piece its
  SentencePiece id, with pad 0, unk 1, bos 2, eos 3. The model directory keeps the ids and gets the
  same logits; the seq2seq config `export_hf` saves beside the weights is restored when it describes
  the very model, otherwise the model directory gets our defaults with the model's sizes.
* **Re-indexed** (Helsinki-NLP opus-mt and other Marian conversions): vocab.json is one joint dict
  piece -> model id for both sides (`</s>` 0, `<unk>` 1, pieces, `<pad>` last), source.spm and
  target.spm have their own ids (unk 0, s 1, /s 2), and the decoder starts with pad. Each side gets a
  new SentencePiece model with our ids (pad 0, unk 1, bos 2, eos 3, then the pieces) and the
  embedding / output rows are gathered to match (`_reindex`). MarianTokenizer's ids map one to one
  onto ours, so the logits over corresponding ids are the same:
  - source: every source.spm piece is kept, so the segmentation is MarianTokenizer's; a piece that
    vocab.json lacks (MarianTokenizer: `<unk>`) gets an id of its own whose embedding is the `<unk>`
    row. vocab.json pieces that source.spm lacks cannot come out of it and have no source id.
  - target: every model id has one of ours (so every output logit is there and decoding writes the
    same text): vocab.json pieces that target.spm lacks (e.g. source-only pieces of the joint
    vocabulary) become UNUSED pieces, which SentencePiece never produces but decodes to their text.
    target.spm pieces that vocab.json lacks are dropped: the model cannot produce them, and encoding
    target text (fine-tuning) segments around them where MarianTokenizer would write `<unk>`.
  - the decoder starts from their pad row (our BOS); our PAD, which Marian does not have (its padding
    and decoder start are one id), is a copy of it: only padding reads it, and as an output it is never
    generated, but the softmax counts it, so every log-probability is lower than transformers' by
    log(1 + p(pad)), p(pad) being the probability transformers gives its (never generated) pad token.
  - share_embeddings only when source and target end up with the very same SentencePiece model;
    otherwise two gathered copies of a shared matrix (the output projection tied to the decoder's).
  Refused, with the file: multilingual vocabularies with `>>xx<<` target-language tokens (which
  MarianTokenizer reads at the start of a source), special ids that config.json and vocab.json do not
  agree on, a decoder start other than pad. Not exact (docs/deployment.md): source characters that
  source.spm does not know (MarianTokenizer looks their text up in the joint vocab.json), literal
  `</s>` / `<unk>` / `<pad>` in a source.

Marian's default FFN activation, "swish" (SiLU, as in most opus-mt models), is `model.activation:
swish`; relu and gelu import as themselves, any other activation is refused by the architecture check.
"""

from __future__ import annotations

import dataclasses
import json
import struct
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
from seq2seq.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer, TokenizerError, TokenizerPair


def _hf_tokenizers(hf_dir: Path, src_vocab: int, tgt_vocab: int) -> TokenizerPair:
    """Our tokenizers from a transformers directory's MarianTokenizer files; refused unless the
    vocabulary's ids are the SentencePiece model's own ids (with pad 0, unk 1, bos 2, eos 3)."""
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
                raise ExportError(f"{path} does not give each piece of the SentencePiece model its own id")
        if tok.vocab_size != size:
            raise ExportError(f"{hf_dir}: the SentencePiece model has {tok.vocab_size} pieces, the model {size}")
    joint = src.model_proto == tgt.model_proto
    return TokenizerPair(src, src if joint else tgt, joint=joint)


# --------------------------------------------------------------------------------------------
# Re-indexing a vocabulary that is not ours (Helsinki-NLP opus-mt)
# --------------------------------------------------------------------------------------------

# SentencePiece piece types (sentencepiece_model.proto)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def _encode_varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _proto_fields(data: bytes) -> list[tuple[int, Any, bytes]]:
    """The fields of a serialized protobuf message: (number, value, the field's own bytes); value is
    an int (varint) or bytes (length-delimited, fixed32, fixed64). Enough of protobuf to re-order a
    SentencePiece ModelProto without the protobuf package."""
    fields, i = [], 0
    while i < len(data):
        start = i
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, i = data[i:i + size], i + size
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i:i + size], i + size
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        if i > len(data):
            raise ValueError("truncated protobuf message")
        fields.append((number, value, data[start:i]))
    return fields


def _proto_field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, int):
        return _encode_varint(number << 3) + _encode_varint(value)
    return _encode_varint(number << 3 | 2) + _encode_varint(len(value)) + value


class _SpmModel:
    """A SentencePiece ModelProto as its pieces [(piece, score, type)] and the rest of its fields."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            fields = _proto_fields(path.read_bytes())
            self.pieces: list[tuple[str, float, int]] = []
            self.trainer = b""
            self.rest: list[bytes] = []
            for number, value, raw in fields:
                if number == 1:
                    piece = {n: v for n, v, _ in _proto_fields(value)}
                    score = struct.unpack("<f", piece[2])[0] if 2 in piece else 0.0
                    self.pieces.append((piece[1].decode("utf-8"), score, piece.get(3, NORMAL)))
                elif number == 2:
                    self.trainer = value
                elif number != 4:  # 4: self-test samples, which name the old ids
                    self.rest.append(raw)
        except (ValueError, KeyError, IndexError, TypeError, UnicodeDecodeError, struct.error) as e:
            raise ExportError(f"{path} is not a SentencePiece model ({e})") from None
        if not self.pieces:
            raise ExportError(f"{path} is not a SentencePiece model (no pieces)")

    def with_pieces(self, pieces: list[tuple[str, float, int]], names: dict[str, str]) -> Tokenizer:
        """The model with `pieces` after our four specials (names: pad/unk/bos/eos piece names), as
        our Tokenizer: pad 0, unk 1, bos 2, eos 3."""
        specials = [(names["pad"], 0.0, CONTROL), (names["unk"], 0.0, UNKNOWN), (names["bos"], 0.0, CONTROL),
                    (names["eos"], 0.0, CONTROL)]
        out = bytearray()
        for piece, score, kind in specials + pieces:
            message = (_proto_field(1, piece.encode("utf-8")) + _encode_varint(2 << 3 | 5)
                       + struct.pack("<f", score) + _proto_field(3, kind))
            out += _proto_field(1, message)
        # trainer_spec: our special ids (unk_id 40, bos_id 41, eos_id 42, pad_id 43) and piece names
        # (unk 45, bos 46, eos 47, pad 48); unk_surface (44) and the rest as they were
        trainer = b"".join(raw for number, _, raw in _proto_fields(self.trainer) if not 40 <= number <= 48
                           or number == 44)
        trainer += b"".join(_proto_field(n, v) for n, v in ((40, 1), (41, 2), (42, 3), (43, 0)))
        trainer += b"".join(_proto_field(n, names[k].encode("utf-8"))
                            for n, k in ((45, "unk"), (46, "bos"), (47, "eos"), (48, "pad")))
        out += _proto_field(2, trainer) + b"".join(self.rest)
        try:
            return Tokenizer(bytes(out), name=f"{self.path} (re-indexed)")
        except TokenizerError as e:
            raise ExportError(f"{self.path}: cannot re-index this SentencePiece model ({e})") from None


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ExportError(f"cannot read {path}: {e}") from None


def _vocab_file(path: Path) -> dict[str, int]:
    """A MarianTokenizer vocabulary (piece -> model id), checked to number 0..n-1 once each."""
    if not path.is_file():
        raise ExportError(f"{path} is missing: import-hf needs the MarianTokenizer vocabulary")
    vocab = _json(path)
    if not isinstance(vocab, dict) or not all(isinstance(v, int) and not isinstance(v, bool) for v in vocab.values()):
        raise ExportError(f"{path} is not a MarianTokenizer vocabulary (a JSON object piece -> id)")
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise ExportError(f"{path} does not number its {len(vocab)} pieces 0..{len(vocab) - 1} once each")
    return vocab


def _needs_reindexing(hf_dir: Path) -> bool:
    """Are the MarianTokenizer files not ours (vocab.json ids other than the SentencePiece model's own,
    or SentencePiece models without pad 0, unk 1, bos 2, eos 3)? Missing files: not re-indexed (the
    exact path says what is missing)."""
    if not (hf_dir / "vocab.json").is_file() or not (hf_dir / "source.spm").is_file():
        return False
    target = hf_dir / "target.spm" if (hf_dir / "target.spm").is_file() else hf_dir / "source.spm"
    target_vocab = hf_dir / "target_vocab.json" if (hf_dir / "target_vocab.json").is_file() else hf_dir / "vocab.json"
    for spm_path, vocab_path in ((hf_dir / "source.spm", hf_dir / "vocab.json"), (target, target_vocab)):
        try:
            tok = Tokenizer.load(spm_path)
        except TokenizerError:
            return True
        vocab = _json(vocab_path)
        if not isinstance(vocab, dict) or len(vocab) != tok.vocab_size or \
                any(vocab.get(tok.id_to_piece(i)) != i for i in range(tok.vocab_size)):
            return True
    return False


def _token_name(conf: dict[str, Any], key: str, default: str) -> str:
    value = conf.get(key, default)
    if isinstance(value, dict):  # an AddedToken written out
        value = value.get("content", default)
    return value if isinstance(value, str) else default


@dataclasses.dataclass
class _Reindexed:
    tokenizers: TokenizerPair
    src_ids: list[int]  # their source id of each of our source ids
    tgt_ids: list[int]  # their target id of each of our target ids
    src_size: int  # their vocabulary sizes
    tgt_size: int
    info: dict[str, Any]


def _reindex(hf_dir: Path, config: Any) -> _Reindexed:
    """Our SentencePiece models for a MarianTokenizer vocabulary in another order, and the id maps
    (see the module docstring)."""
    for name in ("source.spm", "target.spm"):
        if not (hf_dir / name).is_file():
            raise ExportError(f"{hf_dir / name} is missing: import-hf needs both SentencePiece models of a "
                              "MarianTokenizer")
    conf_path = hf_dir / "tokenizer_config.json"
    conf = _json(conf_path) if conf_path.is_file() else {}
    conf = conf if isinstance(conf, dict) else {}
    eos, unk, pad = (_token_name(conf, "eos_token", "</s>"), _token_name(conf, "unk_token", "<unk>"),
                     _token_name(conf, "pad_token", "<pad>"))
    src_vocab_path = hf_dir / "vocab.json"
    separate = bool(conf.get("separate_vocabs", False))
    tgt_vocab_path = hf_dir / "target_vocab.json" if separate else src_vocab_path  # the names from_pretrained reads
    src_vocab = _vocab_file(src_vocab_path)
    tgt_vocab = _vocab_file(tgt_vocab_path) if separate else src_vocab

    # The special tokens: config.json's ids must be vocab.json's
    problems = []
    for path, vocab in ((src_vocab_path, src_vocab), (tgt_vocab_path, tgt_vocab)):
        for token in (eos, unk):
            if token not in vocab:
                problems.append(f"{path.name} has no {token}")
    for key, token in (("eos_token_id", eos), ("pad_token_id", pad)):
        if getattr(config, key, None) != tgt_vocab.get(token):
            problems.append(f"config.json's {key} is {getattr(config, key, None)} but {tgt_vocab_path.name} gives "
                            f"{token} the id {tgt_vocab.get(token)}")
    if config.decoder_start_token_id != config.pad_token_id:
        problems.append(f"the decoder starts with id {config.decoder_start_token_id}, not with pad "
                        f"({config.pad_token_id}) as Marian models do")
    generation = hf_dir / "generation_config.json"
    if generation.is_file():
        gen = _json(generation)
        for key in ("decoder_start_token_id", "eos_token_id"):
            value = gen.get(key) if isinstance(gen, dict) else None
            if isinstance(value, list) and len(value) == 1:
                value = value[0]
            if value is not None and value != getattr(config, key):
                problems.append(f"generation_config.json's {key} {value} is not config.json's "
                                f"{getattr(config, key)}")
    if problems:
        raise ExportError(f"{src_vocab_path}: " + "; ".join(problems) + " (import-hf needs each special token to "
                          "have its own id, the same in config.json and the vocabulary)")
    codes = [p for p in src_vocab if p.startswith(">>") and p.endswith("<<")]
    if codes:
        raise ExportError(f"{src_vocab_path} has {len(codes)} target-language tokens ({', '.join(codes[:3])}, ...): "
                          "a multilingual model, steered by a token that MarianTokenizer takes from the start of "
                          "the source; seq2seq's tokenizer cannot do that, so it is not imported")
    bos = "<s>"
    for path, vocab in ((src_vocab_path, src_vocab), (tgt_vocab_path, tgt_vocab)):
        if bos in vocab and bos not in (eos, unk, pad):
            raise ExportError(f"{path} gives {bos} an id of its own; import-hf maps the decoder start (pad) to "
                              f"seq2seq's {bos} and cannot keep both")
    names = {"pad": pad, "unk": unk, "bos": bos, "eos": eos}
    specials = {eos, unk, pad}

    # Source: every source.spm piece (the segmentation is MarianTokenizer's); those vocab.json lacks read
    # the <unk> row. Model order first, then the spm's order.
    src_spm = _SpmModel(hf_dir / "source.spm")
    kept = [(p, s, t) for p, s, t in src_spm.pieces if t not in (UNKNOWN, CONTROL) and p not in specials
            and p not in names.values()]
    known = sorted((p for p in kept if p[0] in src_vocab), key=lambda p: src_vocab[p[0]])
    unknown = [p for p in kept if p[0] not in src_vocab]
    src_tok = src_spm.with_pieces(known + unknown, names)
    src_pad = src_vocab.get(pad, src_vocab[unk])
    src_ids = ([src_pad, src_vocab[unk], src_pad, src_vocab[eos]] + [src_vocab[p] for p, _, _ in known]
               + [src_vocab[unk]] * len(unknown))

    # Target: every model id (each output logit), in the model's order; target.spm's pieces the model
    # lacks are dropped, model pieces target.spm lacks are UNUSED (decoded, never produced).
    tgt_spm = _SpmModel(hf_dir / "target.spm")
    scores = {p: (s, t) for p, s, t in tgt_spm.pieces}
    pieces, unused = [], 0
    for p, _ in sorted(tgt_vocab.items(), key=lambda kv: kv[1]):
        if p in specials:
            continue
        score, kind = scores.get(p, (0.0, UNUSED))
        if kind == UNKNOWN:
            kind = UNUSED
        unused += p not in scores
        pieces.append((p, score, kind))
    dropped = sum(1 for p, _, t in tgt_spm.pieces if t not in (UNKNOWN, CONTROL) and p not in tgt_vocab)
    tgt_tok = tgt_spm.with_pieces(pieces, names)
    tgt_pad = tgt_vocab[pad]
    tgt_ids = [tgt_pad, tgt_vocab[unk], tgt_pad, tgt_vocab[eos]] + [tgt_vocab[p] for p, _, _ in pieces]
    assert sorted(set(tgt_ids)) == list(range(len(tgt_vocab))), "internal: the target map misses a model id"

    joint = src_tok.model_proto == tgt_tok.model_proto and src_ids == tgt_ids
    tokenizers = TokenizerPair(src_tok, src_tok if joint else tgt_tok, joint=joint)
    info = {
        "vocabulary": f"re-indexed from {src_vocab_path.name}" + (f" and {tgt_vocab_path.name}" if separate else ""),
        "source_pieces_read_as_unk": len(unknown),
        "target_pieces_not_in_target_spm": unused,
        "target_spm_pieces_dropped": dropped,
    }
    return _Reindexed(tokenizers, src_ids, tgt_ids, len(src_vocab), len(tgt_vocab), info)


def _gather_rows(state: dict[str, torch.Tensor], hf_dir: Path, r: _Reindexed) -> None:
    """The token embeddings and the output projection in our ids (in place; tied tensors filled in)."""
    state.pop("model.shared.weight", None)
    tables = {"model.encoder.embed_tokens.weight": (r.src_ids, r.src_size),
              "model.decoder.embed_tokens.weight": (r.tgt_ids, r.tgt_size), "lm_head.weight": (r.tgt_ids, r.tgt_size)}
    for name, (ids, size) in tables.items():
        if name not in state:
            raise ExportError(f"{hf_dir}: the safetensors weights have no {name}")
        if state[name].size(0) != size:
            raise ExportError(f"{hf_dir}: {name} has {state[name].size(0)} rows, but the vocabulary {size} ids")
        state[name] = state[name][torch.tensor(ids)]


def _check_architecture(config: Any, state: dict[str, torch.Tensor], reindexed: bool = False) -> None:
    """ExportError with every reason why our model cannot compute what this one does; `reindexed`: the
    vocabulary is re-indexed (`_reindex`), so the special ids need not be ours."""
    kind = config.model_type
    if kind not in ("marian", "blenderbot"):
        raise ExportError(f"import-hf reads MarianMTModel (post-norm) and BlenderbotForConditionalGeneration "
                          f"(pre-norm) directories, not {kind!r}")
    problems = []
    if not config.scale_embedding:
        problems.append("scale_embedding is false (seq2seq scales embeddings by sqrt(d_model))")
    if config.activation_function not in ("relu", "gelu", "swish", "silu"):
        problems.append(f"activation {config.activation_function!r} (seq2seq has relu, gelu and swish)")
    if config.encoder_attention_heads != config.decoder_attention_heads:
        problems.append("different encoder and decoder head counts")
    if config.encoder_ffn_dim != config.decoder_ffn_dim:
        problems.append("different encoder and decoder FFN sizes")
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


def _model_config_from_hf(config: Any, state: dict[str, torch.Tensor], reindexed: bool = False) -> ModelConfig:
    """Our model config for a transformers config (refused with every reason when not exact); `reindexed`:
    the embeddings are already in our ids (`_gather_rows`), and their sizes are the vocabulary's."""
    _check_architecture(config, state, reindexed)
    kind = config.model_type
    enc = state["model.encoder.embed_tokens.weight"]
    dec = state["model.decoder.embed_tokens.weight"]
    src_vocab = enc.size(0) if reindexed else config.vocab_size
    tgt_vocab = dec.size(0) if reindexed else getattr(config, "decoder_vocab_size", None) or config.vocab_size
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


def import_hf(hf_dir: str | Path, out_dir: str | Path, force: bool = False) -> Path:
    """Write a transformers MarianMTModel / BlenderbotForConditionalGeneration directory (with its
    MarianTokenizer files) as a seq2seq model directory: the same logits over corresponding ids. A
    vocabulary that is not ours (opus-mt) is re-indexed; see the module docstring."""
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
        tensors = load_file(str(f))
        bias = tensors.get("final_logits_bias")
        if bias is not None and bool(bias.ne(0).any()):
            raise ExportError(f"{f}: final_logits_bias is not zero, and seq2seq's output projection has no bias, so "
                              "this model cannot be imported exactly")
        state.update({k: v.float() for k, v in tensors.items()})
    # Tied tensors may be stored once: fill them in as transformers would.
    if "model.shared.weight" in state:
        for k in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"):
            state.setdefault(k, state["model.shared.weight"])
    if "lm_head.weight" not in state and getattr(config, "tie_word_embeddings", True) \
            and "model.decoder.embed_tokens.weight" in state:
        state["lm_head.weight"] = state["model.decoder.embed_tokens.weight"]
    reindexed = None
    if _needs_reindexing(hf_dir):  # opus-mt: our SentencePiece models, the embedding and output rows in our ids
        _check_architecture(config, state, reindexed=True)
        reindexed = _reindex(hf_dir, config)
        _gather_rows(state, hf_dir, reindexed)
    m = _model_config_from_hf(config, state, reindexed=reindexed is not None)
    if reindexed is not None:
        tokenizers = reindexed.tokenizers
    else:
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
        meta = {"imported_from": str(hf_dir.resolve()), "architecture": config.model_type}
        if reindexed is not None:
            meta["hf_vocabulary"] = reindexed.info
        model_dir.write_metadata(meta)
    return out


__all__ = ["import_hf"]
