"""The typed request every front-end builds: a list of inputs (`SourceInput`) and one `Call`.

An input is its source and its own steering, in one JSON form:

    "A man slices noodles."                                            (a string: no steering)
    {"text": "A man slices noodles.", "prefix": "Ein Mann", "constraints": ["Nudeln"], "avoid": ["Spaghetti"]}

A line of `translate --json-input`, an item of a server request's "texts" and an input of the Python
API's `Engine.translate_inputs` are read by one parser, `read_input`: the same values pass and the same are
refused, with the same message, naming the input as its front-end numbers it ("input line 3",
"texts[2]"). For an image or audio model, "text" is the file's path.

An input's steering fields are `prefix` (a string), `constraints` and `avoid` (lists of strings), each
declared once with its rules (`FIELD_RULES`: how it is read, how a call's value joins an input's, how it
goes with a line split into sentences or a recording into windows, how an engine that cannot honour it
refuses it), which the code below the front-ends reads instead of naming fields. They are read here by
one parser for every front-end (`read_steering_fields`; the server's request-wide fields too), so they
accept and refuse the same values with the same message. A wrong shape is a `FieldError`
naming the field as the caller spells it (`where`: "input line 3: ", "texts[2]."): a string where a
list is wanted ("avoid": "Hund" is not a list of one phrase, nor of its characters), a dict, a number
or true, and text that UTF-8 cannot write (a lone surrogate such as "\\ud800", which JSON can spell).
Steering given for every input of a call (the command line's --avoid, a server request's own fields)
joins each input's own by one rule, `SourceInput.with_shared`. The Python API's per-input lists
(`translate_nbest(texts, prefix=[...], constraints=[...])`, `SteeringLists`) are made inputs at once
(`source_inputs`); nothing below the front-ends takes steering in another shape than a `SourceInput`.

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
from typing import Any, Callable, Literal, Mapping, MutableMapping, Sequence, TypedDict, TypeVar

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


Check = Callable[[str, str], None]
"""A text's check, check(text, its name as the caller spells it): `check_unicode`, and the server's limits."""


def read_text(value: object, spelled: str, check: Check = check_unicode) -> str | None:
    """A text field (`prefix`): None (absent) or a string, checked by `check`; FieldError otherwise.
    spelled: the field as the caller names it ("texts[2].prefix")."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise FieldError(f"{spelled} must be a string, got {shown(value)}", spelled)
    check(value, spelled)
    return value


