"""The MarianTokenizer files of a transformers directory as our tokenizers, for `import-hf`
(`seq2seq.deploy.hf_import`). Two kinds of vocabulary:

* **Ours** (what `export_hf` writes; `hf_tokenizers`): MarianTokenizer files whose vocab.json gives
  every piece its SentencePiece id, with pad 0, unk 1, bos 2, eos 3. The model directory keeps the ids.
* **Re-indexed** (Helsinki-NLP opus-mt and other Marian conversions; `needs_reindexing`, `reindex`,
  `gather_rows`): vocab.json is one joint dict piece -> model id for both sides (`</s>` 0, `<unk>` 1,
  pieces, `<pad>` last), source.spm and target.spm have their own ids (unk 0, s 1, /s 2), and the
  decoder starts with pad. Each side gets a new SentencePiece model with our ids (pad 0, unk 1, bos 2,
  eos 3, then the pieces) and the embedding / output rows are gathered to match. MarianTokenizer's ids
  map one to one onto ours, so the logits over corresponding ids are the same:
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
  - target-language tokens (multilingual opus-mt models, `language_tokens`): each `>>xx<<` of
    vocab.json, which MarianTokenizer takes from the start of a source ("`>>fr<< text`" -> the id of
    `>>fr<<`, then the SentencePiece pieces of " text"), becomes our reserved source piece `<2xx>`
    (USER_DEFINED, its embedding their `>>xx<<` row), and `Reindexed.languages` the model's
    `data.languages`: `source_prefix` then puts that piece's id before each source, as MarianTokenizer
    does. The code is kept as it is (`>>fra<<` -> `<2fra>`, `>>zho_Hans<<` -> `<2zho_Hans>`); a token
    whose code is not a language code (`seq2seq.config.data_section.LANGUAGE_CODE`) is refused. On the
    target side they stay UNUSED pieces with their text, like every model piece target.spm lacks.
    Only tokens at the start of the source are read so (MarianTokenizer's own rule).
  Refused, with the file: `>>xx<<` tokens whose code is not a language code, special ids that
  config.json and vocab.json do not agree on, a decoder start other than pad. Not exact
  (docs/deployment.md): source characters that source.spm does not know (MarianTokenizer looks their
  text up in the joint vocab.json), literal `</s>` / `<unk>` / `<pad>` in a source.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from seq2seq.config import json_reader
from seq2seq.config.json_reader import JSONObject, JSONValue
from seq2seq.config.data_section import LANGUAGE_CODE
from seq2seq.deploy.staging import ExportError
from seq2seq.text.tokenizer import Tokenizer, TokenizerError, TokenizerPair

if TYPE_CHECKING:  # an optional dependency (the export extra)
    from transformers import PreTrainedConfig


def hf_tokenizers(hf_dir: Path, src_vocab: int, tgt_vocab: int) -> TokenizerPair:
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
            vocab = json_file(path)
            if not isinstance(vocab, dict) or len(vocab) != tok.vocab_size or \
                    any(vocab.get(tok.id_to_piece(i)) != i for i in range(tok.vocab_size)):
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
        value: int | bytes
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


def json_file(path: Path) -> JSONValue:
    try:
        return json_reader.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ExportError(f"cannot read {path}: {e}") from None


def _vocab_file(path: Path) -> dict[str, int]:
    """A MarianTokenizer vocabulary (piece -> model id), checked to number 0..n-1 once each."""
    if not path.is_file():
        raise ExportError(f"{path} is missing: import-hf needs the MarianTokenizer vocabulary")
    read = json_file(path)
    vocab = {k: v for k, v in read.items() if isinstance(v, int) and not isinstance(v, bool)} \
        if isinstance(read, dict) else {}
    if not isinstance(read, dict) or len(vocab) != len(read):
        raise ExportError(f"{path} is not a MarianTokenizer vocabulary (a JSON object piece -> id)")
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise ExportError(f"{path} does not number its {len(vocab)} pieces 0..{len(vocab) - 1} once each")
    return vocab


def needs_reindexing(hf_dir: Path) -> bool:
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
        vocab = json_file(vocab_path)
        if not isinstance(vocab, dict) or len(vocab) != tok.vocab_size or \
                any(vocab.get(tok.id_to_piece(i)) != i for i in range(tok.vocab_size)):
            return True
    return False


def _token_name(conf: JSONObject, key: str, default: str) -> str:
    value = conf.get(key, default)
    if isinstance(value, dict):  # an AddedToken written out
        value = value.get("content", default)
    return value if isinstance(value, str) else default


@dataclasses.dataclass
class _MarianVocab:
    """A MarianTokenizer's vocabulary files (piece -> model id) and its special pieces."""
    src_path: Path
    tgt_path: Path  # src_path unless the tokenizer has separate vocabularies (target_vocab.json)
    src: dict[str, int]
    tgt: dict[str, int]
    separate: bool
    names: dict[str, str]  # the piece of our pad, unk, bos and eos

    @property
    def specials(self) -> set[str]:
        """Their special pieces (eos, unk, pad), which no re-indexed SentencePiece model keeps as pieces."""
        return {self.names["eos"], self.names["unk"], self.names["pad"]}


