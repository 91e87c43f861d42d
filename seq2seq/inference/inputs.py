"""The typed request every front-end builds: a list of inputs (`SourceInput`) and one `Call`.

An input is its source and its own steering, in one JSON form:

    "A man slices noodles."                                            (a string: no steering)
    {"text": "A man slices noodles.", "prefix": "Ein Mann", "constraints": ["Nudeln"], "avoid": ["Spaghetti"]}

A line of `translate --json-input`, an item of a server request's "texts" and an input of the Python
API's `Engine.translate_inputs` are read by one parser, `read_input`: the same values pass and the same are
refused, with the same message, naming the input as its front-end numbers it ("input line 3",
"texts[2]"). For an image or audio model, "text" is the file's path.

An input's steering fields are `prefix` (a string), `constraints` and `avoid` (lists of strings), read
here by one parser for every front-end (`read_steering_fields`; the server's request-wide fields too),
so they accept and refuse the same values with the same message. A wrong shape is a `FieldError`
naming the field as the caller spells it (`where`: "input line 3: ", "texts[2]."): a string where a
list is wanted ("avoid": "Hund" is not a list of one phrase, nor of its characters), a dict, a number
or true, and text that UTF-8 cannot write (a lone surrogate such as "\\ud800", which JSON can spell).
Steering given for every input of a call (the command line's --avoid, a server request's own fields)
joins each input's own by one rule, `SourceInput.with_shared`.

    inputs = [SourceInput("A man slices noodles.", constraints=["Nudeln"]), SourceInput("A dog.")]
    translator.translate_inputs(inputs, beam=5)      # n-best lists, in input order

A `Call` holds what the call's inputs share: the search options (`SearchOptions`, resolved against the
model's defaults by the engine, `seq2seq.config.search.resolve_search`), the glossary, how terms
reach the model, the target language, the batch size and a recording's windows. `call_of` splits the
keywords of the Python API (`CallKeywords`) into one; `Engine.run(inputs, call)` decodes it.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, MutableMapping, Sequence, TypedDict, TypeVar

from typing_extensions import Unpack

from seq2seq.config.diagnostics import Warn
from seq2seq.config.search import SearchConfig, SearchOptions
from seq2seq.inference.controls import SteeringError
from seq2seq.inference.glossary import Glossary

# The Python API's per-input steering arguments, as `translate_nbest` takes them (one entry per input; `avoid` may
# also be one list of phrases for every input); None: not given.
Prefixes = Sequence[str | None]
PhraseLists = Sequence[Sequence[str] | None]
AvoidPhrases = Sequence[str] | Sequence[Sequence[str] | None]

T = TypeVar("T")


def per_input(name: str, values: Sequence[T] | None, n: int) -> list[T] | list[None]:
    """`values` as one entry per input (None: n Nones); SteeringError for a string or another length."""
    if values is None:
        return [None] * n
    if isinstance(values, str):
        raise SteeringError(f"{name} must be a list with one entry per input, not a string", field=name,
                            code="not_per_input")
    values = list(values)
    if len(values) != n:
        raise SteeringError(f"{name} has {len(values)} entries for {n} inputs; give one per input", field=name,
                            code="not_per_input")
    return values


STEERING_FIELDS = ("prefix", "constraints", "avoid")
PHRASE_FIELDS = ("constraints", "avoid")


class FieldError(SteeringError):
    """A steering field of the wrong shape or with text that is not valid Unicode; `diagnostic.field`
    names it as the caller spells it ("texts[2].prefix")."""

    code = "bad_field"

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message, field=field)


def shown(value: object, width: int = 80) -> str:
    """`value` as JSON would spell it, cut to `width` characters (for messages)."""
    try:
        return json.dumps(value)[:width]
    except (TypeError, ValueError):
        return repr(value)[:width]


def check_unicode(text: str, where: str) -> None:
    """FieldError for a string that UTF-8 cannot encode: a lone surrogate (\\ud800 to \\udfff)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise FieldError(f"{where} is not valid Unicode: character {e.start} is a lone surrogate "
                         f"({text[e.start].encode('unicode_escape').decode()}); send each character "
                         "as itself, or a surrogate pair", where) from None


