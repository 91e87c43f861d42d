"""SentencePiece subword tokenizers with fixed special ids.

Every model this toolkit trains or loads uses the same special ids, so that padding, masking
and decoding never need to ask the tokenizer:

    PAD_ID = 0, UNK_ID = 1, BOS_ID = 2, EOS_ID = 3

`Tokenizer` wraps one SentencePiece model (kept as its serialized bytes, so it can be saved
after loading). `TokenizerPair` holds the source and target tokenizers: one shared (joint)
model, written as `spm.model`, or two separate ones, `spm.src.model` and `spm.tgt.model`.

Training runs in memory from lists of sentences with a fixed random seed and a fixed number of
threads: SentencePiece's result depends on the thread count, so fixing it makes the same
corpus give the same model on any machine.
"""

from __future__ import annotations

import io
import itertools
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TypedDict, Union
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm

from seq2seq.config.diagnostics import Seq2SeqError
from seq2seq.config.data_section import CORPUS_TAG
from seq2seq.config.tokenizer_section import N_SPECIAL_IDS, TokenizerConfig

logger = logging.getLogger(__name__)

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
EOS_ID = 3
SPECIAL_IDS = {"pad_id": PAD_ID, "unk_id": UNK_ID, "bos_id": BOS_ID, "eos_id": EOS_ID}
assert len(SPECIAL_IDS) == N_SPECIAL_IDS  # the config layer checks vocabulary sizes against it

JOINT_MODEL = "spm.model"
SRC_MODEL = "spm.src.model"
TGT_MODEL = "spm.tgt.model"

TRAIN_SEED = 1234
TRAIN_THREADS = 4  # fixed, not os.cpu_count(): the trained model depends on the thread count


class TokenizerError(Seq2SeqError, ValueError):
    """A tokenizer model that cannot be used: not SentencePiece, or different special ids."""


class Tokenizer:
    """One SentencePiece model. Ids never include BOS/EOS unless the caller adds them."""

    def __init__(self, model_proto: bytes, name: str = "<in memory>") -> None:
        """Load a model from its serialized bytes; `name` (a path) is used in error messages."""
        self.name = name
        self._proto = bytes(model_proto)
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(self._proto)
        except (RuntimeError, OSError, TypeError) as e:
            raise TokenizerError(f"{name} is not a SentencePiece model: {e}") from None
        if self._sp.get_piece_size() <= len(SPECIAL_IDS):
            raise TokenizerError(f"{name} is not a usable SentencePiece model (vocabulary of {self._sp.get_piece_size()})")
        actual = {"pad_id": self._sp.pad_id(), "unk_id": self._sp.unk_id(),
                  "bos_id": self._sp.bos_id(), "eos_id": self._sp.eos_id()}
        if actual != SPECIAL_IDS:
            raise TokenizerError(
                f"{name} has special ids {actual}, but this toolkit needs {SPECIAL_IDS}; "
                "train it with --pad_id=0 --unk_id=1 --bos_id=2 --eos_id=3"
            )

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        path = Path(path)
        if not path.is_file():
            raise TokenizerError(f"tokenizer model not found: {path}")
        return cls(path.read_bytes(), name=str(path))

    def save(self, path: str | Path) -> None:
        """Write the model bytes (exactly what was loaded or trained)."""
        Path(path).write_bytes(self._proto)

    @property
    def model_proto(self) -> bytes:
        return self._proto

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    pad_id = PAD_ID
    unk_id = UNK_ID
    bos_id = BOS_ID
    eos_id = EOS_ID

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Texts -> subword ids, one list per text, without BOS/EOS."""
        return self._sp.encode(list(texts), out_type=int)

    def sample(self, text: str, alpha: float, nbest: int = -1) -> list[int]:
        """One text -> the ids of one sampled segmentation (subword regularization; unigram: from
        the `nbest` best, -1 all, with probabilities ^ alpha; bpe: merges dropped with probability
        alpha). SentencePiece's global generator draws: see `seq2seq.data.sampling` for seeding."""
        return self._sp.encode(text, out_type=int, enable_sampling=True, alpha=alpha, nbest_size=nbest)

    def decode(self, ids: list[list[int]]) -> list[str]:
        """Id lists -> texts. Pad, BOS and EOS ids are skipped wherever they are."""
        skip = {PAD_ID, BOS_ID, EOS_ID}
        return self._sp.decode([[int(i) for i in seq if int(i) not in skip] for seq in ids])

    def pieces(self, text: str) -> list[str]:
        """One text -> its subword pieces (for inspection)."""
        return self._sp.encode(text, out_type=str)

    def id_to_piece(self, token_id: int) -> str:
        return self._sp.id_to_piece(token_id)

    def piece_id(self, piece: str) -> int | None:
        """The id of `piece` when it is one piece of the vocabulary (e.g. a reserved tag "<2de>"), else None."""
        token_id = self._sp.piece_to_id(piece)
        return token_id if token_id != UNK_ID and self._sp.id_to_piece(token_id) == piece else None

    def user_defined_pieces(self) -> list[str]:
        """The reserved tags the model was trained with (`user_symbols` of `train_tokenizer`, e.g. "<2de>",
        "<BT>"): SentencePiece numbers them right after the special ids, with score 0."""
        pieces = []
        for token_id in range(len(SPECIAL_IDS), self.vocab_size):
            piece = self._sp.id_to_piece(token_id)
            if not CORPUS_TAG.fullmatch(piece) or self._sp.get_score(token_id) != 0.0:
                break
            pieces.append(piece)
        return pieces

    def __repr__(self) -> str:
        return f"Tokenizer({self.name!r}, vocab_size={self.vocab_size})"


