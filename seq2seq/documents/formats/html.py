"""HTML and XML documents: the runs of text they hold, found in their source, and their element tree.

    segments('<p>Visit <b>the old town</b>.</p><img alt="A church">', "page.html", "text")
      -> [Segment(3, 31, 'Visit <b>the old town</b>.')]
    segments(..., "attributes") -> [Segment(43, 51, 'A church', quote='"')]

The source is read by the standard library's tokenizer (`html.parser`, which keeps each token's
position and raw text; lxml rebuilds a tree and re-serialises it, so entities, attribute quoting and
whitespace would not come back as written), and its tree for the structure check by lxml.

A run is what lies between two block boundaries: the start or end tag of an element that is not
inline (HTML: not phrasing content such as <b>, <a>, <span>, <br>, <img>, <code>; XML: an element
whose parent holds no text of its own), a declaration, a processing instruction or a CDATA section.
A run holding a letter outside its verbatim parts is a segment: its inline tags, entities and
comments go with it (`translate_lines` with markup carries them through the alignment). Left as
they are: <script>, <style>, <pre>, <textarea>, <template> and any element with translate="no"
(inline ones are kept verbatim inside their sentence: `seq2seq.documents.spans`), and in HTML the
attribute values alt, title, placeholder and aria-label are translated (stage "attributes").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from seq2seq.documents.formats.document import DocumentError, DocumentFormat, Segment, line_starts

if TYPE_CHECKING:  # pragma: no cover
    from lxml.etree import _Element

INLINE = frozenset(
    "a abbr acronym b bdi bdo big br cite code data del dfn em font i img input ins kbd label mark nobr q s "
    "samp small span strike strong sub sup time tt u var wbr".split())
VOID = frozenset("area base br col embed hr img input link meta source track wbr".split())
SKIPPED = frozenset("script style pre textarea template".split())  # block elements left as they are
VERBATIM_INLINE = frozenset("code kbd samp var".split())  # inline elements kept verbatim in their sentence
TRANSLATED_ATTRIBUTES = frozenset("alt title placeholder aria-label".split())
_ATTRIBUTE = re.compile(r"""([^\s"'>/=]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+)))?""")
_LINE_BREAKS = re.compile(r"\s*\n\s*")


@dataclass(frozen=True)
class Token:
    """One token of the source: kind ("start", "end", "startend", "text", "entity", "comment", "decl",
    "pi", "cdata"), its offsets [start, end), and for a tag its lower-cased name, attributes, and (start
    tags) where the tag itself ends."""

    kind: str
    start: int
    end: int
    name: str = ""
    attrs: tuple[tuple[str, str | None], ...] = ()
    tag_end: int = 0

    @property
    def not_translated(self) -> bool:
        return any(k == "translate" and (v or "").strip().lower() == "no" for k, v in self.attrs)


class _Tokenizer(HTMLParser):
    """Every token of a document with its offsets (tokens are contiguous: each ends where the next starts)."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=False)
        self.starts = line_starts(text)
        self.found: list[tuple[str, int, str, tuple[tuple[str, str | None], ...], int]] = []

    def _add(self, kind: str, name: str = "", attrs: Iterable[tuple[str, str | None]] = (), length: int = 0) -> None:
        line, column = self.getpos()
        at = self.starts[line - 1] + column
        self.found.append((kind, at, name, tuple(attrs), at + length))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._add("start", tag, attrs, len(self.get_starttag_text() or ""))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._add("startend", tag, attrs, len(self.get_starttag_text() or ""))

    def handle_endtag(self, tag: str) -> None:
        self._add("end", tag)

    def handle_data(self, data: str) -> None:
        self._add("text")

    def handle_entityref(self, name: str) -> None:
        self._add("entity")

    def handle_charref(self, name: str) -> None:
        self._add("entity")

    def handle_comment(self, data: str) -> None:
        self._add("comment")

    def handle_decl(self, decl: str) -> None:
        self._add("decl")

    def handle_pi(self, data: str) -> None:
        self._add("pi")

    def unknown_decl(self, data: str) -> None:
        self._add("cdata")


def tokens(text: str) -> list[Token]:
    """The tokens of `text` in order, each ending where the next starts."""
    parser = _Tokenizer(text)
    parser.feed(text)
    parser.close()
    found = parser.found
    ends = [at for _, at, _, _, _ in found[1:]] + [len(text)]
    return [Token(kind, at, end, name, attrs, tag_end or end)
            for (kind, at, name, attrs, tag_end), end in zip(found, ends) if end > at]


def _runs(text: str, toks: list[Token], breaks: Callable[[int, Token], bool], skipped: Callable[[Token], bool],
          verbatim: Callable[[Token], bool]) -> list[Segment]:
    """The segments of `text`: runs of tokens between two `breaks`, holding a letter outside their
    `verbatim` inline elements; the content of a `skipped` element (breaking where it starts) is
    left out."""
    segments: list[Segment] = []
    run: list[Token] = []

    def flush() -> None:
        if run and _has_letters(text, run, verbatim):
            raw = text[run[0].start:run[-1].end]
            lead, trail = len(raw) - len(raw.lstrip()), len(raw) - len(raw.rstrip())
            start, end = run[0].start + lead, run[-1].end - trail
            segments.append(Segment(start, end, _LINE_BREAKS.sub(" ", text[start:end])))
        run.clear()

    for k, tok in _outside(toks, lambda k, tok: breaks(k, tok) and skipped(tok)):
        if breaks(k, tok):
            flush()
            continue
        run.append(tok)
    flush()
    return segments


def _outside(toks: list[Token], skips: Callable[[int, Token], bool]) -> Iterator[tuple[int, Token]]:
    """(index, token) of the tokens outside every element whose start tag `skips` (that start tag is
    given; its content and its end tag, nesting counted, are not)."""
    skip: tuple[str, int] | None = None  # the skipped element's name and nesting depth
    for k, tok in enumerate(toks):
        if skip is not None:
            if tok.name == skip[0] and tok.kind in ("start", "end"):
                depth = skip[1] + (1 if tok.kind == "start" else -1)
                skip = None if depth == 0 else (skip[0], depth)
            continue
        yield k, tok
        if tok.kind == "start" and tok.name not in VOID and skips(k, tok):
            skip = (tok.name, 1)


def _has_letters(text: str, run: list[Token], verbatim: Callable[[Token], bool]) -> bool:
    """Whether a run holds a letter in its text outside its verbatim inline elements."""
    inside: list[str] = []
    for tok in run:
        if tok.kind == "start" and tok.name not in VOID and (inside or verbatim(tok)):
            inside.append(tok.name)
        elif tok.kind == "end" and inside and tok.name == inside[-1]:
            inside.pop()
        elif tok.kind == "text" and not inside and any(ch.isalpha() for ch in text[tok.start:tok.end]):
            return True
    return False


def _attribute_segments(text: str, toks: list[Token], skipped: Callable[[Token], bool]) -> list[Segment]:
    """The values of the translated attributes (alt, title, ...) of every start tag outside skipped elements."""
    segments: list[Segment] = []
    for _, tok in _outside(toks, lambda k, tok: skipped(tok)):
        if tok.kind not in ("start", "startend"):
            continue
        if tok.not_translated:
            continue
        raw = text[tok.start:tok.tag_end]
        name_end = 1 + len(tok.name)
        for m in _ATTRIBUTE.finditer(raw, name_end):
            if m.group(1).lower() not in TRANSLATED_ATTRIBUTES or m.lastindex is None or m.lastindex < 2:
                continue
            group = next(g for g in (2, 3, 4) if m.group(g) is not None)
            value = m.group(group)
            if not any(ch.isalpha() for ch in value):
                continue
            quote = '"' if group == 2 else "'" if group == 3 else None
            start, end = tok.start + m.start(group), tok.start + m.end(group)
            kind = Segment if quote is not None else _Unquoted
            segments.append(kind(start, end, _LINE_BREAKS.sub(" ", value), quote))
    return segments


_UNQUOTABLE = re.compile(r"[\s\"'=<>`]")


@dataclass(frozen=True)
class _Unquoted(Segment):
    """An unquoted attribute value: written back between double quotes where its translation holds a space
    or a character an unquoted value cannot."""

    def written(self, translation: str) -> str:
        if not translation or _UNQUOTABLE.search(translation):
            return '"' + translation.replace('"', "&quot;") + '"'
        return translation


def html_segments(text: str, name: str, stage: str) -> list[Segment]:
    """The HTML segments of `text`: stage "text" its runs of text, stage "attributes" its attribute values."""
    toks = tokens(text)

    def skipped(tok: Token) -> bool:
        return tok.name in SKIPPED or tok.not_translated

    if stage == "attributes":
        return _attribute_segments(text, toks, skipped)

    def breaks(k: int, tok: Token) -> bool:
        if tok.kind in ("start", "end", "startend"):
            return tok.name not in INLINE
        return tok.kind in ("decl", "pi", "cdata")

    return _runs(text, toks, breaks, skipped, lambda tok: tok.name in VERBATIM_INLINE or tok.not_translated)


def xml_segments(text: str, name: str, stage: str) -> list[Segment]:
    """The XML segments of `text` (a `DocumentError` naming the line and column where it is not well-formed):
    the content of each element that holds text of its own, its child elements inline."""
    _xml_root(text, name)
    toks = tokens(text)
    inline = _xml_inline(text, toks)

    def breaks(k: int, tok: Token) -> bool:
        if tok.kind in ("start", "end", "startend"):
            return not inline[k]
        return tok.kind in ("decl", "pi", "cdata")

    return _runs(text, toks, breaks, lambda tok: tok.not_translated, lambda tok: tok.not_translated)


def _xml_inline(text: str, toks: list[Token]) -> dict[int, bool]:
    """For each tag token, whether its element is inline: its parent element holds text of its own."""
    has_text: list[bool] = []  # per open element, from the root
    members: list[list[int]] = []  # per open element, the tag tokens of its child elements
    opened: list[int] = []
    inline: dict[int, bool] = {}
    for k, tok in enumerate(toks):
        if tok.kind == "start":
            if members:
                members[-1].append(k)
            has_text.append(False)
            members.append([])
            opened.append(k)
        elif tok.kind == "startend":
            if members:
                members[-1].append(k)
        elif tok.kind == "end" and opened:
            own, kids = has_text.pop(), members.pop()
            start = opened.pop()
            for kid in kids:
                inline[kid] = own
            inline[k] = inline.get(start, False)
            if members:
                members[-1].append(k)
        elif tok.kind in ("text", "entity") and has_text and text[tok.start:tok.end].strip():
            has_text[-1] = True
    # an inline element makes its whole content inline
    depth_inline: list[bool] = []
    for k, tok in enumerate(toks):
        if tok.kind == "start":
            parent_inline = bool(depth_inline and depth_inline[-1])
            inline[k] = inline.get(k, False) or parent_inline
            depth_inline.append(inline[k])
        elif tok.kind == "startend":
            inline[k] = inline.get(k, False) or bool(depth_inline and depth_inline[-1])
        elif tok.kind == "end" and depth_inline:
            inline[k] = depth_inline.pop()
    return inline


def _xml_root(text: str, name: str) -> _Element:
    from lxml import etree

    try:
        return etree.fromstring(text.encode("utf-8"), etree.XMLParser(resolve_entities=False, no_network=True))
    except etree.XMLSyntaxError as e:
        line, column = e.position if e.position else (e.lineno, 0)
        raise DocumentError(f"{name}:{line}:{column}: not well-formed XML: {e.msg}") from None


def _shape(element: _Element, translated: frozenset[str]) -> tuple[object, ...]:
    """An lxml element's structure: tag, attributes that are not translated, children; for a comment or
    an element left untranslated, also its text."""
    from lxml import etree

    if not isinstance(element.tag, str):  # a comment or processing instruction
        return ("comment" if element.tag is etree.Comment else "pi", (element.text or "").strip())
    tag = etree.QName(element).localname.lower() if "}" in element.tag else element.tag.lower()
    attrs = tuple(sorted((k, v) for k, v in element.attrib.items() if k.lower() not in translated))
    if tag in SKIPPED or element.get("translate", "").lower() == "no":
        return (tag, attrs, etree.tostring(element, encoding="unicode", with_tail=False))
    return (tag, attrs, tuple(_shape(child, translated) for child in element))


def html_tree(text: str) -> tuple[object, ...] | None:
    """The structure of an HTML document as lxml's HTML parser builds it."""
    from lxml import etree

    if not text.strip():
        return None
    root = etree.fromstring(text.encode("utf-8"), etree.HTMLParser(encoding="utf-8"))
    return None if root is None else _shape(root, TRANSLATED_ATTRIBUTES)


def xml_tree(text: str) -> tuple[object, ...] | None:
    """The structure of an XML document (None where it is not well-formed)."""
    try:
        root = _xml_root(text, "")
    except DocumentError:
        return None
    return _shape(root, frozenset())


HTML = DocumentFormat("html", (".html", ".htm", ".xhtml"), html_segments, html_tree, ("attributes", "text"))
XML = DocumentFormat("xml", (".xml",), xml_segments, xml_tree)
