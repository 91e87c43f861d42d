"""New language codes and pieces for a pretrained model directory (`seq2seq add-vocab BASE OUT`), before
fine-tuning it on them: what `tokenizer.add_tokens` + `model.resize_token_embeddings` do for a
transformers model, with the new rows initialised from rows the model already knows.

    extend_model_dir("runs/nllb", "runs/nllb-xho", [NewLanguage("xho_Latn", like="zul_Latn")], ["▁umuntu"])

- **A new language code** (`xho_Latn`) joins `data.languages`, and its tag `<2xho_Latn>` becomes a new
  piece of each tokenizer whose side carries language tags (`seq2seq.text.languages`: the source for
  `language_tag: source`, the decoder for `decoder`, both for `both`). Its rows are a copy of the row of
  the related language's tag (`like`), or, without one, the mean of the rows of the model's language tags.
- **A new piece** (`▁umuntu`: a word-start piece) joins every tokenizer, as a user-defined piece: kept whole
  wherever its text occurs, as transformers' added tokens are. Its rows are the mean of the rows of the
  pieces the old tokenizer writes its text with (`▁um`, `untu`).

New pieces get the ids after the old ones, in the order given (language tags first); every old id keeps its
row bit for bit, in every vocabulary-indexed weight: the source and target embeddings and an untied output
projection (a tied one is the target embedding). OUT is an ordinary model directory (translate, train
--init-from, export); its metadata.json says what was added, with which ids, from which rows
(`added_vocabulary`). Only models that list their languages in `data.languages` (those `import-hf`
writes: M2M100, NLLB-200, mBART-50, multilingual opus-mt) take new language codes.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import struct
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import torch

from seq2seq.config.data_section import LANGUAGE_CODE
from seq2seq.config.diagnostics import Seq2SeqError
from seq2seq.config.root import Config
from seq2seq.model.transformer import Seq2SeqTransformer
from seq2seq.storage.atomic import shared_mode
from seq2seq.storage.model_dir import ModelDir
from seq2seq.text.languages import (language_tag, model_languages, reserved_pieces, tag_language,
                                    target_reserved_pieces)
from seq2seq.text.tokenizer import Tokenizer, TokenizerPair

NewPiece = TypedDict("NewPiece", {"id": int | None, "from": list[str]})
"""A piece added to one side's tokenizer: its id and the old pieces its embedding rows are the mean of."""


class AddedVocabulary(TypedDict):
    """What metadata.json records of an `extend_model_dir` run (its `added_vocabulary`)."""

    base: str
    languages: dict[str, str | None]
    pieces: list[str]
    source: dict[str, NewPiece]
    target: dict[str, NewPiece]

log = logging.getLogger(__name__)

USER_DEFINED = 4  # SentencePiece's ModelProto.SentencePiece.Type of a piece kept whole wherever it occurs
METADATA_KEY = "added_vocabulary"


class VocabularyError(Seq2SeqError, ValueError):
    """New language codes or pieces a model directory cannot take; one line naming the code or piece."""


@dataclass(frozen=True)
class NewLanguage:
    """A language code to add, and the model's language whose rows it starts from (None: the mean of the
    model's language-code rows)."""

    code: str
    like: str | None = None

    @classmethod
    def parse(cls, text: str) -> NewLanguage:
        """"xho_Latn=zul_Latn" or "xho_Latn"; VocabularyError for a part that is not a language code."""
        code, _, like = text.partition("=")
        for part in (code, like) if like else (code,):
            if not LANGUAGE_CODE.fullmatch(part):
                raise VocabularyError(f"--new-lang {text}: {part!r} is not a language code (two or three letters, "
                                      f"then optional -/_ parts: xho, pt_BR, xho_Latn); write CODE or CODE=RELATED")
        return cls(code, like or None)


def _piece_message(piece: str) -> bytes:
    """One ModelProto.pieces entry (field 1): piece (1, string), score 0 (2, float), type (3, enum)."""
    text = piece.encode("utf-8")
    body = _length_delimited(1, text) + bytes([2 << 3 | 5]) + struct.pack("<f", 0.0) + bytes([3 << 3, USER_DEFINED])
    return _length_delimited(1, body)


