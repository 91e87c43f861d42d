"""`numbers`: the numbers written in digits differ between the sides (a misaligned pair, or a
translation that changed a figure). Compared as sets of values: group and decimal separators are
dropped ("1,000" = "1.000" = "1000", as languages write them differently), leading zeros too, and
any script's digits count ("٣" = "3"). A small number on one side only (at most `SPELLED_OUT`: "2 kids" =
"zwei Kinder") is taken as written out in words on the other, unless the other side has a number of
its own that the first lacks ("3 men" / "2 Männer": changed, not spelled out)."""

from __future__ import annotations

import re

from seq2seq.data.filters.base import PairFilter

NUMBER = re.compile(r"\d+(?:[.,\u00a0\u202f']\d+)*")
SEPARATORS = re.compile(r"[.,\u00a0\u202f']")


SPELLED_OUT = 20  # the largest number a translation commonly writes in words


def numbers(text: str) -> set[str]:
    values = set()
    for match in NUMBER.findall(text):
        digits = SEPARATORS.sub("", match)
        values.add(str(int(digits)) if len(digits) < 100 else digits)  # int(): any script's digits, no zeros
    return values


class NumberFilter(PairFilter):
    """Reason: `different_numbers`."""

    name = "numbers"
    reasons = ("different_numbers",)

    def keep(self, src: str, tgt: str) -> str | None:
        src_numbers, tgt_numbers = numbers(src), numbers(tgt)
        if src_numbers == tgt_numbers:
            return None
        src_only, tgt_only = src_numbers - tgt_numbers, tgt_numbers - src_numbers
        if src_only and tgt_only:
            return "different_numbers"
        small = all(len(n) <= 2 and n.isdigit() and int(n) <= SPELLED_OUT for n in src_only | tgt_only)
        return None if small else "different_numbers"
