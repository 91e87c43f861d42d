"""The `tokenizer` section (`TokenizerConfig`): how the subword vocabularies are built (by
`seq2seq.text.tokenizer`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from seq2seq.config.checks import require

# The special ids of every tokenizer (pad, unk, bos, eos; `seq2seq.text.tokenizer.SPECIAL_IDS`):
# a vocabulary must be larger than this.
N_SPECIAL_IDS = 4


@dataclass(frozen=True)
class TokenizerConfig:
    """How to build the subword vocabularies (the `tokenizer` section; used by `seq2seq.text.tokenizer`).

    joint: one SentencePiece model shared by source and target (needed for shared embeddings).
    vocab_size: size of the joint model, and the default of src_vocab_size / tgt_vocab_size
        for separate models. Lowered automatically (with a warning) when the corpus is too small.
    input_sentence_size: at most this many sentences (randomly sampled, fixed seed) are used
        for training.
    add_dummy_prefix: SentencePiece's word-start mark before the first word, as before every
        other word (the default). False for targets that are one unbroken word (digit strings,
        codes): the first piece is then not a merge of the mark with whatever character begins
        the text.
    src_model / tgt_model: existing `.model` files to load instead of training; with
        joint=True only src_model is used.
    """

    joint: bool = True
    model_type: Literal["unigram", "bpe"] = "unigram"
    vocab_size: int = 8000
    src_vocab_size: int | None = None
    tgt_vocab_size: int | None = None
    character_coverage: float = 1.0
    input_sentence_size: int = 1_000_000
    add_dummy_prefix: bool = True
    src_model: str | None = None
    tgt_model: str | None = None

    def __post_init__(self) -> None:
        for name in ("vocab_size", "src_vocab_size", "tgt_vocab_size"):
            value = getattr(self, name)
            require(value is None or value > N_SPECIAL_IDS,
                    f"tokenizer.{name} must be larger than {N_SPECIAL_IDS}, got {value}")
        require(0.0 < self.character_coverage <= 1.0,
                f"tokenizer.character_coverage must be in (0, 1], got {self.character_coverage}")
        require(self.input_sentence_size > 0,
                f"tokenizer.input_sentence_size must be positive, got {self.input_sentence_size}")
        require(self.joint or (self.src_model is None) == (self.tgt_model is None),
                "tokenizer.src_model and tokenizer.tgt_model must be set together when joint is false")
