"""One input as every front-end takes it: its source and its own steering, in one JSON form.

    "A man slices noodles."                                            (a string: no steering)
    {"text": "A man slices noodles.", "prefix": "Ein Mann", "constraints": ["Nudeln"], "avoid": ["Spaghetti"]}

A line of `translate --json-input`, an item of a server request's "texts" and an input of the Python
API's `translate_inputs` are read by one parser, `read_input`: the same values pass and the same are
refused, with the same message, naming the input as its front-end numbers it ("input line 3",
"texts[2]"). The steering fields' shapes are `seq2seq.inference.steering_fields`'s. For an image or
audio model, "text" is the file's path.

    inputs = [SourceInput("A man slices noodles.", constraints=["Nudeln"]), SourceInput("A dog.")]
    translate_inputs(translator, inputs, beam=5)      # n-best lists, in input order
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from seq2seq.inference.controls import SteeringError
from seq2seq.inference.protocol import TranslationEngine
from seq2seq.inference.results import Translation
from seq2seq.inference.steering import Steering
from seq2seq.inference.steering_fields import STEERING_FIELDS, FieldError, check_unicode, read_steering_fields, shown

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
    def steering(self) -> Steering | None:
        """Its steering as the search takes it (None when no field is given)."""
        if self.prefix is None and self.constraints is None and self.avoid is None:
            return None
        return Steering(self.prefix or "", list(self.constraints or []), list(self.avoid or []))

    def as_json(self) -> dict[str, Any]:
        """The JSON form `read_input` reads back: "text" and the fields given."""
        out: dict[str, Any] = {"text": self.text}
        for name in STEERING_FIELDS:
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


def read_input(value: Any, name: str, sep: str = ".",
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


def steering_arguments(inputs: Sequence[SourceInput]) -> dict[str, list[Any]]:
    """The per-input steering arguments of `translate_nbest` for `inputs` (prefix, constraints, avoid:
    one entry per input, None where it has none); only the fields some input gives."""
    return {name: [getattr(x, name) for x in inputs] for name in STEERING_FIELDS
            if any(getattr(x, name) is not None for x in inputs)}


def translate_inputs(engine: TranslationEngine, inputs: Sequence[SourceInput | str | Mapping[str, Any]],
                     **options: Any) -> list[list[Translation]]:
    """n-best hypotheses of each input (a `SourceInput`, or its JSON form: a string or a dict), in
    input order, by any engine; `options`: `translate_nbest`'s other arguments (search options,
    glossary, terms, tgt_lang ...). An input of another form is a FieldError naming it ("inputs[2]")."""
    given = sorted(set(options) & set(STEERING_FIELDS))
    if given:
        raise SteeringError(f"{', '.join(given)} belong(s) to each input here (SourceInput.{given[0]}), "
                            "not to the call", field=given[0], code="bad_field")
    read = [x if isinstance(x, SourceInput) else read_input(x, f"inputs[{i}]") for i, x in enumerate(inputs)]
    arguments: dict[str, Any] = {**steering_arguments(read), **options}
    return engine.translate_nbest([x.text for x in read], **arguments)
