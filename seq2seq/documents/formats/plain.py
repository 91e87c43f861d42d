"""Plain text as a document: each line that holds more than whitespace is a segment (what `seq2seq
translate` does line by line, for a text given whole: the server's `"format": "text"`)."""

from __future__ import annotations

import re

from seq2seq.documents.formats.document import DocumentFormat, Segment

_LINE = re.compile(r"[^\n]*")


def text_segments(text: str, name: str, stage: str) -> list[Segment]:
    """Each line's text without its leading and trailing whitespace (a "\\r" before the line break stays)."""
    segments = []
    for m in _LINE.finditer(text):
        line = m.group(0)
        core = line.strip()
        if core:
            start = m.start() + len(line) - len(line.lstrip())
            segments.append(Segment(start, start + len(core), core))
    return segments


def text_tree(text: str) -> int:
    """A text's structure: its number of lines."""
    return text.count("\n")


FORMAT = DocumentFormat("text", (".txt",), text_segments, text_tree)
