"""Looped outputs: a search that fell into repeating itself ("EEEEEEE", "man man man man", "von einem
großen Bild von einem großen Bild").

    looped("Ein Mann Mann Mann Mann.")            -> True
    looped("Konnnnnnsamachaaaachachacha")          -> True
    looped("Ein Mann fährt Fahrrad.")              -> False
    output_loops("man man man man", "hm hm hm hm") -> False   (the source repeats itself too)

An output loops when, over its whitespace words, a word or a group of 2-3 words repeats 3 times in a
row, or a group of 4 words or more twice in a row; or, within a word, a letter repeats 4 times in a row or a group of 2-4
letters 3 times ("chachacha"). Such outputs are searched again with a repetition guard
(`seq2seq.documents.line_translation`), so outputs that do not loop stay as they were.
"""

from __future__ import annotations

import re

MAX_NGRAM = 8  # the longest word n-gram looked for
_LETTER_RUN = re.compile(r"([^\W\d_])\1{3}")  # a letter 4 times in a row
_GROUP_RUN = re.compile(r"([^\W\d_]{2,4})\1{2}")  # 2-4 letters 3 times in a row


def _words_loop(words: list[str]) -> bool:
    for n in range(1, min(MAX_NGRAM, len(words) // 2) + 1):
        times = 3 if n < 4 else 2
        for start in range(len(words) - n * times + 1):
            gram = words[start:start + n]
            if all(words[start + k * n:start + (k + 1) * n] == gram for k in range(1, times)):
                return True
    return False


def looped(text: str) -> bool:
    """Does `text` repeat itself the way a derailed search does (see the module docstring)? Case and the
    punctuation around words are ignored."""
    words = [w.strip(".,;:!?\"'()[]«»„“”").lower() for w in text.split()]
    words = [w for w in words if w]
    if _words_loop(words):
        return True
    return any(_LETTER_RUN.search(w) or _GROUP_RUN.search(w) for w in words)


def output_loops(source: str, output: str) -> bool:
    """Did the search loop: the output repeats itself where its source does not?"""
    return looped(output) and not looped(source)