def _marian_vocab(hf_dir: Path) -> _MarianVocab:
    """The vocabulary files from_pretrained reads, and the special pieces tokenizer_config.json names."""
    for name in ("source.spm", "target.spm"):
        if not (hf_dir / name).is_file():
            raise ExportError(f"{hf_dir / name} is missing: import-hf needs both SentencePiece models of a "
                              "MarianTokenizer")
    conf_path = hf_dir / "tokenizer_config.json"
    conf = json_file(conf_path) if conf_path.is_file() else {}
    conf = conf if isinstance(conf, dict) else {}
    eos, unk, pad = (_token_name(conf, "eos_token", "</s>"), _token_name(conf, "unk_token", "<unk>"),
                     _token_name(conf, "pad_token", "<pad>"))
    src_path = hf_dir / "vocab.json"
    separate = bool(conf.get("separate_vocabs", False))
    tgt_path = hf_dir / "target_vocab.json" if separate else src_path  # the names from_pretrained reads
    src = _vocab_file(src_path)
    tgt = _vocab_file(tgt_path) if separate else src
    return _MarianVocab(src_path, tgt_path, src, tgt, separate, {"pad": pad, "unk": unk, "bos": "<s>", "eos": eos})


def _check_special_ids(hf_dir: Path, config: PreTrainedConfig, v: _MarianVocab) -> None:
    """ExportError with every disagreement between config.json (and generation_config.json) and the
    vocabulary on the special tokens' ids, and with a decoder start other than pad."""
    eos, unk, pad = v.names["eos"], v.names["unk"], v.names["pad"]
    problems = []
    for path, vocab in ((v.src_path, v.src), (v.tgt_path, v.tgt)):
        for token in (eos, unk):
            if token not in vocab:
                problems.append(f"{path.name} has no {token}")
    for key, token in (("eos_token_id", eos), ("pad_token_id", pad)):
        if getattr(config, key, None) != v.tgt.get(token):
            problems.append(f"config.json's {key} is {getattr(config, key, None)} but {v.tgt_path.name} gives "
                            f"{token} the id {v.tgt.get(token)}")
    if config.decoder_start_token_id != config.pad_token_id:
        problems.append(f"the decoder starts with id {config.decoder_start_token_id}, not with pad "
                        f"({config.pad_token_id}) as Marian models do")
    generation = hf_dir / "generation_config.json"
    if generation.is_file():
        gen = json_file(generation)
        for key in ("decoder_start_token_id", "eos_token_id"):
            value = gen.get(key) if isinstance(gen, dict) else None
            if isinstance(value, list) and len(value) == 1:
                value = value[0]
            if value is not None and value != getattr(config, key):
                problems.append(f"generation_config.json's {key} {value} is not config.json's "
                                f"{getattr(config, key)}")
    if problems:
        raise ExportError(f"{v.src_path}: " + "; ".join(problems) + " (import-hf needs each special token to "
                          "have its own id, the same in config.json and the vocabulary)")


def is_language_token(piece: str) -> bool:
    """A MarianTokenizer target-language token: ">>fr<<", ">>zho_Hans<<"."""
    return len(piece) > 4 and piece.startswith(">>") and piece.endswith("<<")


def language_tokens(v: _MarianVocab) -> dict[str, str]:
    """{">>fr<<": "fr"}: the source vocabulary's target-language tokens and their language codes (kept
    as they are: `>>fra<<` -> "fra", `>>zho_Hans<<` -> "zho_Hans"); ExportError naming the tokens whose
    code is not a language code (so not a `<2xx>` tag of ours)."""
    tokens = {p: p[2:-2] for p in v.src if is_language_token(p)}
    bad = [p for p, code in tokens.items() if not LANGUAGE_CODE.fullmatch(code)]
    if bad:
        raise ExportError(f"{v.src_path} has target-language tokens whose code is not a language code "
                          f"({', '.join(bad[:3])}{', ...' if len(bad) > 3 else ''}; seq2seq's language tags need "
                          f"two or three letters, then optional -/_ parts: >>de<<, >>fra<<, >>zho_Hans<<)")
    return tokens


def _check_bos(v: _MarianVocab) -> None:
    """ExportError for a `<s>` with an id of its own, which our tokenizer cannot keep."""
    bos = v.names["bos"]
    for path, vocab in ((v.src_path, v.src), (v.tgt_path, v.tgt)):
        if bos in vocab and bos not in v.specials:
            raise ExportError(f"{path} gives {bos} an id of its own; import-hf maps the decoder start (pad) to "
                              f"seq2seq's {bos} and cannot keep both")


