"""`Translation`: one hypothesis for one source, whatever the source is (a text, an image or audio file)
and whichever engine produced it (`Translator`, `Generator`, the CTranslate2 engine)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from seq2seq.config.diagnostics import Diagnostic


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
    segments: list[Segment] | None = None  # a transcription's windows, when asked for (timestamps)

    def to_json(self) -> dict[str, object]:
        """What `--json` prints: text, score, logprob, tokens; a file's result starts with its "source"
        and carries its "attention", a text's its "alignment" and "src_tokens"; a transcription with
        timestamps its "segments"."""
        out: dict[str, object] = {} if self.source is None else {"source": self.source}
        out.update(text=self.text, score=round(self.score, 4), logprob=round(self.logprob, 4), tokens=self.pieces)
        if self.attention is not None:
            rounded = [[round(w, 4) for w in row] for row in self.attention]
            if self.source is None:
                out["alignment"] = rounded
                out["src_tokens"] = self.src_pieces
            else:
                out["attention"] = rounded
        if self.segments is not None:
            out["segments"] = [s.to_json() for s in self.segments]
        return out


@dataclass
class Segment:
    """One window of a transcribed recording: its span in seconds, its text, and its words with
    times spread over the window's voiced part in proportion to their length (an approximation,
    not an alignment: `seq2seq.model.encoders.audio_windows.word_times`)."""

    start: float
    end: float
    text: str
    words: list[tuple[str, float, float]] = field(default_factory=list)  # (word, start, end)

    def to_json(self) -> dict[str, object]:
        return {"start": round(self.start, 3), "end": round(self.end, 3), "text": self.text,
                "words": [{"word": w, "start": round(a, 3), "end": round(b, 3)} for w, a, b in self.words]}


def with_diagnostics(obj: dict[str, Any], notes: Sequence[Diagnostic]) -> dict[str, Any]:
    """A result object with the warnings its input drew, if any: "warnings" (their messages) and
    "diagnostics" (each {"message", "code", "field", "index"}: `Diagnostic.as_json`); what the server
    answers and `translate --json` prints alike."""
    if notes:
        obj["warnings"] = [d.message for d in notes]
        obj["diagnostics"] = [d.as_json() for d in notes]
    return obj
