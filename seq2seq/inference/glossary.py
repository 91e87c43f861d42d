"""Glossaries (termbases): where a source term occurs in an input, its target term must be in the output.

A glossary file is UTF-8 TSV, one entry per line: `source term<TAB>target term`. A first line
`source<TAB>target` (any case) is a header and skipped; blank lines and lines starting with `#` are
skipped. Every other line must hold exactly two non-empty fields, or loading fails naming the line.
A source term given twice (equal as matching compares them, see below) with different target terms
fails naming both lines; given twice with the same target term, it is kept once.

Matching: a source term occurs where it stands in the input as whole words (not inside a longer
word), compared case-insensitively ("Account" at the start of a sentence matches "account"); where
terms overlap, the longest wins ("user account" over "account"). The target term is used exactly as
written (its case included) as a constraint of that input (`seq2seq.inference.controls.ConstraintTracker`).

Precisely, this is what one regular expression per term, `(?<!\\w)TERM(?!\\w)` with `re.IGNORECASE`,
finds (Python's Unicode `\\w`), taking the terms longest first (equal lengths in file order), each
term's matches left to right, and keeping a match unless it overlaps one already kept. It is computed
without those expressions, in time that does not grow with the size of the glossary: the text and the
terms are folded character by character as `re.IGNORECASE` compares characters (`fold`), and the
folded text is looked up in a table of folded terms from each position after a non-word character
(or the start) to each position before one (or the end), a term's prefixes telling where to stop.
"""

from __future__ import annotations

import re
import sys
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from seq2seq.config.diagnostics import Diagnostic
from seq2seq.inference.controls import SteeringError
from seq2seq.text.lines import decoded_lines, open_binary
from seq2seq.text.tokenizer import unwritable

if TYPE_CHECKING:  # pragma: no cover
    from seq2seq.text.tokenizer import Tokenizer

HEADER = ("source", "target")
NON_WORD = re.compile(r"\W")  # the characters `(?<!\w)` and `(?!\w)` accept beside a match


@lru_cache(maxsize=1)
def _folding() -> tuple[dict[int, int], re.Pattern]:
    """(translate table, cut pattern). The table maps each lower-case letter that `re.IGNORECASE` takes
    as equal to others ("ı" and "i", "ſ" and "s", "ς" and "σ", ...) to one of them; the cut pattern finds
    the folded characters that may stand for a non-word character of the text."""
    if sys.version_info >= (3, 11):  # the table re compiles with
        from re._casefix import _EXTRA_CASES  # type: ignore[import-not-found] # a private module: no stub
        extra: dict[int, tuple[int, ...]] = _EXTRA_CASES
    else:  # pragma: no cover - Python 3.10
        from sre_compile import _ignorecase_fixes as extra
    table: dict[int, int] = {}
    odd = []  # representatives of a class that holds a non-word character
    for lower, others in extra.items():
        members = (lower, *others)
        table[lower] = min(members)
        if any(NON_WORD.match(chr(c)) for c in members) and not NON_WORD.match(chr(min(members))):
            odd.append(chr(min(members)))
    cut = re.compile(r"\W|[" + re.escape("".join(sorted(set(odd)))) + "]" if odd else r"\W")
    return table, cut


def fold(text: str) -> str:
    """`text` with each character replaced by the representative of the characters `re.IGNORECASE`
    takes as equal to it (its simple lower case, then one of re's extra equivalences), one character
    for one, so positions in the folded text are positions in `text`."""
    table, _ = _folding()
    # str.lower is the simple lower case for every single character except "İ" (lower-cased to "i" plus a
    # combining dot; simple: "i"); its one context rule (a final "Σ" is "ς") stays within re's equivalences.
    dotless = text.replace("\u0130", "i")
    folded = dotless.lower().translate(table)
    if len(folded) != len(text):  # pragma: no cover - a Unicode version with another multi-character lower case
        folded = "".join(c if len(c.lower()) != 1 else c.lower() for c in dotless).translate(table)
    return folded


