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

A sentence written without its final stop runs into the next one ("A man rides a horse A dog runs."),
which no punctuation-based splitter sees; where the source language has a list of words that only
start a sentence when written with a capital (`RUN_ON_STARTERS`: articles, numerals, pronouns), a
line is also split before such a word that follows a word ending in a lowercase letter, unless most of
the sentence's words are capitalised (a title; not in German, which capitalises its nouns). Run on Multi30K train, it splits 8 of 29,000 single
sentences (titles such as "reading The Da Vinci Code"), where 4.7% of the sentences lack their stop
(docs/documents.md, "Paragraphs").

The splitter only says where sentences end; the text itself is cut from the line, so nothing in it
is changed: a boundary falls after a sentence's last non-space character, and the whitespace up to
the next sentence is the sentence's `space`. A line that starts with whitespace gets a first
`Sentence` with empty text holding it.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from pysbd import Segmenter

log = logging.getLogger(__name__)

DEFAULT_LANGUAGE = "en"

# Words that start a sentence when capitalised after a lowercase word, by source language (a language
# without a list gets no run-on splits). Not the German formal "Sie" nor French articles before names
# of places ("La Rochelle"): words written capitalised inside a sentence are left out.
RUN_ON_STARTERS = {
    "en": frozenset("A An The Two Three Four Five Six Several Many Some One This These Those There He She They We".split()),
    "de": frozenset("Ein Eine Einige Zwei Drei Vier Fünf Sechs Mehrere Viele Er Wir Dort Hier".split()),
    "fr": frozenset("Un Une Deux Trois Quatre Cinq Six Plusieurs Quelques Il Ils Elle Elles Nous".split()),
}
NOUNS_CAPITALISED = frozenset({"de"})  # a sentence mostly capitalised is no title in these languages
_WORD = re.compile(r"\S+")


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
    language = splitter_language(lang)
    for size in _sentence_sizes(line, language):
        end = _after_visible(line, pos, size)
        starts += _run_on_starts(line, pos, end, RUN_ON_STARTERS.get(language, frozenset()),
                                 language not in NOUNS_CAPITALISED)
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


def _run_on_starts(line: str, start: int, end: int, starters: frozenset[str], titles: bool) -> list[int]:
    """Where sentences that run on without a stop start in line[start:end] (see the module docstring);
    titles: a sentence whose words are mostly capitalised is a title, not split."""
    words = list(_WORD.finditer(line, start, end))
    if not starters or titles and 2 * sum(w.group()[0].isupper() for w in words) > len(words):
        return []
    return [w.start() for prev, w in zip(words, words[1:]) if prev.group()[-1].islower() and w.group() in starters]


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
