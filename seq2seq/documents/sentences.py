"""A line as its sentences, with the exact spacing between them, and back.

    split("A man rides.  A dog runs!", "en")
      -> [Sentence("A man rides.", "  "), Sentence("A dog runs!", "")]
    join(split(line, lang)) == line          # for every line, whatever its whitespace

The sentence boundaries come from pysbd (rule-based, 23 languages with their own abbreviation and
number rules): measured against sentence-splitter (Moses' non-breaking prefixes) and a regex on
Multi30K val, 3 sentences joined a line, it split back every line whose sentences end in
punctuation in en, de and fr, and was the only one to pass every hand-made case (abbreviations,
decimals, URLs, e-mail addresses, quotes, "..."); it runs at ~4,000 sentences/s on one core, under
5% of the time a sentence's translation takes on CPU (docs/documents.md has the table, and
benchmarks/sentence_splitting.py measures it). A language pysbd has no rules for is split with the
English rules.

The splitter only says where sentences end; the text itself is cut from the line, so nothing in it
is changed: a boundary falls after a sentence's last non-space character, and the whitespace up to
the next sentence is the sentence's `space`. A line that starts with whitespace gets a first
`Sentence` with empty text holding it.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from pysbd import Segmenter

log = logging.getLogger(__name__)

DEFAULT_LANGUAGE = "en"


@dataclass(frozen=True)
class Sentence:
    """One sentence of a line: its text (no leading or trailing whitespace; "" only for the
    whitespace a line starts with) and the whitespace that follows it in the line."""

    text: str
    space: str = ""


def splitter_language(lang: str | None) -> str:
    """The rules a source language is split by: its own where pysbd has them, else English's."""
    from pysbd.languages import LANGUAGE_CODES

    code = (lang or DEFAULT_LANGUAGE).lower().replace("-", "_").split("_")[0]
    return code if code in LANGUAGE_CODES else DEFAULT_LANGUAGE


@functools.lru_cache(maxsize=None)
def _segmenter(lang: str) -> Segmenter:
    import pysbd

    return pysbd.Segmenter(language=lang, clean=False)


def split(line: str, lang: str | None = None, keep: Sequence[tuple[int, int, int]] = ()) -> list[Sentence]:
    """The sentences of `line` in order, by the rules of `lang` (`splitter_language`); [] for "".
    join(split(line)) == line, exactly.

    keep: (start, end, shift_from) ranges of the line that no boundary may fall inside (its protected
    spans and tag pairs: `seq2seq.documents.spans.unbroken`). A boundary inside one at or after its
    shift_from (a closing tag or marker written after the sentence's final stop: "**Done.** Next")
    moves to the range's end; any other inside one is dropped (the sentences it cut are one)."""
    if not line.strip():
        return [Sentence("", line)] if line else []
    lead = line[: len(line) - len(line.lstrip())]
    starts = []  # where each sentence after the first starts
    pos = len(lead)
    for size in _sentence_sizes(line, splitter_language(lang)):
        end = _after_visible(line, pos, size)
        while end < len(line) and line[end].isspace():
            end += 1
        starts.append(end)
        pos = end
    cuts = _kept(line, starts[:-1], keep) if keep else starts[:-1]
    out = [Sentence("", lead)] if lead else []
    for a, b in zip([len(lead), *cuts], [*cuts, len(line)]):
        text = line[a:b].rstrip()
        out.append(Sentence(text, line[a + len(text):b]))
    return out


def _kept(line: str, cuts: list[int], keep: Sequence[tuple[int, int, int]]) -> list[int]:
    """The boundaries `cuts` moved out of, or dropped from, the `keep` ranges (see `split`)."""
    out: list[int] = []
    for cut in cuts:
        moved = True
        while moved and cut < len(line):
            moved = False
            for start, end, shift_from in keep:
                if start < cut < end:
                    if cut < shift_from:
                        cut = len(line)  # dropped
                        break
                    cut = end
                    while cut < len(line) and line[cut].isspace():
                        cut += 1
                    moved = True
        if cut < len(line) and (not out or cut > out[-1]):
            out.append(cut)
    return out


def join(sentences: Sequence[Sentence]) -> str:
    """The line `sentences` came from: each text followed by its space."""
    return "".join(s.text + s.space for s in sentences)


def _visible(text: str) -> int:
    return sum(not c.isspace() for c in text)


def _after_visible(line: str, pos: int, count: int) -> int:
    """The index in `line` just after the `count`-th non-space character from `pos`."""
    seen = 0
    while seen < count:
        if not line[pos].isspace():
            seen += 1
        pos += 1
    return pos


def _sentence_sizes(line: str, lang: str) -> list[int]:
    """The non-space characters of each sentence pysbd finds in `line` (they sum to the line's); the
    whole line as one sentence where pysbd fails on it or gives back other characters than it read."""
    total = _visible(line)
    try:
        parts = _segmenter(lang).segment(line)
    except Exception as e:  # noqa: BLE001 - a splitter bug must not lose the line: it goes unsplit
        log.debug("pysbd failed on a line (%s: %s); the line is translated unsplit", type(e).__name__, e)
        return [total]
    if "".join("".join(p.split()) for p in parts) != "".join(line.split()):
        return [total]
    return [n for n in (_visible(p) for p in parts) if n]
