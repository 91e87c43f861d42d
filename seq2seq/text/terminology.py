"""Terms on the source: the target words a translation must contain, appended to its source.

    annotate("A man slices noodles.", ["Nudeln"])  ->  "A man slices noodles. <term> Nudeln"

A model trained on sources annotated this way (`data.terminology`; Dinu et al. 2019 annotate in
place, Jon et al. 2021 append as here) learns to copy the appended words into its output, where they
belong in the sentence, and, trained with base forms, to inflect them. The same function annotates the
training sources (`seq2seq.data.terminology`) and a translation's terms (`seq2seq.inference`), so the
two cannot drift apart. `TERM` is a reserved piece of the tokenizer, whole in every segmentation.

Words are runs of letters and digits (with inner hyphens and apostrophes); `base_forms` maps a
corpus's words to base forms by one rule for languages that inflect with endings (German, like the
project's main target): the ending -e, -n, -s, -en, -er, -em, -es or -ern is taken off when at least
three letters stay, words that share what remains are one family, and the family's base form is the
word equal to that stem where the corpus has it ("Hunde", "Hunden" -> "Hund"; "schlanke", "schlanker"
-> "schlank"), else its most frequent word. It knows no umlauts ("Männer" is not "Mann") and may join
words that only look alike; `forms_of` inverts it for a lemma the corpus never had.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

TERM = "<term>"
ENDINGS = ("ern", "en", "er", "em", "es", "e", "n", "s")  # longest first
WORD = re.compile(r"\w+(?:[-'’]\w+)*")


def annotate(source: str, terms: Sequence[str]) -> str:
    """`source` with each term appended after the reserved piece <term> (the source itself without terms)."""
    if not terms:
        return source
    return " ".join([source.rstrip(), *(f"{TERM} {t.strip()}" for t in terms)])


def words(text: str) -> list[str]:
    """The words of `text`, in order (see the module docstring)."""
    return WORD.findall(text)


def stem(word: str) -> str:
    """`word` without its inflection ending (the longest of ENDINGS that leaves 3 letters or more)."""
    for ending in ENDINGS:
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            return word[: -len(ending)]
    return word


def base_forms(counts: Counter[str]) -> dict[str, str]:
    """Each word of a corpus (`counts`: word -> occurrences, case kept) -> its base form (see the module
    docstring)."""
    families: dict[str, list[str]] = {}
    for word in counts:
        families.setdefault(stem(word), []).append(word)
    out: dict[str, str] = {}
    for key, family in families.items():
        base = key if key in counts else max(family, key=lambda w: (counts[w], -len(w), w))
        out.update((w, base) for w in family)
    return out


def forms_of(lemma: str) -> list[str]:
    """The forms a term given as a lemma may take: the lemma itself, then it with each ending."""
    return [lemma, *(lemma + ending for ending in ENDINGS if not lemma.endswith(ending))]


def word_counts(texts: Iterable[str]) -> Counter[str]:
    """Occurrences of each word (case kept) in `texts`."""
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(words(text))
    return counts
