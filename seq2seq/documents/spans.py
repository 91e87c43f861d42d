"""Protected spans of a sentence: non-translatables (URLs, e-mail addresses, @handles, `{variables}`,
`%s`/`%(name)s`, `code spans`, numbers in digits) and, with `markup`, inline tags (`<b>`, `<a href="...">`,
`<br/>`, Markdown `**`, `_`, `[text](url)`), taken out of the text the engine translates and put back
into its translation through a word alignment (docs/documents.md).

    m = mask("Visit <b>the old town</b> at https://x.org now.", markup=True)
    m.text  -> "Visit the old town at now."       (what the engine translates)
    text, notes = unmask(m, "Besuchen Sie die Altstadt um jetzt.", alignment)
      -> "Besuchen Sie <b>die Altstadt</b> um https://x.org jetzt."

Each span is anchored to a word of the masked text (whitespace words): a non-translatable to the word
it is glued to, else (spaced on both sides) a number to the word after it (the noun it counts: "42 km")
and anything else to the word before it; an opening tag to the first word it wraps, a closing tag to
the last. `unmask` puts each at the translation of its anchor word (the alignment's target words of
that source word; a tag pair around the target words of all the words it wrapped), keeps the tags well
nested (a pair is clipped into its parent's target words and kept apart from its siblings), and puts a
span whose words have no translation next to the nearest one that has, with a warning: no span and no
word of the translation is ever dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import Enum
from typing import Callable, Sequence

from seq2seq.config.diagnostics import Diagnostic


class Role(str, Enum):
    POINT = "point"  # a non-translatable, an empty tag (<br/>) or a tag without its partner
    OPEN = "open"
    CLOSE = "close"


@dataclass(frozen=True)
class Span:
    """One protected span: its kind ("url", "email", "handle", "variable", "format", "code", "number",
    "tag", "comment", "entity"), its text as written, its role, its partner's index in `Masked.spans`
    (-1 for a POINT), and where it goes: before or after masked word `word` (`side`), separated from it
    by a space (`spaced`) or glued, and `inner`: inside the word's punctuation ("dog</b>.")."""

    kind: str
    text: str
    role: Role
    pair: int
    word: int
    side: str  # "before" | "after"
    spaced: bool
    inner: bool
    joined: bool = False  # a tag between two words that the masked text separates by a space ("one<br/>two")


@dataclass(frozen=True)
class Masked:
    """A sentence without its protected spans: `text` (what the engine translates) and `spans` (in
    source order; empty: nothing to restore, and `unmask` gives the target text as it is)."""

    source: str
    text: str
    spans: tuple[Span, ...]


_VOID = {"br", "img", "hr", "wbr", "input", "area", "col", "embed", "source", "meta", "link"}
_VERBATIM_ELEMENTS = "code|kbd|samp|var|script|style|pre"
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("code", re.compile(r"`[^`\n]+`")),
    ("url", re.compile(r"\b(?:(?:https?|ftp)://|www\.)[^\s<>\"'`]+[^\s<>\"'`.,;:!?)\]]")),
    ("email", re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)*\.[A-Za-z]{2,}\b")),
    ("handle", re.compile(r"(?<![\w@])@[A-Za-z0-9_]{2,}")),
    ("variable", re.compile(r"\$?\{\{?[^{}\s]*\}?\}")),
    ("format", re.compile(r"%(?:\(\w+\))?[-+#0]*\d*(?:\.\d+)?[sdifgeExXrcu](?![A-Za-z])")),
]
_NUMBER = ("number", re.compile(r"(?<![\w.,])[-+]?\d+(?:[.,:/-]\d+)*%?(?![\w])|(?<![\w.,])\d+(?=[A-Za-z])"))
_MARKUP: list[tuple[str, re.Pattern[str]]] = [
    ("comment", re.compile(r"<!--.*?-->", re.S)),
    ("code", re.compile(rf"<({_VERBATIM_ELEMENTS})\b[^>]*>.*?</\1\s*>", re.S | re.I)),
    ("tag", re.compile(r"<(?:\w+\b[^<>]*?\btranslate\s*=\s*[\"']?no\b)[^<>]*>")),  # resolved by _no_translate
    ("image", re.compile(r"!\[[^\]\n]*\]\([^)\s]*(?:\s+\"[^\"]*\")?\)")),
]
_ENTITY = ("entity", re.compile(r"&(?:[A-Za-z][A-Za-z0-9]*|#\d+|#[xX][0-9A-Fa-f]+);"))
_TAG = re.compile(r"</?([A-Za-z][\w:-]*)(?:\s+(?:[^<>\"']|\"[^\"]*\"|'[^']*')*)?\s*/?>")
_LINK = re.compile(r"\[(?=[^\[\]\n]*\]\()([^\[\]\n]*)(\]\([^()\s]*(?:\s+\"[^\"]*\")?\))")
_STRONG = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_EMPHASIS = re.compile(r"(?<![\w*])([*_])(?=[^\s*_])(.+?)(?<=[^\s*_])\1(?![\w*])")
_OPENING = "\"'([{„“«‹¿¡‚"
_CLOSING = "\"'.,;:!?)]}»›“”…‘’"


