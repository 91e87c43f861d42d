"""Which language a translation came out in: English, German or French, told by function words.

A zero-shot direction's BLEU does not say whether a poor score is a poor French translation or an
English one (the "off-target" translation of Arivazhagan et al. 2019); a count of each language's
commonest function words does, for these three languages, which share few of them. Words the three
share in spelling ("in", "an", "des", "en") are left out.

    >>> guess_language("Un homme avec un chapeau est assis sur un banc.")
    'fr'
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

FUNCTION_WORDS: dict[str, frozenset[str]] = {
    "en": frozenset("the a and is are of on with his her their while at to from for by who its into near".split()),
    "de": frozenset("der die das ein eine einer einem einen und ist sind mit auf im am von zu vor bei "
                    "seinem seiner ihrem ihrer dem den sich neben über".split()),
    "fr": frozenset("le la les un une du et est sont avec dans sur au aux pour par sa son ses qui l d".split()),
}
UNKNOWN = "unknown"
WORD = re.compile(r"[^\W\d_]+")


def guess_language(line: str) -> str:
    """The language whose function words the line holds most of, or "unknown" (none, or a tie)."""
    words = WORD.findall(line.lower())
    hits = Counter({lang: sum(w in vocab for w in words) for lang, vocab in FUNCTION_WORDS.items()})
    (best, most), (_, second) = hits.most_common(2)
    return best if most > second else UNKNOWN


def language_shares(lines: Iterable[str]) -> dict[str, float]:
    """Share of lines guessed as each language (and "unknown"), in percent, largest first."""
    counts = Counter(guess_language(line) for line in lines)
    total = sum(counts.values()) or 1
    return {lang: round(100 * n / total, 1) for lang, n in counts.most_common()}