Texts = Union[Sequence[str], Callable[[], Iterable[str]]]  # sentences, or a function streaming them anew


class _TrainerOptions(TypedDict, total=False):
    """The options of `SentencePieceTrainer.train` that `train_tokenizer` sets (besides the input, the
    output and the vocabulary size)."""

    model_type: str
    character_coverage: float
    input_sentence_size: int
    add_dummy_prefix: bool
    shuffle_input_sentence: bool
    num_threads: int
    hard_vocab_limit: bool
    minloglevel: int
    pad_id: int
    unk_id: int
    bos_id: int
    eos_id: int
    user_defined_symbols: list[str]


def train_tokenizer(
    texts: Texts,
    vocab_size: int,
    cfg: TokenizerConfig,
    num_threads: int = TRAIN_THREADS,
    seed: int = TRAIN_SEED,
    user_symbols: Sequence[str] = (),
) -> Tokenizer:
    """Train one SentencePiece model in memory on `texts` (a list, or a function returning a fresh
    iterator over them: a corpus of any size is streamed, SentencePiece sampling at most
    cfg.input_sentence_size sentences of it).

    user_symbols: reserved pieces (language and corpus tags, `seq2seq.text.languages`), each kept as
    one piece with its own id, right after the special ids; they count towards `vocab_size`.

    If the corpus is too small for `vocab_size`, the model has as many pieces as it holds, from the one
    training (`vocab_size` is a soft limit: SentencePiece's hard one would fail only after a whole
    training, and a retry at the size it reports trains again to the same pieces), with a warning. If
    `vocab_size` is smaller than the corpus's characters (those `character_coverage` keeps) and the
    special pieces, retrains with just enough (SentencePiece refuses that before training) and logs a
    warning.
    """
    stream = texts if callable(texts) else lambda: texts
    if not any(t.strip() for t in stream()):
        raise TokenizerError("cannot train a tokenizer: the training text is empty")
    options = _TrainerOptions(
        model_type=cfg.model_type,
        character_coverage=cfg.character_coverage,
        input_sentence_size=cfg.input_sentence_size,
        add_dummy_prefix=cfg.add_dummy_prefix,
        shuffle_input_sentence=True,
        num_threads=num_threads,
        hard_vocab_limit=False,
        minloglevel=2,
        pad_id=SPECIAL_IDS["pad_id"], unk_id=SPECIAL_IDS["unk_id"], bos_id=SPECIAL_IDS["bos_id"],
        eos_id=SPECIAL_IDS["eos_id"],
    )
    if user_symbols:
        options["user_defined_symbols"] = list(user_symbols)

    def run(size: int) -> bytes:
        spm.set_random_generator_seed(seed)
        writer = io.BytesIO()
        try:
            spm.SentencePieceTrainer.train(sentence_iterator=iter(stream()), model_writer=writer, vocab_size=size,
                                           **options)
        except RuntimeError as e:
            raise TokenizerError(f"SentencePiece training failed: {e}") from None
        return writer.getvalue()

    try:
        proto = run(vocab_size)
    except TokenizerError as e:
        too_small = re.search(r"smaller than required_chars\. \d+ vs (\d+)", str(e))
        if not too_small:
            raise
        larger = int(too_small.group(1))  # every character kept (character_coverage) needs a piece of its own
        logger.warning("vocab_size %d is too small for the %d characters of this corpus and the %d special "
                       "pieces; training with %d instead", vocab_size, larger - len(SPECIAL_IDS),
                       len(SPECIAL_IDS), larger)
        proto = run(larger)
    tokenizer = Tokenizer(proto, name=f"<trained {cfg.model_type} {vocab_size}>")
    if tokenizer.vocab_size < vocab_size:
        logger.warning("vocab_size %d is too large for this corpus: it holds %d pieces, trained with those",
                       vocab_size, tokenizer.vocab_size)
    return tokenizer