@dataclass
class _Raw:
    start: int
    end: int
    kind: str
    role: Role = Role.POINT
    pair: int = -1


def _find(text: str, markup: bool) -> list[_Raw]:
    """The protected spans of `text`, in order, none overlapping; tags paired (well-nested pairs only)."""
    view = list(text)
    found: list[_Raw] = []

    def take(kind: str, start: int, end: int, role: Role = Role.POINT) -> _Raw:
        raw = _Raw(start, end, kind, role)
        found.append(raw)
        view[start:end] = "\0" * (end - start)
        return raw

    def scan(kind: str, pattern: re.Pattern[str]) -> None:
        for m in pattern.finditer("".join(view)):
            if "\0" not in m.group(0):
                if kind == "tag":  # an element with translate="no": all of it, up to its end tag
                    end = _element_end(text, m)
                    take("code", m.start(), end)
                else:
                    take(kind, m.start(), m.end())

    if markup:
        for kind, pattern in _MARKUP:
            scan(kind, pattern)
        _pair_tags(view, take)  # before the URLs: an attribute's URL is part of its tag
        _pair_markdown(view, take, (_LINK,))  # and a link's target is part of its closing tag
        scan(*_ENTITY)  # (an entity inside an attribute, or a link's target, is part of its tag too)
    for kind, pattern in _PATTERNS:
        scan(kind, pattern)
    if markup:
        _pair_markdown(view, take, (_STRONG, _EMPHASIS))
    scan(*_NUMBER)
    found.sort(key=lambda r: r.start)
    _check_nesting(found)
    return found


def _element_end(text: str, start_tag: re.Match[str]) -> int:
    """The end of the element whose start tag is `start_tag` (its matching end tag, nesting counted;
    the start tag's end where it has none or closes itself)."""
    name = re.match(r"<(\w+)", start_tag.group(0))
    if name is None or start_tag.group(0).endswith("/>"):
        return start_tag.end()
    depth = 1
    for m in re.finditer(rf"<(/?){name.group(1)}\b[^>]*>", text[start_tag.end():]):
        depth += -1 if m.group(1) else 1
        if depth == 0:
            return start_tag.end() + m.end()
    return start_tag.end()


def _pair_tags(view: list[str], take: Callable[..., _Raw]) -> None:
    """HTML tags, paired by name (a void or self-closing tag, or one without its partner: a POINT)."""
    stack: list[tuple[str, _Raw]] = []
    for m in _TAG.finditer("".join(view)):
        if "\0" in m.group(0):
            continue
        name, tag = m.group(1).lower(), m.group(0)
        if tag.startswith("</"):
            names = [n for n, _ in stack]
            raw = take("tag", m.start(), m.end())
            if name in names:
                while stack:
                    n, opened = stack.pop()
                    if n == name:
                        opened.role, raw.role = Role.OPEN, Role.CLOSE
                        opened.pair, raw.pair = id(raw), id(opened)
                        break
        elif tag.endswith("/>") or name in _VOID:
            take("tag", m.start(), m.end())
        else:
            stack.append((name, take("tag", m.start(), m.end())))


def _pair_markdown(view: list[str], take: Callable[..., _Raw], patterns: tuple[re.Pattern[str], ...]) -> None:
    """Markdown links ("[" ... "](url)"), strong and emphasis markers, as tag pairs."""
    for pattern in patterns:
        for m in pattern.finditer("".join(view)):
            if pattern is _LINK:
                a, b = (m.start(), m.start() + 1), (m.start(2), m.end(2))
            else:
                a, b = (m.start(), m.start(2)), (m.end(2), m.end())
            if "\0" in "".join(view[a[0]:a[1]] + view[b[0]:b[1]]):
                continue
            opened, closed = take("tag", *a, role=Role.OPEN), take("tag", *b, role=Role.CLOSE)
            opened.pair, closed.pair = id(closed), id(opened)


