"""Turning a call's sources into model inputs: text tokenized, image and audio files loaded by their
modality's processor. `source_reader` (and `is_text`) is the one place that asks what kind of
source a model reads; the generation loop (`Translator.translate_nbest`) only sees a reader.

A reader has: `prepare(sources, first_line, warn, skip_bad) -> {index: example}` (an empty text, or
a file skipped with skip_bad, has no example), `length(example)` (encoder positions, for batching),
`collate(examples)` (what `model.encode` takes) and `describe(source, example)` (the fields of a
`Translation` that tell about its source).
"""

from __future__ import annotations

from typing import Any, Callable

from seq2seq.data.batching import pad_sequences
from seq2seq.model.encoders.base import SourceError, get_modality
from seq2seq.storage.model_dir import LoadedModel
from seq2seq.text.tokenizer import EOS_ID, PAD_ID


COMMANDS = {"text": "`seq2seq translate` (Translator)", "image": "`seq2seq caption` (Captioner)",
            "audio": "`seq2seq transcribe` (Transcriber)"}  # what decodes each kind of source


def is_text(encoder_type: str) -> bool:
    """Does a model with this encoder type read text (tokenized here) rather than files?"""
    return get_modality(encoder_type).tokenizes_source


class TextSources:
    """Texts: stripped, tokenized in one call, truncated to the model's positions (with a warning that
    names the line), EOS appended; an empty text gets no example (and so an empty n-best list)."""

    text = True

    def __init__(self, loaded: LoadedModel) -> None:
        self.tokenizer = loaded.tokenizers.src
        self.limit = loaded.config.model.max_positions - 1  # the encoder sees ids + EOS

    def prepare(self, sources: list[str], first_line: int, warn: Callable[[str], None],
                skip_bad: bool = False) -> dict[int, list[int]]:
        texts = [t.strip() for t in sources]
        todo = [i for i, t in enumerate(texts) if t]
        ids = dict(zip(todo, self.tokenizer.encode([texts[i] for i in todo])))
        for i in todo:
            if len(ids[i]) > self.limit:
                warn(f"line {first_line + i}: {len(ids[i])} source tokens, truncated to the model's limit of {self.limit}")
                ids[i] = ids[i][: self.limit]
        return ids

    @staticmethod
    def length(ids: list[int]) -> int:
        return len(ids) + 1

    @staticmethod
    def collate(examples: list[list[int]]) -> Any:
        return pad_sequences([ids + [EOS_ID] for ids in examples], PAD_ID)

    def describe(self, source: str, ids: list[int]) -> dict[str, Any]:
        return {"src_pieces": self.tokenizer.pieces(source.strip())[: len(ids)] + ["</s>"]}


class FileSources:
    """Files read by the modality's `SourceProcessor`, with the settings saved in the model directory.
    A file that cannot be read raises `SourceError` naming it, or with skip_bad gets no example and a
    warning "...; its output is empty"."""

    text = False

    def __init__(self, loaded: LoadedModel) -> None:
        encoder_cfg = loaded.config.model.encoder
        self.processor = get_modality(encoder_cfg.type).processor(encoder_cfg)
        self.length, self.collate = self.processor.length, self.processor.collate

    def prepare(self, sources: list[str], first_line: int, warn: Callable[[str], None],
                skip_bad: bool = False) -> dict[int, Any]:
        examples: dict[int, Any] = {}
        for i, path in enumerate(sources):
            try:
                examples[i] = self.processor.load(str(path))
            except SourceError as e:
                if not skip_bad:
                    raise
                warn(f"{e}; its output is empty")
        return examples

    @staticmethod
    def describe(source: str, example: Any) -> dict[str, Any]:
        return {"source": str(source)}


def source_reader(loaded: LoadedModel) -> TextSources | FileSources:
    """The reader for a model's sources."""
    return TextSources(loaded) if is_text(loaded.config.model.encoder.type) else FileSources(loaded)
