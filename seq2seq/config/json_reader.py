"""`loads`: JSON text -> a value, where every way the text can be wrong is a `json.JSONDecodeError`.

Python's parser fails outside `JSONDecodeError` in two ways a user's input can reach: a number with
more digits than Python converts (`sys.get_int_max_str_digits()`, 4300: a ValueError) and arrays or
objects nested deeper than the interpreter's recursion limit (a RecursionError). `loads` turns both
into a `JSONLimitError`, a `JSONDecodeError` whose message is one line, so every reader of user JSON
(a config file, `--json-input`, a JSONL corpus, a server request) refuses them as it refuses any
other broken JSON, with its own message, and no caller needs to know of them.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, TypeAlias

from seq2seq.config.diagnostics import Diagnostic, Seq2SeqError


JSONValue: TypeAlias = "str | int | float | bool | None | list[JSONValue] | dict[str, JSONValue]"
"""Any value JSON holds, as `json.loads` returns it: code that reads one narrows it (`isinstance`) before use."""
JSONObject: TypeAlias = "dict[str, JSONValue]"
"""A JSON object: a request, a metadata file, a report."""


class JSONLimitError(json.JSONDecodeError, Seq2SeqError):
    """JSON that Python cannot hold: too many digits in a number, or (`nesting` True) arrays/objects
    nested too deeply. `msg` says which, in one line. A `json.JSONDecodeError` (callers that catch bad
    JSON catch it too) and a `Seq2SeqError` (a user's input)."""

    code = "json_limit"

    def __init__(self, msg: str, doc: str, pos: int, nesting: bool = False) -> None:
        json.JSONDecodeError.__init__(self, msg, doc, pos)
        self.diagnostic = Diagnostic(msg, None, None, self.code)
        self.nesting = nesting

    def __str__(self) -> str:
        return f"{self.msg} (line {self.lineno}, column {self.colno})"


def loads(text: str | bytes) -> Any:
    """`json.loads(text)`; `json.JSONDecodeError` for any text that is not JSON Python can hold."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        doc = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        depth, where = _deepest(doc)
        raise JSONLimitError(f"arrays/objects nested {depth} levels deep, more than Python's parser takes "
                             f"(about {sys.getrecursionlimit()})", doc, where, nesting=True) from None
    except ValueError:
        doc = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        limit = sys.get_int_max_str_digits()
        long_number = re.search(r"\d{%d,}" % (limit + 1), doc) if limit else None
        if long_number is None:  # not the digit limit (e.g. bytes that are not UTF-8): as json says it
            raise
        raise JSONLimitError(f"a number of {long_number.end() - long_number.start()} digits, more than the "
                             f"{limit} Python reads", doc, long_number.start()) from None


def _deepest(doc: str) -> tuple[int, int]:
    """(the deepest nesting of arrays/objects in `doc`, where it is first reached): a linear scan, run only
    after the parser gave up."""
    depth, deepest, where, in_string, escaped = 0, 0, 0, False, False
    for i, c in enumerate(doc):
        if in_string:
            escaped, in_string = (not escaped and c == "\\"), escaped or c != '"'
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > deepest:
                deepest, where = depth, i
        elif c in "]}":
            depth -= 1
    return deepest, where
