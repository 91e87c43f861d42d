"""`dedup`: exact and near duplicates (`clean.dedup`), the first copy kept. Judged in the main process,
in input order and after every other filter, so its hash set holds only pairs that are kept: an 8-byte
BLAKE2b digest per kept pair and per kind (exact, near) as a Python int, about 60 bytes each, so ten
million pairs in about 1.2 GB."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from seq2seq.config.clean_section import CleanConfig
from seq2seq.data.filters.base import Pair, PairFilter
from seq2seq.data.filters.normalise import fold


def digest(text: str) -> int:
    """An 8-byte BLAKE2b digest of `text`, as an int (collisions: one in 2**64 per pair of texts)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


class DedupFilter(PairFilter):
    """Reasons: `duplicate` (the same pair, or the same source with `key: source`, seen before),
    `near_duplicate` (the same once folded: `normalise.fold`)."""

    name = "dedup"
    reasons = ("duplicate", "near_duplicate")
    in_workers = False

    def __init__(self, cfg: CleanConfig) -> None:
        super().__init__(cfg)
        self.exact: set[int] = set()
        self.near: set[int] = set()

    def prepare(self, sample: Sequence[Pair]) -> dict[str, object]:
        return {"key": self.cfg.dedup.key, "near": self.cfg.dedup.near}

    def keep(self, src: str, tgt: str) -> str | None:
        rules = self.cfg.dedup
        exact = digest(src if rules.key == "source" else f"{src}\t{tgt}")
        if exact in self.exact:
            return "duplicate"
        if rules.near:
            near = digest(fold(src) if rules.key == "source" else f"{fold(src)}\t{fold(tgt)}")
            if near in self.near:
                return "near_duplicate"
            self.near.add(near)
        self.exact.add(exact)
        return None
