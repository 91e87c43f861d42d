"""What every document format is made of: its `Segment`s (a run of text and where it lies in the source),
the `DocumentFormat` a format module declares, and `DocumentError` (a document that cannot be read)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from seq2seq.config.diagnostics import Seq2SeqError


class DocumentError(Seq2SeqError, ValueError):
    """A document that cannot be read in its format (its message names the document, line and column)."""

    code = "bad_document"


@dataclass(frozen=True)
class Segment:
    """One run of text of a document: source offsets [start, end) of what is replaced, `text` the one
    line the engine translates (the run with its line breaks as spaces), and `quote`: for an
    attribute value, the quote character its translation is written between (escaped inside it)."""

    start: int
    end: int
    text: str
    quote: str | None = None

    def written(self, translation: str) -> str:
        """The translation as it goes into the document in place of the segment."""
        if self.quote is None:
            return translation
        escape = "&quot;" if self.quote == '"' else "&#39;"
        return translation.replace(self.quote, escape)


@dataclass(frozen=True)
class DocumentFormat:
    """One document format: its name, the file name endings it is chosen by, its `stages` (names passed
    to `segments`, run in turn), `segments(document, name, stage)` (raises `DocumentError` where the
    document does not parse) and `tree(document)`: a value equal for two documents of the same
    structure (elements, attributes that are not translated, code and comments), whatever their text."""

    name: str
    extensions: tuple[str, ...]
    segments: Callable[[str, str, str], list[Segment]]
    tree: Callable[[str], object]
    stages: tuple[str, ...] = ("text",)


def line_starts(text: str) -> list[int]:
    """The offset each line of `text` starts at (what the formats turn (line, column) positions into offsets by)."""
    starts = [0]
    for k, ch in enumerate(text):
        if ch == "\n":
            starts.append(k + 1)
    return starts
