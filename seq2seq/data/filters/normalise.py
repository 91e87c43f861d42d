"""The folded form of a line that near-duplicate and copy detection compare: lowercased (casefold),
each run of digits one "0", punctuation and whitespace runs one space.

    fold("The 2 dogs -- barking!")  -> "the 0 dogs barking"
"""

from __future__ import annotations

import re

DIGITS = re.compile(r"\d+")
NOT_WORD = re.compile(r"[\W_]+")  # punctuation, symbols and whitespace, in runs


def fold(text: str) -> str:
    return NOT_WORD.sub(" ", DIGITS.sub("0", text.casefold())).strip()