@dataclass
class Glossary:
    """entries: (source term, target term) pairs, in file order (a repeated entry kept once). name:
    how messages call it (its file). lines: each entry's line in the file, for messages (None: entries
    are named by their position)."""

    entries: list[tuple[str, str]]
    name: str = "<glossary>"
    lines: list[int] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        given = self.lines if self.lines is not None else list(range(1, len(self.entries) + 1))
        self._what = "line" if self.lines is not None else "entry"
        kept: dict[str, int] = {}  # folded source term -> index in `entries`
        entries: list[tuple[str, str]] = []
        numbers: list[int] = []
        for (source, target), number in zip(self.entries, given, strict=True):
            if not source:
                raise SteeringError(f"glossary {self.name} {self._what} {number}: an empty source term")
            key = fold(source)
            if key in kept:
                first, plural = kept[key], "lines" if self.lines is not None else "entries"
                if entries[first][1] != target:
                    raise SteeringError(
                        f"glossary {self.name} {plural} {numbers[first]} and {number}: the source term "
                        f"{source!r} is given twice, with target terms {entries[first][1]!r} and {target!r}; "
                        "keep one")
                continue
            kept[key] = len(entries)
            entries.append((source, target))
            numbers.append(number)
        self.entries, self._numbers = entries, numbers
        if self.lines is not None:
            self.lines = numbers
        self._index(kept)
        self._checked: list[Tokenizer] = []  # the tokenizers `check_writable` passed

    def _index(self, kept: dict[str, int]) -> None:
        """The lookup tables of `constraints_for`: terms {folded source term: entry}; prefixes, each
        folded term's beginnings that end before a character that may be a non-word one in the text
        (where a longer term must be looked for); longest, the longest term's length."""
        _, cut = _folding()
        self._terms = kept
        self._prefixes = {key[:m.start()] for key in kept for m in cut.finditer(key, 1)}
        self._longest = max(map(len, kept), default=0)

    @classmethod
    def load(cls, path: str | Path) -> Glossary:
        """Read a glossary file; SteeringError naming the file and line for a malformed row, or both
        lines of a source term given twice with different target terms."""
        path = str(path)
        if not Path(path).exists() or Path(path).is_dir():  # (a pipe, /dev/fd/N, is read as a file)
            raise SteeringError(f"glossary {path} not found")
        entries, lines = [], []

        def refuse(d: Diagnostic) -> None:  # a replaced byte would become a term the beam forces: refused instead
            raise SteeringError(f"glossary {d.message.removesuffix(' replaced with U+FFFD')}: a glossary must be "
                               "UTF-8", field="glossary", code=d.code)

        with open_binary(path, "rb") as f:
            for number, line in enumerate(decoded_lines(f, path, warn=refuse), 1):
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                fields = [x.strip() for x in line.rstrip("\r").split("\t")]
                if number == 1 and tuple(x.lower() for x in fields) == HEADER:
                    continue
                if len(fields) != 2 or not all(fields):
                    raise SteeringError(f"glossary {path} line {number}: expected 'source term<TAB>target term', "
                                        f"got {line!r}")
                entries.append((fields[0], fields[1]))
                lines.append(number)
        if not entries:
            raise SteeringError(f"glossary {path} has no entries")
        return cls(entries, path, lines)

    def occurrences(self, text: str) -> dict[int, list[int]]:
        """{entry: the positions in `text` where its source term stands as whole words}, each entry's
        positions ascending (they may overlap one another)."""
        folded, n = fold(text), len(text)
        gaps = [m.start() for m in NON_WORD.finditer(text)]
        ends = gaps + [n]  # where a match may end: before a non-word character, or at the end
        found: dict[int, list[int]] = {}
        for start in [0] + [g + 1 for g in gaps if g + 1 < n]:  # after a non-word character, or at the start
            for end in ends[bisect_right(ends, start):]:
                if end - start > self._longest:
                    break
                piece = folded[start:end]
                entry = self._terms.get(piece)
                if entry is not None:
                    found.setdefault(entry, []).append(start)
                if piece not in self._prefixes:
                    break
        return found

    def constraints_for(self, text: str) -> list[str]:
        """The target terms whose source terms occur in `text` (see the module docstring), in the order
        they occur there, each once."""
        found = self.occurrences(text)
        starts: list[int] = []  # the matches kept, disjoint, by position: starts[k] to ends[k]
        ends: list[int] = []
        kept: list[tuple[int, str]] = []
        for entry in sorted(found, key=lambda e: (-len(self.entries[e][0]), e)):  # longest source terms first
            length, target = len(self.entries[entry][0]), self.entries[entry][1]
            after = 0  # a term's own matches do not overlap: each is looked for after the one before
            for start in found[entry]:
                if start < after:
                    continue
                after = start + length
                k = bisect_left(starts, after)  # the kept matches that start before this one ends
                if k and ends[k - 1] > start:
                    continue  # overlaps a longer (or earlier) term's match
                starts.insert(k, start)
                ends.insert(k, after)
                kept.append((start, target))
        return list(dict.fromkeys(t for _, t in sorted(kept)))

    def check_writable(self, tokenizer: Tokenizer) -> None:
        """SteeringError (one line) naming the file and line of the first target term that `tokenizer`
        (a model's target tokenizer) cannot write: a character of it would become <unk>. Each target
        term is checked once per tokenizer, so a caller may call this on every use."""
        if any(t is tokenizer for t in self._checked):
            return
        targets = [t.strip() for _, t in self.entries]
        for i, ids in enumerate(tokenizer.encode(targets)):
            shown = unwritable(tokenizer, targets[i], ids)
            if shown is not None:
                raise SteeringError(f"glossary {self.name} {self._what} {self._numbers[i]}: the target term "
                                    f"{targets[i]!r} cannot be written with the model's target vocabulary ({shown!r} "
                                    "would become <unk>)")
        self._checked.append(tokenizer)
