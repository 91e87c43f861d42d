"""`Translation`: one hypothesis for one source, whatever the source is (a text, an image or audio file)
and whichever engine produced it (`Translator`, `Generator`, the CTranslate2 engine), and its forms:
its JSON object (`Translation.to_json`, `with_diagnostics`) and the output lines of `seq2seq translate` /
`test` (`formatter`) and of `seq2seq caption` / `transcribe` (`file_formatter`). Output lines never
contain a line break of their own (`one_line`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from seq2seq.config.diagnostics import Diagnostic
from seq2seq.text.lines import json_line, one_line


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


# ---- results as output lines ------------------------------------------------------------------

NBEST_FORMATS = ("marian", "fairseq")


def _empty_translation() -> Translation:
    return Translation(text="", score=0.0, logprob=0.0, token_ids=[], pieces=[], token_logprobs=[], src_pieces=[])


def formatter(fmt: str, nbest: int, nbest_format: str | None = None, documents: bool = False) -> Callable[..., str]:
    """emit(index, n-best list, notes=()): the output text (newline-terminated) of input line `index`
    (0-based) from its n-best list, and the warnings it drew (`notes`, `Diagnostic`s).

    text: the best translation. scores: "score<TAB>text". json: one object per input line (with an
    "nbest" list when nbest > 1, and the line's "warnings" and "diagnostics" if it drew any: the
    server's result object, `with_diagnostics`). n-best lists (nbest > 1, or nbest_format given), one line per
    hypothesis, best first:
      marian:  "index ||| text ||| F0= logprob ||| score"  (Marian's --n-best lines)
      fairseq: "H-index<TAB>score<TAB>text"                 (fairseq-generate's H- lines)
    score is the length-penalised log-probability, logprob the plain sum (natural logarithms).
    documents (json): each result is a whole document (`seq2seq.documents.formats`), whose text keeps its
    line breaks (escaped by JSON).
    """
    if nbest_format is not None and nbest_format not in NBEST_FORMATS:
        raise ValueError(f"unknown n-best format {nbest_format!r}; choose one of {', '.join(NBEST_FORMATS)}")
    listed = nbest_format or ("marian" if nbest > 1 and fmt != "json" else None)

    def hypothesis(index: int, h: Translation) -> str:
        if listed == "fairseq":
            return f"H-{index}\t{h.score:.4f}\t{one_line(h.text)}\n"
        return f"{index} ||| {one_line(h.text)} ||| F0= {h.logprob:.4f} ||| {h.score:.4f}\n"

    def emit(index: int, hyps: list, notes: Sequence[Diagnostic] = ()) -> str:
        hyps = hyps or [_empty_translation()]
        if fmt == "json":
            obj = hyps[0].to_json()
            obj["text"] = obj["text"] if documents else one_line(obj["text"])
            if nbest > 1:
                obj["nbest"] = [{**h.to_json(), "text": one_line(h.text)} for h in hyps]
            return json_line(with_diagnostics(obj, notes)) + "\n"
        if listed:
            return "".join(hypothesis(index, h) for h in hyps)
        if fmt == "scores":
            return f"{hyps[0].score:.4f}\t{one_line(hyps[0].text)}\n"
        return one_line(hyps[0].text) + "\n"

    return emit


def timed_text(h: Translation) -> str:
    """A transcription with its windows' times, on one line: "[0.00-4.20] three one four [4.20-8.10] ..."
    (start-end in seconds, 2 decimals); its plain text when it has no segments."""
    if h.segments is None:
        return one_line(h.text)
    return " ".join(f"[{s.start:.2f}-{s.end:.2f}] {one_line(s.text)}".rstrip() for s in h.segments)


def file_formatter(fmt: str, nbest: int, timestamps: bool = False) -> Callable[..., str]:
    """emit(path, n-best list, notes=()): the output text of one source file from its n-best list ([] for
    a file that could not be read) and the warnings it drew.

    text: the best text. path: "path<TAB>text". json: one object per file (with an "nbest" list when
    nbest > 1, and its "warnings" and "diagnostics" if it drew any). nbest > 1 (text or path): one "path<TAB>score<TAB>text" line per hypothesis.
    timestamps (transcriptions): text and path give each window as "[start-end] text" (`timed_text`),
    json a "segments" list (start, end, text, words with approximate times).
    """
    show = timed_text if timestamps else (lambda h: one_line(h.text))

    def emit(path: str, hyps: list, notes: Sequence[Diagnostic] = ()) -> str:
        if fmt == "json":
            obj = hyps[0].to_json() if hyps else {"source": path, "text": "", "error": "unreadable"}
            if nbest > 1:
                obj["nbest"] = [h.to_json() for h in hyps]
            return json_line(with_diagnostics(obj, notes)) + "\n"
        if nbest > 1:
            return "".join(f"{path}\t{h.score:.4f}\t{show(h)}\n" for h in hyps) or f"{path}\t\t\n"
        text = show(hyps[0]) if hyps else ""
        return f"{path}\t{text}\n" if fmt == "path" else text + "\n"

    return emit