def read_phrases(value: object, spelled: str, check: Check = check_unicode) -> list[str] | None:
    """A phrase-list field (`constraints`, `avoid`): None (absent) or a list (or tuple) of strings, each
    checked by `check` (named "avoid[2]"); FieldError for anything else (a string, a dict, a number, a
    list holding a non-string). spelled: the field as the caller names it ("input line 3: avoid")."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise FieldError(f"{spelled} must be a list of strings, got {shown(value)}", spelled)
    for k, phrase in enumerate(value):
        check(phrase, f"{spelled}[{k}]")
    return list(value)


Parts = Literal["first", "each", "whole"]


@dataclass(frozen=True)
class FieldRule:
    """What one steering field of `SourceInput` is, declared beside it, so that the code that reads,
    merges, splits and refuses inputs does so for every field alike without naming one:

    read(value, spelled, check): its JSON value as every front-end reads it (None: absent), FieldError
      for a wrong one (`read_text`, `read_phrases`);
    parts: how it goes with a source split into parts (a line into its sentences,
      `seq2seq.documents.line_translation`; a recording into windows, `seq2seq.inference.generator`):
      "first" holds for the first part only, "each" for every part, "whole" for the whole source only
      (a line holding it is translated unsplit, with a note saying `unsplit_because`; a recording
      that needs more than one window is refused). Its encoded control (`SourceControls`) has the
      field's name, so a part's controls keep the fields that hold for it;
    shared: how a value given for every input of a call joins an input's own (`SourceInput.with_shared`):
      "one" (either's; both given is a FieldError), "joined" (the shared phrases, then the input's own
      not among them), None (an input's own only: not read at the call's level);
    refused_as: how an engine that cannot honour it names it in its one-line refusal
      (`seq2seq.inference.engine.Capabilities`);
    terms: its phrases are terms, which a model trained with terms reads on its source when terms are
      annotated (`seq2seq.inference.steering.term_mode`), not in its search."""

    read: Callable[[object, str, Check], object]
    parts: Parts
    shared: Literal["one", "joined"] | None
    refused_as: str
    unsplit_because: str = ""
    terms: bool = False


# Every steering field of an input, in the order they are read and merged (docs/decoding-controls.md).
FIELD_RULES: dict[str, FieldRule] = {
    "prefix": FieldRule(read_text, "first", "one", "a target prefix"),
    "constraints": FieldRule(read_phrases, "whole", "joined", "lexical constraints",
                             unsplit_because="which sentence a constraint belongs to is not known", terms=True),
    "avoid": FieldRule(read_phrases, "each", "joined", "banned phrases"),
}
STEERING_FIELDS = tuple(FIELD_RULES)
SHARED_FIELDS = tuple(name for name, rule in FIELD_RULES.items() if rule.shared is not None)
PHRASE_FIELDS = tuple(name for name, rule in FIELD_RULES.items() if rule.read is read_phrases)


def fields_for(parts: Parts) -> tuple[str, ...]:
    """The steering fields whose rule is `parts` ("first", "each" or "whole": `FieldRule.parts`)."""
    return tuple(name for name, rule in FIELD_RULES.items() if rule.parts == parts)


FieldValue = TypeVar("FieldValue")


def read_steering_fields(fields: MutableMapping[str, FieldValue], where: str = "", check: Check = check_unicode,
                         names: Sequence[str] = STEERING_FIELDS) -> SourceInput:
    """The steering fields `names` popped from `fields` and read by their rules (`FIELD_RULES`), as an
    input without text whose fields not given (or null) are None: an input's own fields, or (names
    `SHARED_FIELDS`) the steering a call gives all its inputs, for `SourceInput.with_shared`. `where`
    prefixes each field's name in messages ("texts[2].")."""
    # (each value of its field's type, as its rule's reader returns it)
    read: dict[str, Any] = {name: FIELD_RULES[name].read(fields.pop(name, None), f"{where}{name}", check) for name in names}
    return dataclasses.replace(SourceInput(""), **read)


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
        used), by the one rule of every front-end, each field by its `FieldRule.shared`: for a prefix
        ("one") either's (FieldError when both give one, naming this input's as `where` spells it, the
        other as `owner`'s), for `constraints` and `avoid` ("joined") the shared phrases first and then
        this input's own that are not among them; a field neither gives stays None, and an input's own
        field (no `shared` rule) stays as it is."""
        merged: dict[str, Any] = {}  # (each value of its field's type)
        for name, rule in FIELD_RULES.items():
            mine, common = getattr(self, name), getattr(shared, name)
            if rule.shared == "one":
                if common and mine:
                    raise FieldError(f"{where}{name} and {owner} {name} are both given; give one", f"{where}{name}")
                merged[name] = mine if common is None or mine else common
            elif rule.shared == "joined" and common is not None:
                merged[name] = common + [p for p in mine or [] if p not in common]
        return dataclasses.replace(self, **merged)

    def part(self, text: str, first: bool) -> SourceInput:
        """The input of one part of this one's source (a sentence of a line; `text`, the part's), its
        steering by each field's `FieldRule.parts`: a "first" field only on the `first` part, every other
        field on each (a "whole" field's source is not split: `whole_field`)."""
        if first:
            return dataclasses.replace(self, text=text)
        return dataclasses.replace(self, text=text, **dict.fromkeys(fields_for("first")))

    def whole_field(self) -> str | None:
        """The first field given (and not empty) that holds for the whole source only (`FieldRule.parts`
        "whole"): its source is not split into parts; None: none."""
        return next((name for name in fields_for("whole") if getattr(self, name)), None)

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
    return dataclasses.replace(read_steering_fields(fields, where, check), text=text)


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
        out.append(SourceInput(text, read_text(prefixes[i], f"{where}prefix"),
                               read_phrases(wanted[i], f"{where}constraints"), read_phrases(banned[i], f"{where}avoid")))
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


class SteeringLists(TypedDict, total=False):
    """The Python API's per-input steering lists (`Engine.translate_nbest`'s, `translate_lines`'), made
    inputs at once by `source_inputs`: one entry per input (avoid may also be one list of phrases for
    every input); None: not given."""

    prefix: Prefixes | None
    constraints: PhraseLists | None
    avoid: AvoidPhrases | None


class CallKeywords(CallOptions, SteeringLists, total=False):
    """The keywords of the Python API's calls (`Engine.translate`, `Engine.translate_inputs`): a `Call`'s
    fields, the per-input steering lists, the line number of the first input and where warnings go."""

    batch_tokens: int
    first_line: int
    warn: Warn | None
    skipped: dict[int, str] | None


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


def inputs_and_call(texts: Sequence[str], keywords: Mapping[str, Any], first_line: int = 1
                    ) -> tuple[list[SourceInput], Call]:
    """The inputs and the `Call` of a Python API call's texts and keywords: the per-input steering lists
    (`SteeringLists`) made inputs by `source_inputs`, every other keyword the call's (`call_of`)."""
    lists = {name: value for name, value in keywords.items() if name in SteeringLists.__annotations__}
    rest = {name: value for name, value in keywords.items() if name not in SteeringLists.__annotations__}
    return source_inputs(texts, **lists, first_line=first_line), call_of(rest)


def call_of(options: Mapping[str, Any]) -> Call:
    """The `Call` of a call's keywords (`CallKeywords` without the steering lists and `warn`): the
    `Call` fields by name, every other keyword a search option (`resolve_search` refuses an unknown one)."""
    fields = {k: v for k, v in options.items() if k in CALL_FIELDS}
    search: Any = {k: v for k, v in options.items() if k not in CALL_FIELDS}
    return Call(search, **fields)
