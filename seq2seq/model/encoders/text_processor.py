"""`TextProcessor`: the sources of a model that reads sentences (a modality's processor unless it
names one), tokenized, truncated and tagged into id lists; and the padding of id lists into a
batch (`pad_sequences`, `round_up`), which the training batches use too.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

import torch
from torch import Tensor

from seq2seq.config.diagnostics import Diagnostic, Warn
from seq2seq.config.encoder_section import EncoderConfig
from seq2seq.model.encoders.sources import TEXT, SourceError, SourceProcessor
from seq2seq.text.languages import language_tag
from seq2seq.text.tokenizer import EOS_ID, PAD_ID

if TYPE_CHECKING:  # pragma: no cover
    from seq2seq.text.tokenizer import Tokenizer


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int = PAD_ID, multiple: int = 1) -> Tensor:
    """Id lists -> LongTensor [len(seqs), max length rounded up to a multiple of `multiple`], right-padded
    with pad_id."""
    width = round_up(max((len(s) for s in seqs), default=0), multiple)
    out = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        if len(s):
            out[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out


def round_up(n: int, multiple: int) -> int:
    """n rounded up to a multiple of `multiple` (>= 1)."""
    return -(-n // multiple) * multiple


class TextProcessor(SourceProcessor[list[int], Tensor]):
    """Sentences: stripped, tokenized by the model's source tokenizer in one call, truncated to the
    model's positions (a warning names the line), EOS appended; an empty sentence has no example.
    Examples are id lists ending in EOS (as the training data's "src_ids"), batches [B, S] ids padded
    with pad_id. Nothing is read from files.

    Tags: `with_target_language(lang, tags)` (or `with_prefix(pieces)`) is a copy that puts reserved
    pieces before every source's ids, as training did for a multilingual or tagged corpus
    (`seq2seq.text.languages`): example = prefix_ids + the sentence's ids + [EOS]. Truncation cuts the
    sentence, never the tags. The processor itself is left as it was (no tags)."""

    kind = TEXT
    prefix_ids: tuple[int, ...] = ()
    prefix_pieces: tuple[str, ...] = ()

    def __init__(self, cfg: EncoderConfig | None = None, pad_id: int = PAD_ID) -> None:
        self.cfg = cfg
        self.pad_id = pad_id
        self.tokenizer: Tokenizer | None = None
        self.max_tokens: int | None = None

    def bind(self, tokenizer: Tokenizer | None, max_positions: int) -> None:
        self.tokenizer = tokenizer
        self.max_tokens = max_positions - 1  # the encoder sees ids + EOS

    def with_prefix(self, pieces: Sequence[str]) -> TextProcessor:
        """A copy (bound like this one) that puts `pieces`, each one piece of the source tokenizer,
        before every source; `pieces` empty: a copy without tags. ValueError naming a piece the
        tokenizer does not have as one piece."""
        if self.tokenizer is None or self.max_tokens is None:
            raise RuntimeError("TextProcessor.bind(tokenizer, max_positions) first")
        ids = []
        for piece in pieces:
            token_id = self.tokenizer.piece_id(piece)
            if token_id is None:
                reserved = self.tokenizer.user_defined_pieces()
                raise ValueError(f"the source tokenizer has no piece {piece!r} (its reserved pieces: "
                                 f"{', '.join(reserved) or 'none'})")
            ids.append(token_id)
        if len(ids) >= self.max_tokens:
            raise ValueError(f"{len(ids)} tag pieces leave no room in the model's {self.max_tokens} source positions")
        tagged = copy.copy(self)
        tagged.prefix_ids, tagged.prefix_pieces = tuple(ids), tuple(pieces)
        return tagged

    def with_target_language(self, lang: str | None, tags: Sequence[str] = ()) -> TextProcessor:
        """A copy that starts every source with `<2lang>` (lang None: no language tag), then `tags`
        (corpus tags such as "<BT>"), as training did for that target language. ValueError (a
        `LanguageError` for a malformed code) naming a tag the source tokenizer lacks, with the
        reserved pieces it has. Which languages a model translates into, and whether it needs one,
        is `seq2seq.text.languages.model_languages` / `source_prefix` of its config."""
        return self.with_prefix(([language_tag(lang)] if lang is not None else []) + list(tags))

    def load(self, path: str) -> NoReturn:
        raise SourceError(f"{path}: this model reads sentences (tokenized by its source tokenizer), not files")

    def prepare(self, sources: Sequence[str], first_line: int = 1, warn: Warn | None = None,
                skipped: dict[int, str] | None = None) -> dict[int, list[int]]:
        if self.tokenizer is None or self.max_tokens is None:
            raise RuntimeError("TextProcessor.bind(tokenizer, max_positions) first")
        texts = [t.strip() for t in sources]
        todo = [i for i, t in enumerate(texts) if t]
        examples = {}
        prefix = list(self.prefix_ids)
        room = self.max_tokens - len(prefix)
        for i, ids in zip(todo, self.tokenizer.encode([texts[i] for i in todo])):
            if len(ids) > room:
                if warn is not None:
                    warn(Diagnostic(f"{len(prefix) + len(ids)} source tokens, truncated to the model's limit of "
                                    f"{self.max_tokens}", first_line + i, "text", "source_truncated"))
                ids = ids[:room]
            examples[i] = prefix + ids + [EOS_ID]
        return examples

    def describe(self, source: str, example: list[int]) -> dict[str, object]:
        assert self.tokenizer is not None
        n_text = len(example) - 1 - len(self.prefix_ids)
        return {"src_pieces": [*self.prefix_pieces, *self.tokenizer.pieces(source.strip())[:n_text], "</s>"]}

    def length(self, example: Sequence[int]) -> int:
        return len(example)

    def collate(self, examples: Sequence[Sequence[int]]) -> Tensor:
        return pad_sequences(examples, self.pad_id)
