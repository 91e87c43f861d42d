"""The JSON form of one input's steering, read by one parser for every front-end.

An input's steering fields are `prefix` (a string), `constraints` and `avoid` (lists of strings): a
line of the command line's `--json-input`, an item of a server request (and the request itself), and
the Python API's per-input arguments are all checked here, so they accept and refuse the same values
with the same message. A wrong shape is a `FieldError` naming the field as the caller spells it
(`where`: "input line 3: ", "texts[2]."): a string where a list is wanted ("avoid": "Hund" is not a
list of one phrase, nor of its characters), a dict, a number or true, and text that UTF-8 cannot
write (a lone surrogate such as "\\ud800", which JSON can spell).
"""

from __future__ import annotations

import json
from typing import Callable, TypedDict

from seq2seq.inference.controls import SteeringError

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


class SteeringFields(TypedDict):
    """An input's steering fields as read (None: absent or null)."""

    prefix: str | None
    constraints: list[str] | None
    avoid: list[str] | None


def read_steering_fields(fields: dict[str, object], where: str = "",
                         check: Callable[[str, str], None] = check_unicode) -> SteeringFields:
    """The steering fields popped from `fields` and checked: {"prefix": str | None, "constraints":
    list | None, "avoid": list | None} (None: absent or null)."""
    prefix = read_prefix(fields.pop("prefix", None), where, check)
    constraints = read_phrases("constraints", fields.pop("constraints", None), where, check)
    avoid = read_phrases("avoid", fields.pop("avoid", None), where, check)  # (PHRASE_FIELDS, in order)
    return {"prefix": prefix, "constraints": constraints, "avoid": avoid}
