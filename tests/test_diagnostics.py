"""Structured diagnostics (seq2seq.config.diagnostics): one error base, and warnings and errors that name
their input, field and code for a program as well as in a line for a person."""

from __future__ import annotations

import pytest

from seq2seq.config.diagnostics import Diagnostic, Seq2SeqError
from seq2seq.inference.steering import SteeringError
from seq2seq.inference.inputs import FieldError


def test_a_diagnostic_reads_as_the_line_a_person_saw_and_holds_its_parts():
    d = Diagnostic("an empty constraint; give a word or phrase", line=3, field="constraints", code="empty_phrase")
    assert str(d) == "line 3: an empty constraint; give a word or phrase"
    assert d.index == 2
    assert d.details() == {"code": "empty_phrase", "field": "constraints", "index": 2}
    assert d.as_json() == {"message": "an empty constraint; give a word or phrase", **d.details()}
    whole = Diagnostic("early stopping is not available")
    assert str(whole) == "early stopping is not available" and whole.index is None
    assert whole.details() == {"code": "warning"}


def test_an_error_about_one_input_says_its_line_and_keeps_the_parts():
    e = SteeringError("the prefix 'x' holds ...", line=7, field="prefix", code="prefix_avoided")
    assert str(e) == "line 7: the prefix 'x' holds ..."
    assert e.diagnostic == Diagnostic("the prefix 'x' holds ...", 7, "prefix", "prefix_avoided")
    assert isinstance(e, Seq2SeqError) and isinstance(e, ValueError)  # `except ValueError` still catches it
    plain = SteeringError("terms must be one of annotate, constrain, both")
    assert str(plain) == "terms must be one of annotate, constrain, both" and plain.diagnostic.line is None
    assert plain.diagnostic.code == "error"
    with pytest.raises(Seq2SeqError, match="^texts\\[2\\].prefix must be a string"):
        raise FieldError("texts[2].prefix must be a string, got 3", "texts[2].prefix")
    assert FieldError("m", "avoid").diagnostic.details() == {"code": "bad_field", "field": "avoid"}


def test_every_error_class_of_the_package_is_a_seq2seq_error():
    """One base for the errors a user can cause: the command line turns each into one line and exit
    code 1 (`cli.common.user_errors`), the server into an answer with a status."""
    import importlib
    import inspect
    import pkgutil

    import seq2seq

    errors = {}
    for info in pkgutil.walk_packages(seq2seq.__path__, "seq2seq."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                errors[f"{info.name}.{name}"] = obj
    assert len(errors) >= 14, sorted(errors)
    outside = sorted(name for name, cls in errors.items() if not issubclass(cls, Seq2SeqError))
    assert not outside, f"errors not derived from Seq2SeqError: {outside}"
    for cls in errors.values():  # `except ValueError` (or RuntimeError) around the API still catches them
        assert issubclass(cls, (ValueError, RuntimeError)) or cls.__name__ in ("RequestError", "Seq2SeqError")