def _check_nesting(found: list[_Raw]) -> None:
    """Partner ids -> indices; a pair that crosses another becomes two POINTs."""
    index = {id(r): k for k, r in enumerate(found)}
    for r in found:
        if r.role is not Role.POINT:
            r.pair = index[r.pair]
    stack: list[int] = []
    for k, r in enumerate(found):
        if r.role is Role.OPEN:
            stack.append(k)
        elif r.role is Role.CLOSE:
            if stack and stack[-1] == r.pair:
                stack.pop()
            else:
                found[r.pair].role, r.role = Role.POINT, Role.POINT
                found[r.pair].pair = r.pair = -1
                if r.pair in stack:
                    stack.remove(r.pair)


def unbroken(text: str, markup: bool = False) -> list[tuple[int, int, int]]:
    """Where a sentence boundary may not fall (`seq2seq.documents.sentences.split`'s keep): (start, end,
    shift_from) of each protected span (shift_from = end: never inside it) and of each tag pair, from its
    opening tag's start to its closing tag's end (shift_from: where its closing tag starts, so that a
    boundary found just before a closing tag moves after it)."""
    found = _find(text, markup)
    out = [(r.start, r.end, r.end) for r in found]
    out += [(r.start, found[r.pair].end, found[r.pair].start) for r in found if r.role is Role.OPEN]
    return out


def mask(text: str, markup: bool = False) -> Masked:
    """`text` without its protected spans (see the module docstring); markup: also inline tags, HTML
    comments and entities, and elements left untranslated (`<code>`, `translate="no"`)."""
    found = _find(text, markup)
    if not found:
        return Masked(text, text, ())
    out, at_of, glued = "", [], []  # the masked text; each span's offset in it; glued (left, right)
    pos = 0
    for r in found:
        out += text[pos:r.start]
        left = text[r.start - 1] if r.start > 0 else " "
        right = text[r.end] if r.end < len(text) else " "
        pos = r.end
        if out.endswith((" ", "\t")) and (right.isspace() or right in _CLOSING):
            out = out.rstrip(" \t")  # "visit URL now" -> "visit now"; "visit URL." -> "visit."
            if right.isspace() and not out:
                pos += 1
        elif not out and right.isspace():
            pos += 1
        if left.isalnum() and right.isalnum() and r.kind == "tag" and r.role is Role.POINT:
            out += " "  # <br/> between two words: they stay two words
        at_of.append(len(out) - (1 if out.endswith(" ") and left.isalnum() and right.isalnum() else 0))
        glued.append((not left.isspace(), not right.isspace()))
    out += text[pos:]
    lead = len(out) - len(out.lstrip())
    words = [(m.start() - lead, m.end() - lead) for m in re.finditer(r"\S+", out)]
    spans = tuple(_anchored(r, text[r.start:r.end], at - lead, g, words) for r, at, g in zip(found, at_of, glued))
    spans = tuple(replace(s, joined=True) if s.role is Role.POINT and s.kind == "tag" and g == (True, True)
                  and s.side == "after" and not s.inner else s for s, g in zip(spans, glued))
    return Masked(text, out.strip(), spans)


def _anchored(r: _Raw, written: str, at: int, glued: tuple[bool, bool], words: list[tuple[int, int]]) -> Span:
    """The span removed at offset `at` of the masked text, anchored to one of its `words` ((start, end))."""
    if not words:
        return Span(r.kind, written, r.role, r.pair, 0, "after", True, False)
    inside = [k for k, (a, b) in enumerate(words) if a < at < b]
    if inside:
        word = inside[0]
        side = "before" if r.role is Role.OPEN else "after"
        spaced = r.role is Role.POINT and not (glued[0] if side == "after" else glued[1])
        return Span(r.kind, written, r.role, r.pair, word, side, spaced, True)
    prev = [k for k, (_, b) in enumerate(words) if b <= at]
    nxt = [k for k, (a, _) in enumerate(words) if a >= at]
    if r.role is Role.OPEN:
        side = "before" if nxt else "after"
    elif r.role is Role.CLOSE:
        side = "after" if prev else "before"
    elif glued[0] and prev:
        side = "after"
    elif (glued[1] or r.kind == "number") and nxt:
        side = "before"
    else:
        side = "after" if prev else "before"
    word = prev[-1] if side == "after" else nxt[0]
    spaced = not (glued[0] if side == "after" else glued[1])
    return Span(r.kind, written, r.role, r.pair, word, side, spaced, False)


