"""Glossaries (termbases): where a source term occurs in an input, its target term must be in the output.

A glossary file is UTF-8 TSV, one entry per line: `source term<TAB>target term`. A first line
`source<TAB>target` (any case) is a header and skipped; blank lines and lines starting with `#` are
skipped. Every other line must hold exactly two non-empty fields, or loading fails naming the line.

Matching: a source term occurs where it stands in the input as whole words (not inside a longer
word), compared case-insensitively ("Account" at the start of a sentence matches "account"); where
terms overlap, the longest wins ("user account" over "account"). The target term is used exactly as
written (its case included) as a constraint of that input (`seq2seq.inference.constraints`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from seq2seq.inference.controls import SteeringError
from seq2seq.text.lines import decoded_lines, open_binary

HEADER = ("source", "target")


@dataclass
class Glossary:
    """entries: (source term, target term) pairs, in file order."""

    entries: list[tuple[str, str]]
    name: str = "<glossary>"

    def __post_init__(self) -> None:
        by_length = sorted(range(len(self.entries)), key=lambda i: -len(self.entries[i][0]))
        self._patterns = [(re.compile(rf"(?<!\w){re.escape(self.entries[i][0])}(?!\w)", re.IGNORECASE),
                           self.entries[i][1]) for i in by_length]

    @classmethod
    def load(cls, path: str | Path) -> Glossary:
        """Read a glossary file; SteeringError naming the file and line for a malformed row."""
        path = str(path)
        if not Path(path).is_file():
            raise SteeringError(f"glossary {path} not found")
        entries = []
        with open_binary(path, "rb") as f:
            for number, line in enumerate(decoded_lines(f, path), 1):
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                fields = [x.strip() for x in line.rstrip("\r").split("\t")]
                if number == 1 and tuple(x.lower() for x in fields) == HEADER:
                    continue
                if len(fields) != 2 or not all(fields):
                    raise SteeringError(f"glossary {path} line {number}: expected 'source term<TAB>target term', "
                                        f"got {line!r}")
                entries.append((fields[0], fields[1]))
        if not entries:
            raise SteeringError(f"glossary {path} has no entries")
        return cls(entries, path)

    def constraints_for(self, text: str) -> list[str]:
        """The target terms whose source terms occur in `text` (see the module docstring), in the order
        they occur there, each once."""
        taken: list[tuple[int, int]] = []
        found: list[tuple[int, str]] = []
        for pattern, target in self._patterns:  # longest source terms first
            for m in pattern.finditer(text):
                if all(m.end() <= a or m.start() >= b for a, b in taken):
                    taken.append(m.span())
                    found.append((m.start(), target))
        return list(dict.fromkeys(t for _, t in sorted(found)))
