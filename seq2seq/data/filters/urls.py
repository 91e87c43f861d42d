"""`urls`: the URLs and e-mail addresses of the two sides differ (a misaligned pair, or a link the
translator changed); compared as sets, lowercased, trailing punctuation cut off."""

from __future__ import annotations

import re

from seq2seq.data.filters.base import PairFilter

URL = re.compile(r"(?:https?://|ftp://|www\.)[^\s<>\"']+|[\w.+-]+@[\w-]+(?:\.[\w-]+)+", re.IGNORECASE)
TRAILING = ".,;:!?)]}'\"\u201d\u2019\u00bb"


def urls(text: str) -> set[str]:
    if "@" not in text and "www." not in text and "://" not in text:  # (the common case, without a regex)
        return set()
    return {u.rstrip(TRAILING).lower() for u in URL.findall(text)}


class UrlFilter(PairFilter):
    """Reason: `different_urls`."""

    name = "urls"
    reasons = ("different_urls",)

    def keep(self, src: str, tgt: str) -> str | None:
        return "different_urls" if urls(src) != urls(tgt) else None