def _length_delimited(number: int, payload: bytes) -> bytes:
    size, out = len(payload), bytearray([number << 3 | 2])
    while size >= 0x80:
        out.append(size & 0x7F | 0x80)
        size >>= 7
    return bytes(out + bytes([size]) + payload)


def with_pieces(tokenizer: Tokenizer, pieces: Sequence[str]) -> Tokenizer:
    """`tokenizer` with `pieces` appended as user-defined pieces: ids vocab_size, vocab_size + 1, ... (a
    repeated protobuf field read in order: appending its entries to the serialized model appends them)."""
    proto = tokenizer.model_proto + b"".join(_piece_message(p) for p in pieces)
    extended = Tokenizer(proto, name=f"{tokenizer.name} + {len(pieces)} pieces")
    got = [extended.piece_id(p) for p in pieces]
    assert got == list(range(tokenizer.vocab_size, tokenizer.vocab_size + len(pieces))), got
    return extended


@dataclass(frozen=True)
class _Side:
    """One side's tokenizer before and after, its new pieces, and how each new row is made."""

    old: Tokenizer
    new: Tokenizer
    pieces: list[str]
    sources: dict[str, list[int]]  # new piece -> the old ids whose rows' mean is its row

    def rows(self, weight: torch.Tensor) -> torch.Tensor:
        """The new rows [len(pieces), D] of a vocabulary-indexed weight [V_old, D]."""
        return torch.stack([weight[self.sources[p]].mean(0) for p in self.pieces])

    def described(self) -> dict[str, NewPiece]:
        return {p: {"id": self.new.piece_id(p), "from": [self.old.id_to_piece(i) for i in self.sources[p]]}
                for p in self.pieces}


def _side(old: Tokenizer, tags: Sequence[str], languages: Sequence[NewLanguage], pieces: Sequence[str]) -> _Side:
    """The side whose tokenizer is `old` and whose language tags are `tags` (the new config's, old and new
    languages': none where this side carries no language tags)."""
    known = [t for t in tags if old.piece_id(t) is not None]
    sources: dict[str, list[int]] = {}
    for lang in languages:
        tag = language_tag(lang.code)
        if tag not in tags:
            continue  # this side carries no language tags
        if lang.like is not None:
            sources[tag] = [_id(old, language_tag(lang.like))]
        else:
            sources[tag] = [_id(old, t) for t in known]
    for piece in pieces:
        ids = [i for row in old.encode([piece.replace("▁", " ").strip()]) for i in row]
        if not ids:
            raise VocabularyError(f"--new-piece {piece!r}: the tokenizer writes its text with no pieces")
        sources[piece] = ids
    added = list(sources)
    return _Side(old, with_pieces(old, added) if added else old, added, sources)


def _id(tok: Tokenizer, piece: str) -> int:
    found = tok.piece_id(piece)
    if found is None:
        raise VocabularyError(f"the tokenizer has no piece {piece}")
    return found


def _check(cfg: Config, tokenizers: TokenizerPair, languages: Sequence[NewLanguage], pieces: Sequence[str],
           base: Path) -> None:
    known = model_languages(cfg)
    if languages and not cfg.data.languages:
        what = "is not multilingual" if not known else "names its languages in data.corpora"
        raise VocabularyError(f"{base} {what}: new language codes go to a model whose config lists them in "
                              f"data.languages (an imported M2M100, NLLB-200, mBART-50 or multilingual opus-mt model)")
    codes = [lang.code for lang in languages]
    for lang in languages:
        if lang.code in known or lang.code in codes[:codes.index(lang.code)]:
            raise VocabularyError(f"--new-lang {lang.code}: the model already knows {lang.code}" if lang.code in known
                                  else f"--new-lang {lang.code} is given twice")
        if lang.like is not None and lang.like not in known:
            raise VocabularyError(f"--new-lang {lang.code}={lang.like}: {lang.like} is not one of the model's "
                                  f"languages ({', '.join(known)})")
    for i, piece in enumerate(pieces):
        if not piece or any(ch.isspace() for ch in piece):
            raise VocabularyError(f"--new-piece {piece!r}: a piece has no spaces (write a word-start as ▁, "
                                  f"e.g. ▁umuntu)")
        if piece in pieces[:i]:
            raise VocabularyError(f"--new-piece {piece!r} is given twice")
        for tok in {id(t): t for t in (tokenizers.src, tokenizers.tgt)}.values():
            if tok.piece_id(piece) is not None:
                raise VocabularyError(f"--new-piece {piece!r} is already a piece of the model's tokenizer "
                                      f"(id {tok.piece_id(piece)})")


