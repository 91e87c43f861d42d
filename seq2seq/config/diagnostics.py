"""The project's error base and structured diagnostics: what is wrong, with which input, in which field.

Every error a user can cause (a bad config key, input line, data file, checkpoint, steering field ...)
is a `Seq2SeqError`: the command line prints its one-line message and exits with 1, the server answers
it with a status, never a traceback. Each carries a `Diagnostic`, which is also what a warning is:

    Diagnostic(message, line=3, field="constraints", code="unwritable")
    str(...) -> "line 3: the constraint 'Zyx' cannot be written ..."  (what a person reads)

`line` is the input's number as the call counts its inputs (`first_line` onward, from 1), None for
the call as a whole; `field` the steering field or option concerned; `code` a stable name a program
can test instead of the wording. The server names an input by its index (line - 1) in the request
("texts[2]") and answers each diagnostic as JSON (`as_json`), so no message is parsed back.
Lives at the bottom layer (with the config) so every layer can raise and warn with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Diagnostic:
    """One thing to tell the user about one input (or the whole call: `line` None); see the module docstring."""

    message: str
    line: int | None = None
    field: str | None = None
    code: str = "warning"

    def __str__(self) -> str:
        return self.message if self.line is None else f"line {self.line}: {self.message}"

    @property
    def index(self) -> int | None:
        """The input's 0-based index in a call numbered from line 1 (a server request)."""
        return None if self.line is None else self.line - 1

    def details(self) -> dict[str, str | int]:
        """{"code"}, with "field" and "index" where there are: what a program reads beside the message."""
        out: dict[str, str | int] = {"code": self.code}
        if self.field is not None:
            out["field"] = self.field
        if self.index is not None:
            out["index"] = self.index
        return out

    def as_json(self) -> dict[str, str | int]:
        """The details and the message (without the input's name: a result object holds its own warnings)."""
        return {"message": self.message, **self.details()}


Warn = Callable[[Diagnostic], None]  # where a call's warnings go (`seq2seq.text.lines.warn` logs them)


class ByInput:
    """A `Warn` that passes each warning on (`forward`) and keeps those about one input, by its index, for
    the input's result: `pop(index)` (the server's result objects and `translate --json` carry them)."""

    def __init__(self, forward: Warn) -> None:
        self.forward = forward
        self.notes: dict[int, list[Diagnostic]] = {}

    def __call__(self, diagnostic: Diagnostic) -> None:
        self.forward(diagnostic)
        if isinstance(diagnostic, Diagnostic) and diagnostic.index is not None:
            self.notes.setdefault(diagnostic.index, []).append(diagnostic)

    def pop(self, index: int) -> list[Diagnostic]:
        """The warnings about input `index` ([] for none), forgotten here."""
        return self.notes.pop(index, [])


class Seq2SeqError(Exception):
    """The base of every error a user can cause; its message is one line, naming the input, key or file.

    Raised as Error(message) for a message that says it all, or Error(message, line=3, field="prefix",
    code="too_long") for one input of a call: str(e) is then "line 3: message", and `e.diagnostic` has
    the parts (see the module docstring).
    """

    code = "error"  # the code of an error raised without one

    def __init__(self, message: str = "", *, line: int | None = None, field: str | None = None,
                 code: str | None = None) -> None:
        self.diagnostic = Diagnostic(message, line, field, code or self.code)
        super().__init__(str(self.diagnostic))