def read_prefix(value: object, where: str = "", check: Callable[[str, str], None] = check_unicode) -> str | None:
    """A prefix field: None (absent) or a string, checked by `check(text, name)`; FieldError otherwise."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise FieldError(f"{where}prefix must be a string, got {shown(value)}", f"{where}prefix")
    check(value, f"{where}prefix")
    return value


def read_phrases(name: str, value: object, where: str = "",
                 check: Callable[[str, str], None] = check_unicode) -> list[str] | None:
    """A `constraints` or `avoid` field: None (absent) or a list (or tuple) of strings, each checked by
    `check(text, name)`; FieldError for anything else (a string, a dict, a number, a list holding a
    non-string)."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise FieldError(f"{where}{name} must be a list of strings, got {shown(value)}", f"{where}{name}")
    for k, phrase in enumerate(value):
        check(phrase, f"{where}{name}[{k}]")
    return list(value)


FieldValue = TypeVar("FieldValue")


class SteeringFields(TypedDict):
    """An input's steering fields as read (None: absent or null)."""

    prefix: str | None
    constraints: list[str] | None
    avoid: list[str] | None


def read_steering_fields(fields: MutableMapping[str, FieldValue], where: str = "",
                         check: Callable[[str, str], None] = check_unicode) -> SteeringFields:
    """The steering fields popped from `fields` and checked: {"prefix": str | None, "constraints":
    list | None, "avoid": list | None} (None: absent or null)."""
    prefix = read_prefix(fields.pop("prefix", None), where, check)
    constraints = read_phrases("constraints", fields.pop("constraints", None), where, check)
    avoid = read_phrases("avoid", fields.pop("avoid", None), where, check)  # (PHRASE_FIELDS, in order)
    return {"prefix": prefix, "constraints": constraints, "avoid": avoid}


INPUT_FIELDS = ("text", *STEERING_FIELDS)


@dataclass(frozen=True)
class SourceInput:
    """One input: its source (`text`: a sentence, or a file's path for an image or audio model) and
    its own steering: the output starts with `prefix`, holds each of `constraints` and none of
    `avoid` (None: not given, as [] or "" are; docs/decoding-controls.md)."""

    text: str
    prefix: str | None = None
    constraints: list[str] | None = field(default=None)
    avoid: list[str] | None = field(default=None)

    @property
    def steered(self) -> bool:
        """Does it ask for any steering (a field that is given and not empty)?"""
        return any(getattr(self, name) for name in STEERING_FIELDS)

    def with_shared(self, shared: SourceInput, where: str = "", owner: str = "the call's") -> SourceInput:
        """This input with the steering its call gives every input (`shared`'s fields; its text is not
        used), by the one rule of every front-end: the prefix of either (FieldError when both give one,
        naming this input's as `where` spells it, the other as `owner`'s), for `constraints` and `avoid` the
        shared phrases first and then this input's own that are not among them; a field neither gives
        stays None."""
        if shared.prefix and self.prefix:
            raise FieldError(f"{where}prefix and {owner} prefix are both given; give one", f"{where}prefix")

        def phrases(mine: list[str] | None, common: list[str] | None) -> list[str] | None:
            if common is None:
                return mine
            return common + [p for p in mine or [] if p not in common]

        prefix = self.prefix if shared.prefix is None or self.prefix else shared.prefix
        return dataclasses.replace(self, prefix=prefix, constraints=phrases(self.constraints, shared.constraints),
                                   avoid=phrases(self.avoid, shared.avoid))

    def as_json(self) -> dict[str, str | list[str]]:
        """The JSON form `read_input` reads back: "text" and the fields given."""
        out: dict[str, str | list[str]] = {"text": self.text}
        for name in STEERING_FIELDS:
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


def read_input(value: object, name: str, sep: str = ".",
               check: Callable[[str, str], None] = check_unicode) -> SourceInput:
    """One input in its JSON form: a string, or an object {"text": str} with any of the steering fields.

    name: how the caller calls it in messages ("texts[2]", "input line 3"); a field is named `name`,
    `sep` and the field ("texts[2].prefix", "input line 3: prefix"). check(text, its name): the text and
    every phrase's check (valid Unicode by default; the server adds its length limit). FieldError for
    anything else: another type, no "text" string, an unknown field, a steering
    field of the wrong shape.
    """
    where = f"{name}{sep}"
    if isinstance(value, str):
        check(value, name)
        return SourceInput(value)
    if not isinstance(value, Mapping):
        raise FieldError(f"{name} must be a string (or an object {{\"text\": ...}}), got {shown(value)}", name)
    fields = dict(value)
    text = fields.pop("text", None)
    if not isinstance(text, str):
        raise FieldError(f"{where}text must be a string, got {shown(text)}", f"{where}text")
    unknown = sorted(set(fields) - set(STEERING_FIELDS))
    if unknown:
        raise FieldError(f"{name} has unknown field(s) {', '.join(map(repr, unknown))}; an input may hold "
                         f"{', '.join(map(repr, INPUT_FIELDS))}", f"{where}{unknown[0]}")
    check(text, f"{where}text")
    read = read_steering_fields(fields, where, check)
    return SourceInput(text, read["prefix"], read["constraints"], read["avoid"])