def _split_word(word: str) -> tuple[str, str, str]:
    """(leading punctuation, core, trailing punctuation) of a whitespace word."""
    a = 0
    while a < len(word) - 1 and word[a] in _OPENING:
        a += 1
    b = len(word)
    while b > a + 1 and word[b - 1] in _CLOSING:
        b -= 1
    return word[:a], word[a:b], word[b:]


_ORDERED = ("tag", "comment", "image", "code")  # spans that are nodes of a document's tree: kept in source order


def unmask(masked: Masked, target: str, alignment: Sequence[tuple[int, int]],
           line: int | None = None) -> tuple[str, list[Diagnostic]]:
    """`target` (the translation of `masked.text`) with the spans put back, and the warnings (a span
    placed without the alignment's help). alignment: (source word, target word) index pairs over the
    whitespace words of `masked.text` and `target`.

    Tags, comments, images and code keep their source order (a document's tree depends on it): where
    the alignment would put them in another order (the translation reorders the words they wrap), they
    are placed by a monotone alignment instead (source word i at target word i * target words / source
    words), which keeps the order and still puts each near its words' share of the sentence. Where even
    that cannot keep the order (a source with no words of its own, only spans), the spans follow the
    translation, in source order, with a warning."""
    out, notes = _put_back(masked, target, alignment, line)
    if not _in_order(out, masked.spans):
        sources, targets = len(masked.text.split()), len(target.split())
        monotone = [(i, min(targets - 1, i * targets // sources)) for i in range(sources)] if sources and targets else []
        out, notes = _put_back(masked, target, monotone, line)
    if not _in_order(out, masked.spans):
        out = target.rstrip() + "".join((" " if span.spaced else "") + span.text for span in masked.spans)
        notes = [Diagnostic("the spans could not be placed in their source order: put after the translation",
                            line, "spans", "span_unplaced")]
    return out, notes


def _in_order(text: str, spans: Sequence[Span]) -> bool:
    """Whether the spans of the kinds a tree is made of are found in `text` in their source order."""
    at = 0
    for span in spans:
        if span.kind in _ORDERED:
            found = text.find(span.text, at)
            if found < 0:
                return False
            at = found + len(span.text)
    return True


def _put_back(masked: Masked, target: str, alignment: Sequence[tuple[int, int]],
              line: int | None) -> tuple[str, list[Diagnostic]]:
    """`unmask` by one alignment."""
    notes: list[Diagnostic] = []
    if not masked.spans:
        return target, notes
    escaped = _escape if any(s.kind == "entity" for s in masked.spans) else (lambda w: w)
    words = [(m.start(), m.end()) for m in re.finditer(r"\S+", target)]
    n = len(words)
    targets: dict[int, list[int]] = {}
    for s_word, t_word in alignment:
        if 0 <= t_word < n:
            targets.setdefault(s_word, []).append(t_word)
    place: dict[int, tuple[int, str, bool]] = {}  # span -> (target word, side, inner); -1: at the end
    unplaced: list[int] = []

    def nearest(word: int, side: str) -> tuple[int, str] | None:
        for d in range(0, 1 + max([word] + list(targets))):
            for w, s in ((word - d, "after"), (word + d, "before")) if side == "after" else \
                    ((word + d, "before"), (word - d, "after")):
                if targets.get(w):
                    ts = targets[w]
                    return (max(ts), "after") if s == "after" else (min(ts), "before")
        return None

    for k, span in enumerate(masked.spans):
        if span.role is Role.POINT:
            found = nearest(span.word, span.side)
            if found is None or not targets.get(span.word):
                unplaced.append(k)
            if found is not None:
                place[k] = (found[0], found[1], span.inner and found[1] == span.side)
    _place_pairs(masked.spans, targets, n, place, unplaced)
    for k in unplaced:
        notes.append(Diagnostic(f"{masked.spans[k].text!r} could not be placed by the alignment: put next to "
                                "the nearest translated word", line, "spans", "span_unplaced"))
    slots: dict[tuple[int, str, bool], list[int]] = {}
    tail: list[int] = []
    for k in range(len(masked.spans)):
        if k in place and n:
            slots.setdefault(place[k], []).append(k)
        else:
            tail.append(k)
    out = target[:words[0][0]] if words else ""
    for t, (a, b) in enumerate(words):
        lead, core, trail = _split_word(target[a:b])
        out += (_put(masked, slots.get((t, "before", False), []), "before", place)
                + escaped(lead) + _put(masked, slots.get((t, "before", True), []), "before", place)
                + escaped(core) + _put(masked, slots.get((t, "after", True), []), "after", place) + escaped(trail)
                + _put(masked, slots.get((t, "after", False), []), "after", place))
        joined = any(masked.spans[k].joined for k in slots.get((t, "after", False), []))
        out += ("" if joined else target[b:words[t + 1][0]]) if t + 1 < n else target[b:]
    for k in tail:
        span = masked.spans[k]
        out += (" " if out and not out.endswith(" ") and span.spaced else "") + span.text
    return out, notes


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _put(masked: Masked, ks: list[int], side: str, place: dict[int, tuple[int, str, bool]]) -> str:
    """The spans `ks` of one slot, in an order that keeps tags well nested: before a word, points then
    opening tags outermost first; after it, closing tags innermost first, then points."""
    spans = masked.spans
    if side == "before":
        order = sorted(ks, key=lambda k: (spans[k].role is Role.OPEN,
                                          -place[spans[k].pair][0] if spans[k].role is Role.OPEN else 0, k))
        return "".join(spans[k].text + (" " if spans[k].spaced and spans[k].role is Role.POINT else "")
                       for k in order)
    empties = {k for k in ks if spans[k].role is Role.OPEN}  # an opening tag after a word: a pair left empty
    closes = sorted((k for k in ks if spans[k].role is Role.CLOSE and spans[k].pair not in empties),
                    key=lambda k: (-place[spans[k].pair][0], -spans[k].pair))
    rest = sorted(k for k in ks if spans[k].role is Role.POINT or k in empties)
    return "".join(spans[k].text for k in closes) + "".join(
        (" " if spans[k].spaced and spans[k].role is Role.POINT else "") + spans[k].text
        + (spans[spans[k].pair].text if k in empties else "") for k in rest)


def _place_pairs(spans: tuple[Span, ...], targets: dict[int, list[int]], n: int,
                 place: dict[int, tuple[int, str, bool]], unplaced: list[int]) -> None:
    """Target ranges of the tag pairs, well nested: each pair around the target words of the source words
    it wraps, clipped into its parent's range and kept after its earlier siblings' (see the module
    docstring); a pair left without words goes empty after the words before it (and is unplaced)."""
    children: dict[int, list[int]] = {-1: []}
    stack = [-1]
    for k, span in enumerate(spans):
        if span.role is Role.OPEN:
            children[stack[-1]].append(k)
            children[k] = []
            stack.append(k)
        elif span.role is Role.CLOSE and stack[-1] == span.pair:
            stack.pop()

    def wanted(k: int) -> tuple[int, int] | None:
        ts = [t for w in range(spans[k].word, spans[spans[k].pair].word + 1) for t in targets.get(w, [])]
        return (min(ts), max(ts)) if ts else None

    def fit(parent: int, lo: int, hi: int) -> None:
        kids = [(wanted(k), k) for k in children[parent]]
        kids.sort(key=lambda x: (x[0] if x[0] is not None else (hi + 1, hi + 1), x[1]))
        cursor = lo
        for want, k in kids:
            a, b = want if want is not None else (cursor, cursor)
            a, b = max(a, cursor), min(b, hi)
            if want is None or a > b:
                unplaced.append(k)
                if cursor <= hi and want is not None:
                    a = b = cursor
            if a > b or n == 0:  # no word left: an empty pair after the last word of the range
                w = max(min(cursor, hi), 0) if n else 0
                if n:
                    place[k] = place[spans[k].pair] = (min(hi, max(lo, w)), "after", False)
                continue
            place[k], place[spans[k].pair] = (a, "before", spans[k].inner), (b, "after", spans[spans[k].pair].inner)
            fit(k, a, b)
            cursor = b + 1

    fit(-1, 0, n - 1)