def unwritable(tokenizer: Tokenizer, text: str, ids: list[int]) -> str | None:
    """None when `ids` (`text` encoded by `tokenizer`) hold no <unk>; else the characters of `text` that
    the vocabulary cannot write (or `text` itself when none is alone), for a message."""
    if tokenizer.unk_id not in ids:
        return None
    unknown = [ch for ch in dict.fromkeys(text) if not ch.isspace() and tokenizer.unk_id in tokenizer.encode([ch])[0]]
    return "".join(unknown) or text


@dataclass
class TokenizerPair:
    """Source and target tokenizers; with `joint` they are one and the same model."""

    src: Tokenizer
    tgt: Tokenizer
    joint: bool = True

    @classmethod
    def train(
        cls, cfg: TokenizerConfig, src_texts: Texts, tgt_texts: Texts, out_dir: str | Path,
        reserved: Sequence[str] = (),
        tgt_reserved: Sequence[str] = (),
    ) -> TokenizerPair:
        """Train (or, when cfg.src_model/tgt_model are set, load) and save into `out_dir`.

        reserved / tgt_reserved: pieces the source / target tokenizer keeps whole (language and corpus
        tags on the source; language tags on the decoder); a joint tokenizer keeps both. Loaded models
        are taken as they are: the caller checks them."""
        if cfg.src_model is not None:
            src = Tokenizer.load(cfg.src_model)
            tgt = src if cfg.joint else Tokenizer.load(cfg.tgt_model or cfg.src_model)
            logger.info("loaded tokenizer model(s) %s", cfg.src_model if cfg.joint else (cfg.src_model, cfg.tgt_model))
        elif cfg.joint:
            def both() -> Iterable[str]:
                return itertools.chain(src_texts() if callable(src_texts) else src_texts,
                                       tgt_texts() if callable(tgt_texts) else tgt_texts)
            symbols = [*reserved, *(p for p in tgt_reserved if p not in reserved)]
            src = tgt = train_tokenizer(both, cfg.vocab_size, cfg, user_symbols=symbols)
        else:
            src = train_tokenizer(src_texts, cfg.src_vocab_size or cfg.vocab_size, cfg, user_symbols=reserved)
            tgt = train_tokenizer(tgt_texts, cfg.tgt_vocab_size or cfg.vocab_size, cfg, user_symbols=tgt_reserved)
        pair = cls(src, tgt, joint=cfg.joint)
        pair.save(out_dir)
        return pair

    @classmethod
    def load(cls, directory: str | Path) -> TokenizerPair:
        """Load `spm.model` (joint) or `spm.src.model` + `spm.tgt.model` from `directory`."""
        directory = Path(directory)
        if (directory / JOINT_MODEL).is_file():
            tok = Tokenizer.load(directory / JOINT_MODEL)
            return cls(tok, tok, joint=True)
        if (directory / SRC_MODEL).is_file() and (directory / TGT_MODEL).is_file():
            return cls(Tokenizer.load(directory / SRC_MODEL), Tokenizer.load(directory / TGT_MODEL), joint=False)
        raise TokenizerError(f"no tokenizer in {directory}: expected {JOINT_MODEL} or {SRC_MODEL} + {TGT_MODEL}")

    def save(self, directory: str | Path) -> None:
        """Write the model file(s); removes model files of the other layout so `load` is unambiguous."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if self.joint:
            self.src.save(directory / JOINT_MODEL)
            stale = [SRC_MODEL, TGT_MODEL]
        else:
            self.src.save(directory / SRC_MODEL)
            self.tgt.save(directory / TGT_MODEL)
            stale = [JOINT_MODEL]
        for name in stale:
            (directory / name).unlink(missing_ok=True)

    @property
    def files(self) -> list[str]:
        return [JOINT_MODEL] if self.joint else [SRC_MODEL, TGT_MODEL]
