"""`Translation`: one hypothesis for one source, whatever the source is (a text, an image or audio file)
and whichever engine produced it (`Translator`, `Generator`, the CTranslate2 engine)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Translation:
    """One hypothesis for one source.

    source: the file it was generated from (image and audio sources), None for a text.
    src_pieces: the source subword pieces the model saw (after truncation), EOS included; [] for a
    file. attention: cross-attention [target pieces + EOS, source positions] (source pieces + EOS
    for a text, the encoder's memory positions for a file), when asked for.
    """

    text: str
    score: float  # the search score (length-penalised log-probability, see seq2seq.inference.search)
    logprob: float  # total log-probability
    token_ids: list[int]
    pieces: list[str]  # target subword pieces (without EOS)
    token_logprobs: list[float]  # per target token, EOS included
    src_pieces: list[str] = field(default_factory=list)
    attention: list[list[float]] | None = None
    source: str | None = None

    def to_json(self) -> dict[str, Any]:
        """What `--json` prints: text, score, logprob, tokens; a file's result starts with its "source"
        and carries its "attention", a text's its "alignment" and "src_tokens"."""
        out: dict[str, Any] = {} if self.source is None else {"source": self.source}
        out.update(text=self.text, score=round(self.score, 4), logprob=round(self.logprob, 4), tokens=self.pieces)
        if self.attention is not None:
            rounded = [[round(w, 4) for w in row] for row in self.attention]
            if self.source is None:
                out["alignment"] = rounded
                out["src_tokens"] = self.src_pieces
            else:
                out["attention"] = rounded
        return out