def _source_side(spm_model: _SpmModel, v: _MarianVocab,
                 languages: dict[str, str]) -> tuple[Tokenizer, list[int], int]:
    """Our source tokenizer, their id of each of our source ids, and how many pieces read the <unk> row.
    Every source.spm piece is kept (the segmentation is MarianTokenizer's); those vocab.json lacks read
    the <unk> row. Each target-language token of `languages` ({">>fr<<": "fr"}) is our reserved piece
    `<2fr>` (USER_DEFINED, reading its row), numbered right after the special ids as a trained
    tokenizer numbers its tags. Then model order, then the spm's order."""
    vocab, unk = v.src, v.names["unk"]
    kept = [(p, s, t) for p, s, t in spm_model.pieces if t not in (UNKNOWN, CONTROL) and p not in v.specials
            and p not in v.names.values() and p not in languages]
    tags = sorted(((f"<2{code}>", 0.0, USER_DEFINED, token) for token, code in languages.items()),
                  key=lambda p: vocab[p[3]])
    known = tags + sorted(((p, s, t, p) for p, s, t in kept if p in vocab), key=lambda p: vocab[p[3]])
    unknown = [p for p in kept if p[0] not in vocab]
    tok = spm_model.with_pieces([p[:3] for p in known] + unknown, v.names)
    pad = vocab.get(v.names["pad"], vocab[unk])
    ids = [pad, vocab[unk], pad, vocab[v.names["eos"]]] + [vocab[p[3]] for p in known] + [vocab[unk]] * len(unknown)
    return tok, ids, len(unknown)


def _target_side(spm_model: _SpmModel, v: _MarianVocab) -> tuple[Tokenizer, list[int], int, int]:
    """Our target tokenizer, their id of each of our target ids, how many model pieces target.spm lacks
    and how many target.spm pieces are dropped. Every model id (each output logit) is kept, in the
    model's order; target.spm's pieces the model lacks are dropped, model pieces target.spm lacks are
    UNUSED (decoded, never produced)."""
    vocab = v.tgt
    scores = {p: (s, t) for p, s, t in spm_model.pieces}
    pieces, unused = [], 0
    for p, _ in sorted(vocab.items(), key=lambda kv: kv[1]):
        if p in v.specials:
            continue
        score, kind = scores.get(p, (0.0, UNUSED))
        if kind == UNKNOWN:
            kind = UNUSED
        unused += p not in scores
        pieces.append((p, score, kind))
    dropped = sum(1 for p, _, t in spm_model.pieces if t not in (UNKNOWN, CONTROL) and p not in vocab)
    tok = spm_model.with_pieces(pieces, v.names)
    pad = vocab[v.names["pad"]]
    ids = [pad, vocab[v.names["unk"]], pad, vocab[v.names["eos"]]] + [vocab[p] for p, _, _ in pieces]
    assert sorted(set(ids)) == list(range(len(vocab))), "internal: the target map misses a model id"
    return tok, ids, unused, dropped


@dataclasses.dataclass
class Reindexed:
    tokenizers: TokenizerPair
    src_ids: list[int]  # their source id of each of our source ids
    tgt_ids: list[int]  # their target id of each of our target ids
    src_size: int  # their vocabulary sizes
    tgt_size: int
    info: dict[str, object]  # what import-hf records of the re-indexing (metadata.json's hf_vocabulary)
    languages: list[str] = dataclasses.field(default_factory=list)  # from >>xx<< tokens: data.languages


def reindex(hf_dir: Path, config: PreTrainedConfig) -> Reindexed:
    """Our SentencePiece models for a MarianTokenizer vocabulary in another order, and the id maps
    (see the module docstring)."""
    v = _marian_vocab(hf_dir)
    _check_special_ids(hf_dir, config, v)
    _check_bos(v)
    languages = language_tokens(v)
    src_tok, src_ids, read_as_unk = _source_side(_SpmModel(hf_dir / "source.spm"), v, languages)
    tgt_tok, tgt_ids, unused, dropped = _target_side(_SpmModel(hf_dir / "target.spm"), v)
    joint = src_tok.model_proto == tgt_tok.model_proto and src_ids == tgt_ids
    tokenizers = TokenizerPair(src_tok, src_tok if joint else tgt_tok, joint=joint)
    info: dict[str, object] = {
        "vocabulary": f"re-indexed from {v.src_path.name}" + (f" and {v.tgt_path.name}" if v.separate else ""),
        "source_pieces_read_as_unk": read_as_unk,
        "target_pieces_not_in_target_spm": unused,
        "target_spm_pieces_dropped": dropped,
    }
    if languages:
        info["language_tags"] = {token: f"<2{code}>" for token, code in languages.items()}
    return Reindexed(tokenizers, src_ids, tgt_ids, len(v.src), len(v.tgt), info, sorted(languages.values()))


def gather_rows(state: dict[str, torch.Tensor], hf_dir: Path, r: Reindexed) -> None:
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


__all__ = ["Reindexed", "gather_rows", "hf_tokenizers", "json_file", "needs_reindexing", "reindex"]
