"""Documents: an HTML page, an XML file or a Markdown text in, the same document out with its text
translated (`seq2seq translate --format`, the server's `format`, `seq2seq.translate_documents`).

    from seq2seq import Translator, translate_documents
    t = Translator.load("runs/multi30k_en_de/model")
    translate_documents(t, ['<p>A man in a <b>red</b> shirt.</p>'], "html")
      -> ['<p>Ein Mann in einem <b>roten</b> Hemd.</p>']

A format (one module each, registered in `FORMATS`) finds a document's segments: the runs of text
to translate, each with its offsets in the document's source (`Segment`), so that everything else
(markup, attributes, entities, comments, whitespace, code) is copied from the source byte for byte.
Every segment of every document of a call goes through ONE `translate_lines` call (sentences split,
cased, non-translatables and inline tags carried through the word alignment: markup is always on),
and each document is rebuilt by putting each translation in place of its segment. A format with
several `stages` (HTML: attribute values such as alt and title first, then the text) runs them in turn.

After the rebuild, the format's `tree` of the output is compared with the input's: where they differ
(a tag the alignment could not place well), a warning says so; the translation is written anyway.
A document that does not parse (XML that is not well-formed) is refused before anything is
translated, with a `DocumentError` naming the document, line and column.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from typing_extensions import Unpack

from seq2seq.config.diagnostics import Diagnostic, Warn
from seq2seq.documents.formats import html, markdown, plain
from seq2seq.documents.formats.document import DocumentError, DocumentFormat, Segment
from seq2seq.inference.results import Translation

if TYPE_CHECKING:  # pragma: no cover
    from seq2seq.documents.line_translation import LineOptions
    from seq2seq.inference.engine import Engine

log = logging.getLogger(__name__)


FORMATS: dict[str, DocumentFormat] = {f.name: f for f in (plain.FORMAT, html.HTML, html.XML, markdown.FORMAT)}
FORMAT_NAMES = tuple(FORMATS)
__all__ = ["DocumentError", "DocumentFormat", "FORMATS", "FORMAT_NAMES", "Segment", "document_translations",
           "format_of_path", "get_format", "read_document", "translate_documents"]


def get_format(name: str) -> DocumentFormat:
    """The format called `name` (a `DocumentError` naming the known ones otherwise)."""
    if name not in FORMATS:
        raise DocumentError(f"unknown document format {name!r}; choose one of {', '.join(FORMATS)}")
    return FORMATS[name]


def format_of_path(path: str) -> str:
    """The format a file is read as by its name's ending ("text" for any other name, and for stdin "-")."""
    suffixes = "".join(Path(path).suffixes[-2:]).lower()
    for fmt in FORMATS.values():
        if any(suffixes.endswith(ext) for ext in fmt.extensions):
            return fmt.name
    return "text"


def read_document(path: str, name: str, fmt: str) -> str:
    """The document at `path` ('-': stdin; .gz read through gzip), decoded as UTF-8 and checked to parse in
    format `fmt`: a `DocumentError` naming `name` and the line where a byte is not UTF-8 or the document
    does not parse (nothing is replaced: a document is written back whole)."""
    from seq2seq.text.lines import open_binary, std_binary

    if path == "-":
        raw = std_binary("stdin").read()  # (stdin stays open: it is the command's, not ours to close)
    else:
        with open_binary(path, "rb") as f:
            raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise DocumentError(f"{name}:{line}: not UTF-8 (byte 0x{raw[e.start]:02x}); save the document as UTF-8") from None
    form = get_format(fmt)
    form.segments(text, name, form.stages[0])
    return text


def translate_documents(engine: Engine, documents: Sequence[str], fmt: str, names: Sequence[str] | None = None,
                        warn: Warn | None = None, first_line: int = 1, batch_tokens: int = 4000,
                        **call: Unpack[LineOptions]) -> list[str]:
    """Each document of `documents`, in format `fmt`, with its text translated (`document_translations`)."""
    return [t.text for t in document_translations(engine, documents, fmt, names, warn, first_line, batch_tokens, **call)]


def document_translations(engine: Engine, documents: Sequence[str], fmt: str, names: Sequence[str] | None = None,
                          warn: Warn | None = None, first_line: int = 1, batch_tokens: int = 4000,
                          **call: Unpack[LineOptions]) -> list[Translation]:
    """Each document of `documents`, in format `fmt`, with its text translated (see the module docstring), as a
    `Translation` whose text is the document and whose score and logprob are its segments' summed (no tokens).

    names: what a warning calls each document (a file name: the warning then says "NAME:LINE: ..." and
    is about the call as a whole); without names, a warning is about input first_line + i (the server's
    texts[i]) and says "document line LINE: ...". call: `translate_lines`' arguments (search options,
    steering shared by the whole call, glossary, tgt_lang, the pipeline steps); spans and markup are on."""
    from seq2seq.documents.line_translation import translate_lines

    options: LineOptions = {**call, "spans": True, "markup": True}
    form = get_format(fmt)
    warn = warn or log.warning
    out = list(documents)
    scores = [[0.0, 0.0] for _ in out]  # per document: score, logprob
    labels = list(names) if names is not None else [""] * len(out)
    for stage in form.stages:
        found = [form.segments(doc, label or f"document {i + first_line}", stage)
                 for i, (doc, label) in enumerate(zip(out, labels))]
        owners = [(i, seg) for i, segs in enumerate(found) for seg in segs]
        if not owners:
            continue

        def located(d: Diagnostic) -> None:
            if d.line is None or not 1 <= d.line <= len(owners):
                warn(d)
                return
            i, seg = owners[d.line - 1]
            where = _line_of(out[i], seg.start)
            if names is not None:
                warn(dataclasses.replace(d, message=f"{labels[i]}:{where}: {d.message}", line=None))
            else:
                warn(dataclasses.replace(d, message=f"document line {where}: {d.message}", line=first_line + i))

        results = translate_lines(engine, [seg.text for _, seg in owners], batch_tokens=batch_tokens,
                                  warn=located, **options)
        translations: list[list[str]] = [[] for _ in out]
        for (i, seg), hyps in zip(owners, results):
            translations[i].append(hyps[0].text if hyps else seg.text)
            if hyps:
                scores[i][0] += hyps[0].score
                scores[i][1] += hyps[0].logprob
        out = [_rebuilt(doc, segs, texts) for doc, segs, texts in zip(out, found, translations)]
    for i, (source, target) in enumerate(zip(documents, out)):
        if form.tree(source) != form.tree(target):
            message = "the translated document's structure differs from the source's (a tag may be misplaced)"
            if names is not None:
                warn(Diagnostic(f"{labels[i]}: {message}", None, "format", "tree_changed"))
            else:
                warn(Diagnostic(message, first_line + i, "format", "tree_changed"))
    return [Translation(text=text, score=score, logprob=logprob, token_ids=[], pieces=[], token_logprobs=[],
                        src_pieces=[]) for text, (score, logprob) in zip(out, scores)]


def _rebuilt(document: str, segments: list[Segment], translations: list[str]) -> str:
    """`document` with each segment replaced by its translation (segments in order, none overlapping)."""
    parts, at = [], 0
    for seg, text in zip(segments, translations):
        parts.append(document[at:seg.start])
        parts.append(seg.written(text))
        at = seg.end
    parts.append(document[at:])
    return "".join(parts)


def _line_of(document: str, offset: int) -> int:
    """The 1-based line of `document` that `offset` is on."""
    return document.count("\n", 0, offset) + 1
