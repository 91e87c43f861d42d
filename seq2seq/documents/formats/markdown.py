"""Markdown documents: the text of each paragraph, heading, list item and table cell, found in the
source by markdown-it-py (CommonMark, with tables and strikethrough), and the token tree.

    segments("# A title\\n\\nA man in a **red** shirt.\\nHe rides.\\n", "README.md", "text")
      -> [Segment(2, 9, 'A title'), Segment(11, 47, 'A man in a **red** shirt. He rides.')]

A block's inline content is located line by line in the source, so the block's own markup (`#`,
`- `, `1. `, `> `, `|`, indentation) is kept as written; a block of several lines becomes one line
(its soft line breaks as spaces), and a hard line break (two spaces or a backslash at the end of a
line) ends a segment, so it stays where it was. Inline markup (`**`, `_`, links, `code spans`,
images, inline HTML) goes with the text through `translate_lines` with markup. Code blocks and
fences are left as they are; an HTML block is translated as HTML (`seq2seq.documents.formats.html`).
"""

from __future__ import annotations

import functools
import logging
import re
from typing import TYPE_CHECKING

from seq2seq.documents.formats.document import DocumentFormat, Segment, line_starts
from seq2seq.documents.formats.html import html_segments, html_tree

if TYPE_CHECKING:  # pragma: no cover
    from markdown_it import MarkdownIt
    from markdown_it.token import Token

log = logging.getLogger(__name__)

_HARD_BREAK = re.compile(r"(?: {2,}|\\)$")


@functools.lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable(["table", "strikethrough"])


def markdown_segments(text: str, name: str, stage: str) -> list[Segment]:
    """The segments of a Markdown text (see the module docstring)."""
    starts = line_starts(text)
    segments: list[Segment] = []
    cursor = 0
    for tok in _parser().parse(text):
        if tok.map is None:
            continue
        block_start = starts[tok.map[0]] if tok.map[0] < len(starts) else len(text)
        block_end = starts[tok.map[1]] if tok.map[1] < len(starts) else len(text)
        if tok.type == "html_block":
            segments += [Segment(block_start + s.start, block_start + s.end, s.text, s.quote)
                         for s in html_segments(text[block_start:block_end], name, "text")]
            cursor = block_end
            continue
        if tok.type != "inline" or not any(c.type == "text" and any(ch.isalpha() for ch in c.content)
                                           for c in tok.children or []):
            continue
        found = _located(text, tok.content.split("\n"), max(cursor, block_start), block_end)
        if found is None:
            log.warning("%s:%d: could not find this block's text in the source; it is left as written",
                        name, tok.map[0] + 1)
            continue
        segments += found
        cursor = found[-1].end if found else cursor
    return segments


def _located(text: str, lines: list[str], start: int, end: int) -> list[Segment] | None:
    """The segments of one block's content `lines`, each found in text[start:end] in turn; a line with a
    hard break ends a segment. None where a line is not found."""
    segments: list[Segment] = []
    group: list[tuple[int, int, str]] = []  # (start, end, text) of the lines of the segment being built
    at = start
    for k, line in enumerate(lines):
        core = _HARD_BREAK.sub("", line).strip() if k < len(lines) - 1 else line.strip()
        if not core:
            continue
        where = text.find(core, at, end)
        if where < 0:
            return None
        group.append((where, where + len(core), core))
        at = where + len(core)
        if k < len(lines) - 1 and _HARD_BREAK.search(line):
            segments.append(_segment(group))
            group = []
    if group:
        segments.append(_segment(group))
    return segments


def _segment(group: list[tuple[int, int, str]]) -> Segment:
    return Segment(group[0][0], group[-1][1], " ".join(core for _, _, core in group))


def markdown_tree(text: str) -> tuple[object, ...]:
    """The structure of a Markdown text: its tokens and their inline tokens, without the text and
    soft line breaks; code kept with its content, links and images with their targets."""

    def shape(tok: Token) -> tuple[object, ...]:
        content = tok.content if tok.type in ("code_inline", "fence", "code_block") else ""
        attrs = tuple((k, v) for k, v in sorted((tok.attrs or {}).items()) if k in ("href", "src"))
        return (tok.type, tok.tag, tok.nesting, tok.markup if tok.type != "text" else "", attrs, content)

    out: list[tuple[object, ...]] = []
    for tok in _parser().parse(text):
        if tok.type == "html_block":
            out.append(("html_block", html_tree(tok.content)))
            continue
        out.append(shape(tok))
        for child in tok.children or []:
            if child.type not in ("text", "softbreak"):
                out.append(shape(child))
    return tuple(out)


FORMAT = DocumentFormat("markdown", (".md", ".markdown"), markdown_segments, markdown_tree)