def extend_model_dir(base_dir: str | Path, out_dir: str | Path, languages: Sequence[NewLanguage] = (),
                     pieces: Sequence[str] = ()) -> AddedVocabulary:
    """Write `out_dir`: `base_dir` with the new language codes and pieces (see the module docstring);
    returns what metadata.json records of them. Written as a temporary directory beside `out_dir` and
    renamed into place: nothing is left on failure; an `out_dir` that exists is refused."""
    base, out = ModelDir(base_dir), Path(out_dir)
    if out.exists():
        raise VocabularyError(f"{out} exists; add-vocab writes a new model directory")
    if not languages and not pieces:
        raise VocabularyError("nothing to add: give --new-lang or --new-piece")
    loaded = base.load("cpu")
    cfg, toks = loaded.config, loaded.tokenizers
    _check(cfg, toks, languages, list(pieces), base.path)
    data = dataclasses.replace(cfg.data, languages=[*cfg.data.languages, *(lang.code for lang in languages)])
    src_tags = [t for t in reserved_pieces(data) if tag_language(t) is not None]
    tgt_tags = target_reserved_pieces(data)
    if toks.joint:  # one tokenizer for both sides: the tags of either
        src = tgt = _side(toks.src, [*src_tags, *(t for t in tgt_tags if t not in src_tags)], languages, pieces)
    else:
        src = _side(toks.src, src_tags, languages, pieces)
        tgt = _side(toks.tgt, tgt_tags, languages, pieces)
    model_cfg = dataclasses.replace(cfg.model, src_vocab_size=src.new.vocab_size, tgt_vocab_size=tgt.new.vocab_size)
    new_cfg = dataclasses.replace(cfg, data=data, model=model_cfg)

    model = Seq2SeqTransformer(model_cfg)
    old_state = loaded.model.state_dict()
    state = {}
    for key, like in model.state_dict().items():
        old = old_state[key]
        if old.shape != like.shape:  # a vocabulary-indexed weight: the old rows, then the new ones
            side = src if key.startswith("encoder.") else tgt
            old = torch.cat([old, side.rows(old).to(old.dtype)])
            assert old.shape == like.shape, (key, old.shape, like.shape)
        state[key] = old
    model.load_state_dict(state)

    record: AddedVocabulary = {"base": str(base.path), "languages": {lang.code: lang.like for lang in languages},
              "pieces": list(pieces), "source": src.described(), "target": tgt.described()}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        replaced = {base.weights_path, base.best_weights_path, base.config_path}
        for path in base.path.iterdir():  # the static files; checkpoints and train state do not belong to it
            if (path.is_file() and path not in replaced and path.name not in toks.files
                    and path.name not in (ModelDir.LOG, ModelDir.CURVES)):
                shutil.copy2(path, tmp / path.name)
        extended = ModelDir(tmp)
        extended.write_config(new_cfg)
        TokenizerPair(src.new, tgt.new, joint=toks.joint).save(tmp)
        extended.save_weights(model.state_dict())
        extended.update_metadata({METADATA_KEY: record})
        extended.load("cpu")  # config, tokenizers and weights fit one another
        os.chmod(tmp, shared_mode(directory=True))
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    log.info("%s: %s + %d language codes, %d pieces", out, base.path, len(languages), len(pieces))
    return record


__all__ = ["NewLanguage", "VocabularyError", "extend_model_dir", "with_pieces"]
