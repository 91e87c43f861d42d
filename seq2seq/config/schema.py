"""The generic mapping between dataclasses and YAML/JSON dicts; it knows no particular section.

Every section of a config (model, data, tokenizer, training, decoding) is a plain dataclass
(`seq2seq.config.model_section`, `data_section`, `tokenizer_section`, `training_section`,
`seq2seq.config.search`). `from_dict` maps a nested dict onto one, refusing unknown keys (listing
the valid ones and suggesting the closest) and values of the wrong type (naming the dotted key).
`to_dict` is the inverse, so `from_dict(C, to_dict(c)) == c`.

A section whose concrete class depends on its content (e.g. `model.encoder`, parsed into the class
its `type` names) defines a classmethod `config_class(data, key) -> type`: the mapper calls it with
the section's dict and dotted key, and maps the dict onto the class it returns.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, TypeVar, overload

import yaml

from seq2seq.config import json_reader
from seq2seq.config.diagnostics import Seq2SeqError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")


class ConfigError(Seq2SeqError, ValueError):
    """A config problem a user can fix: the message names the key or file."""


# --------------------------------------------------------------------------------------------
# Generic dataclass <-> dict mapping
# --------------------------------------------------------------------------------------------


@overload
def to_dict(obj: DataclassInstance) -> dict[str, object]: ...
@overload
def to_dict(obj: object) -> object: ...
def to_dict(obj: object) -> object:
    """Dataclass (possibly nested) -> plain dict of YAML/JSON-safe values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def _type_name(tp: object) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: object, tp: object, key: str) -> object:
    """Check `value` against the annotation `tp`; convert only lossless cases (int -> float)."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin is typing.Union or origin is types.UnionType:
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError as e:
                errors.append(e)
        if len(errors) == 1:  # `X | None`: X's own error names the nested key and what is wrong with it
            raise errors[0]
        raise ConfigError(
            f"config key '{key}': expected {' or '.join(_type_name(a) for a in args)}, "
            f"got {type(value).__name__} {value!r}"
        )
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise ConfigError(f"config key '{key}': {value!r} is not one of {list(choices)}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config key '{key}': expected a list, got {type(value).__name__} {value!r}")
        (item_tp, *_) = typing.get_args(tp) or (Any,)
        return [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}': expected a mapping, got {type(value).__name__}")
        return dict(value)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}': expected a mapping, got {type(value).__name__} {value!r}")
        return from_dict(tp, value, prefix=f"{key}.")
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"config key '{key}': expected a number, got {type(value).__name__} {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"config key '{key}': expected an integer, got {type(value).__name__} {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"config key '{key}': expected true/false, got {type(value).__name__} {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"config key '{key}': expected a string, got {type(value).__name__} {value!r}")
        return value
    return value


def from_dict(cls: type[T], data: Mapping[str, object] | None, prefix: str = "") -> T:
    """Build dataclass `cls` (or the class its `config_class(data, key)` hook picks for `data`) from
    `data`, validating keys and types recursively."""
    data = data or {}
    if not isinstance(data, dict):
        raise ConfigError(f"config section '{prefix.rstrip('.') or '<root>'}' must be a mapping")
    pick = getattr(cls, "config_class", None)
    if pick is not None:
        cls = pick(data, prefix.rstrip("."))
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f" Did you mean '{prefix}{close[0]}'?" if close else ""
            raise ConfigError(
                f"unknown config key '{prefix}{key}'.{hint} Valid keys in "
                f"'{prefix.rstrip('.') or '<root>'}': {', '.join(sorted(fields))}"
            )
        kwargs[key] = _coerce(value, hints[key], f"{prefix}{key}")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:
        raise ConfigError(f"config section '{prefix.rstrip('.') or '<root>'}': {e}") from None


def parse_error(e: Exception) -> str:
    """What is wrong with a config file's text, on one line, with its line and column where known."""
    if isinstance(e, UnicodeDecodeError):
        return f"not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start})"
    mark = getattr(e, "problem_mark", None)  # a YAML syntax error
    if mark is not None:
        what = " ".join(str(getattr(e, "problem", None) or e).split())
        return f"line {mark.line + 1}, column {mark.column + 1}: {what}"
    return " ".join(str(e).split())


def load_dict(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON file into a dict, with a readable error on a bad or missing file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8")
        data = json_reader.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, RecursionError) as e:  # ValueError: not JSON, not UTF-8, 5,000 digits
        raise ConfigError(f"cannot parse config file {path}: {parse_error(e)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return data


def save(obj: object, path: str | Path) -> None:
    """Write a dataclass as YAML (or JSON when the suffix is .json)."""
    path = Path(path)
    data = to_dict(obj)
    text = json.dumps(data, indent=2) + "\n" if path.suffix == ".json" else yaml.safe_dump(data, sort_keys=False)
    path.write_text(text, encoding="utf-8")


def load(cls: type[T], path: str | Path) -> T:
    return from_dict(cls, load_dict(path))


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `section.key=value` strings (values parsed as YAML scalars) to a nested dict."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override '{item}' must look like section.key=value")
        dotted, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = data
        *parents, leaf = dotted.strip().split(".")
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override '{item}': '{p}' is not a section")
        node[leaf] = value
    return data