def source_inputs(texts: Sequence[str], prefix: Prefixes | None = None, constraints: PhraseLists | None = None,
                  avoid: AvoidPhrases | None = None, first_line: int = 1) -> list[SourceInput]:
    """The inputs of the Python API's per-input lists (`translate_nbest`'s prefix=, constraints=, avoid=:
    one entry per text; avoid may also be one list of phrases for every text). SteeringError for a list
    that is not one per input, FieldError naming the line for an entry of the wrong shape."""
    prefixes = per_input("prefix", prefix, len(texts))
    wanted = per_input("constraints", constraints, len(texts))
    if avoid is not None and not isinstance(avoid, str) and all(isinstance(a, str) for a in avoid):
        banned: Sequence[object] = [list(avoid)] * len(texts)  # one list for every input
    else:
        banned = per_input("avoid", avoid, len(texts))
    out = []
    for i, text in enumerate(texts):
        where = f"line {first_line + i}: "
        out.append(SourceInput(text, read_prefix(prefixes[i], where), read_phrases("constraints", wanted[i], where),
                               read_phrases("avoid", banned[i], where)))
    return out


class CallOptions(SearchOptions, total=False):
    """A `Call`'s fields as keywords, besides batch_tokens (which its callers take as their own argument)."""

    glossary: Glossary | str | Path | None
    terms: str | None
    term_forms: str
    tgt_lang: str | None
    src_lang: str | None
    skip_bad: bool
    max_window_seconds: float | None
    timestamps: bool
    progress: bool


class CallKeywords(CallOptions, total=False):
    """The keywords of the Python API's calls (`Engine.translate`, `Engine.translate_inputs`): a `Call`'s
    fields, the per-input steering lists, the line number of the first input and where warnings go."""

    batch_tokens: int
    first_line: int
    warn: Warn | None
    skipped: dict[int, str] | None
    prefix: Prefixes | None
    constraints: PhraseLists | None
    avoid: AvoidPhrases | None


@dataclass(frozen=True)
class Call:
    """What a call's inputs share. search: its search options; glossary (a `Glossary` or its TSV file):
    its target terms become constraints of the inputs whose text holds their source terms; terms:
    "annotate", "constrain" or "both" (None: the model's default, `seq2seq.inference.steering.term_mode`);
    term_forms: "exact" or "inflected"; tgt_lang / src_lang: a multilingual model's languages;
    batch_tokens: padded source positions per batch (>= 1); skip_bad: a file that cannot be read gives
    [] and a warning; max_window_seconds, timestamps, progress: a `Transcriber`'s windows, their times
    and a progress bar. resolved: `search` as the engine that decodes the call resolves it
    (`Engine.search_config`), for a caller that resolved it already (the server, which checks a request
    before queueing it): the engine then takes it as it is; None: the engine resolves `search`."""

    search: SearchOptions = field(default_factory=lambda: SearchOptions())
    glossary: Glossary | str | Path | None = None
    terms: str | None = None
    term_forms: str = "exact"
    tgt_lang: str | None = None
    src_lang: str | None = None
    batch_tokens: int = 4000
    skip_bad: bool = False
    max_window_seconds: float | None = None
    timestamps: bool = False
    progress: bool = False
    resolved: SearchConfig | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.batch_tokens < 1:
            raise ValueError(f"batch_tokens must be >= 1, got {self.batch_tokens}")

    def searching(self, **search: Unpack[SearchOptions]) -> Call:
        """This call with the search options `search` set over its own (to be resolved again)."""
        return dataclasses.replace(self, search={**self.search, **search}, resolved=None)


CALL_FIELDS = tuple(f.name for f in dataclasses.fields(Call) if f.name not in ("search", "resolved"))


def call_of(options: Mapping[str, Any]) -> Call:
    """The `Call` of a call's keywords (`CallKeywords` without the steering lists and `warn`): the
    `Call` fields by name, every other keyword a search option (`resolve_search` refuses an unknown one)."""
    fields = {k: v for k, v in options.items() if k in CALL_FIELDS}
    search: Any = {k: v for k, v in options.items() if k not in CALL_FIELDS}
    return Call(search, **fields)
