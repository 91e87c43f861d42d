"""Inference-time casing: a sentence in UPPER CASE or Title Case is translated as its case-normalised
form, and the output re-cased.

    cased = normalise("I CANNOT SEE WHERE THE GREEN ARROW IS POINTING.", "en")
      -> Cased(text="I cannot see where the green arrow is pointing.", case=Case.UPPER)
    recase(cased, "Ich kann nicht sehen, wohin der grüne Pfeil zeigt.")
      -> "ICH KANN NICHT SEHEN, WOHIN DER GRÜNE PFEIL ZEIGT."     (ß -> ẞ: "STRAẞE")

Models trained on text as it is usually written see few sentences in capitals; their subword pieces
of "POINTING" are rare ones, and the search derails (issue 71: case-insensitive BLEU 0.04 against
25.64 as written). Normalised: lowercased, its first letter capitalised (and English's "I"); a Title
Case sentence keeps its all-caps acronyms of 2-4 letters ("A Visit To The NASA Museum" -> "A visit to
the NASA museum"), an UPPER one has no way to tell them. The output of an UPPER sentence is
upper-cased; a Title Case sentence's output is left as the model writes it (a target language's
headings follow its own rules: German and French do not title-case, and the model's casing of its
nouns is right; docs/documents.md has the measurement).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

_WORD = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")  # letters, with inner apostrophes ("woman's")
_ENGLISH_I = re.compile(r"(?<![^\W\d_])i(?![^\W\d_])")  # "i", "i'm": English writes the pronoun in capitals

UPPER_SHARE = 0.8  # the share of a sentence's words (2 letters or more) in capitals that makes it UPPER CASE
TITLE_SHARE = 0.8  # the share of its words starting with a capital that makes it Title Case
MIN_WORDS = 3  # fewer words than this: a heading too short to tell ("NASA", "New York"): left as written


class Case(enum.Enum):
    """How a sentence is written."""

    AS_WRITTEN = "as written"
    UPPER = "upper"
    TITLE = "title"


@dataclass(frozen=True)
class Cased:
    """A sentence as the engine translates it (`text`), and how it was written (`case`)."""

    text: str
    case: Case


def detect(text: str) -> Case:
    """UPPER when at least 80% of its words of 2 letters or more are in capitals (at least 3 such words);
    TITLE when at least 80% of its words start with a capital (at least 3 words) and it is not UPPER;
    else AS_WRITTEN."""
    words = _WORD.findall(text)
    long = [w for w in words if len(w) >= 2]
    if len(long) >= MIN_WORDS and sum(w.isupper() for w in long) >= UPPER_SHARE * len(long):
        return Case.UPPER
    if len(words) >= MIN_WORDS and sum(w[0].isupper() for w in words) >= TITLE_SHARE * len(words):
        return Case.TITLE
    return Case.AS_WRITTEN


def _acronym(word: str) -> bool:
    return 2 <= len(word) <= 4 and word.isupper()


def normalise(text: str, lang: str | None = None) -> Cased:
    """`text` case-normalised where it is UPPER CASE or Title Case (see the module docstring), else as it
    is. lang: the source language ("en": the pronoun "i" written "I")."""
    case = detect(text)
    if case is Case.AS_WRITTEN:
        return Cased(text, case)
    if case is Case.UPPER:
        lowered = text.lower()
    else:
        lowered = _WORD.sub(lambda m: m.group(0) if _acronym(m.group(0)) else m.group(0).lower(), text)
    if (lang or "en").lower().split("_")[0].split("-")[0] == "en":
        lowered = _ENGLISH_I.sub("I", lowered)
    first = next((i for i, c in enumerate(lowered) if c.isalpha()), None)
    if first is not None:
        lowered = lowered[:first] + lowered[first].upper() + lowered[first + 1:]
    return Cased(lowered, case)


def recase(cased: Cased, output: str) -> str:
    """The output of `cased.text` as its source was written: upper-cased for an UPPER source (ß as the
    capital ẞ, German's official capital since 2017, not "SS": lower-cased again it gives the word back),
    else as the model wrote it."""
    return output.replace("ß", "ẞ").upper() if cased.case is Case.UPPER else output
