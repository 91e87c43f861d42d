"""Search options: which a call may set, the type each takes, and how they combine with a model's
decoding defaults (`resolve_search`: what a call may ask, on top of the rules a config file's
`decoding` section obeys too, `seq2seq.config.search.check_search`).

The options are the `SearchConfig` fields that carry `metadata["option"]`, plus the switches that
choose `strategy` (`greedy`, `sample`). The command line's search options (seq2seq.cli.common) and
the fields a server request may hold (seq2seq.serve.requests) are both built from `SEARCH_OPTIONS`,
and both hand what they were given to `resolve_search`: a field added to `SearchConfig` with an
`option` is an option everywhere, and the command line and the server accept and refuse the same
values with the same message. A value of 0 is a value like any other (`--lenpen 0`, `"seed": 0`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from seq2seq.config.search import SearchConfig

if TYPE_CHECKING:  # pragma: no cover
    from seq2seq.config.model_section import ModelConfig

SAMPLING_OPTIONS = ("topk", "topp", "temperature")
TYPE_NAMES = {int: "an integer", float: "a number", bool: "true or false"}


@dataclass(frozen=True)
class SearchOption:
    """One per-call option: `name` (keyword, request field), `flag` (--name-with-dashes), `type` (int,
    float, or bool for a switch) and `help`."""

    name: str
    type: type
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def _field_type(hint: object) -> type | None:
    """int, float or bool for a field's annotation (`int | None` is int); None for anything else."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] if typing.get_origin(hint) else [hint]
    return args[0] if len(args) == 1 and args[0] in (int, float, bool) and isinstance(args[0], type) else None


_HINTS = typing.get_type_hints(SearchConfig)
FIELD_TYPES: dict[str, type | None] = {f.name: _field_type(_HINTS[f.name]) for f in dataclasses.fields(SearchConfig)}


def _options() -> dict[str, SearchOption]:
    out: dict[str, SearchOption] = {}
    for f in dataclasses.fields(SearchConfig):
        meta = f.metadata.get("option")
        if meta is None:
            continue
        if "switches" in meta:  # strategy: chosen by switches (and by beam), not set by name
            out.update({name: SearchOption(name, bool, help) for name, help in meta["switches"].items()})
        else:
            kind = FIELD_TYPES[f.name]
            assert kind is not None, f"SearchConfig.{f.name}: an option is an int, float or bool field"
            out[f.name] = SearchOption(f.name, kind, meta["help"])
    return out


SEARCH_OPTIONS: dict[str, SearchOption] = _options()
SWITCHES = tuple(name for name, o in SEARCH_OPTIONS.items() if o.type is bool and name not in FIELD_TYPES)


def _show(value: object) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def check_type(name: str, value: object) -> Any:
    """`value` as the option `name` takes it (an int given for a float becomes a float); ValueError
    "beam must be an integer, got "5"" for a value of the wrong type, or a number that is not finite."""
    kind = SEARCH_OPTIONS[name].type if name in SEARCH_OPTIONS else FIELD_TYPES.get(name)
    if kind is None:
        return value
    ok = isinstance(value, bool) if kind is bool else (
        isinstance(value, numbers.Integral if kind is int else numbers.Real) and not isinstance(value, bool))
    if not ok:
        raise ValueError(f"{name} must be {TYPE_NAMES[kind]}, got {_show(value)}")
    if kind is float and isinstance(value, numbers.Real):  # (`ok`: it is)
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value}")
    elif kind is int and isinstance(value, numbers.Integral):  # (`ok`: it is)
        value = int(value)
    return value


MAX_STEP_LOGITS = 2**28  # decoder outputs (rows x target vocabulary) of one search step: 1 GiB in float32


def rows_per_source(cfg: SearchConfig) -> int:
    """Decoder rows one source takes in a search (`SearchConfig.rows_per_source`)."""
    return cfg.rows_per_source


def resolve_search(defaults: SearchConfig, overrides: Mapping[str, object],
                   model: ModelConfig | None = None) -> SearchConfig:
    """`defaults` (a model's `decoding` config) with the options `overrides` applied.

    overrides: SearchConfig fields and the switches `greedy`, `sample`; None (or a switch left False)
    keeps the default. The strategy: `greedy`, `sample`, or an explicit `strategy`; otherwise `beam`
    decides (1: greedy, > 1: beam search); otherwise the default. nbest is 1 for greedy search and
    must be <= beam for beam search (left unset it is capped there). model (a `ModelConfig`, when
    known): max_len is capped at model.max_positions - 1 and attention_layer must name one of its
    decoder layers. ValueError with a readable message for an unknown, mistyped or conflicting option.

    The checks, in order: what the call itself asks (unknown or mistyped options, switches that
    conflict, sampling options without sampling), then the values the config would have, where the
    `SearchConfig` is made (`check_search`, as a config file's are, with the same messages, the options
    named as given), then what the model allows (`SearchConfig.check_model`: token ids, attention_layer,
    min_len within max_positions; one source's step logits within `MAX_STEP_LOGITS`).
    """
    unknown = sorted(set(overrides) - set(FIELD_TYPES) - set(SWITCHES))
    if unknown:
        raise ValueError(f"unknown search option(s) {unknown}; valid: {sorted(set(FIELD_TYPES) | set(SWITCHES))}")
    options = {k: check_type(k, v) for k, v in overrides.items() if v is not None}
    _choose_strategy(options)
    strategy = options.get("strategy", defaults.strategy)
    if strategy == "greedy" and options.get("beam", 1) > 1:
        raise ValueError(f"greedy search conflicts with beam={options['beam']}")
    given = sorted(k for k in SAMPLING_OPTIONS if k in options)
    if given and strategy != "sample":
        raise ValueError(f"{', '.join(given)}: only for sampling; add sample=True (--sample)")

    nbest = options.get("nbest")
    if strategy == "greedy" and (nbest is None or nbest <= 1):  # (nbest > 1 is refused by check_search)
        options["nbest"] = 1
    elif strategy == "beam" and nbest is None:  # the default, capped at the beam
        options["nbest"] = min(defaults.nbest, options.get("beam", defaults.beam))
    cfg = SearchConfig(**{**vars(defaults), **options}, where="")  # a config file's rules, the options named as given
    if model is not None:
        cfg.check_model(model, where="")
        cfg = dataclasses.replace(cfg, max_len=cfg.length_cap(model.max_positions))
    rows, vocab = cfg.rows_per_source, getattr(model, "tgt_vocab_size", 1)
    if rows * vocab > MAX_STEP_LOGITS:  # one source's search step would not fit in memory
        name = "beam" if cfg.strategy == "beam" else "nbest"
        raise ValueError(f"{name} {rows} is too large for this model: {rows} rows x {vocab} target pieces of "
                         f"logits per step; at most {MAX_STEP_LOGITS // vocab}")
    return cfg


def _choose_strategy(options: dict[str, object]) -> None:
    """Replace the switches `greedy` and `sample` in `options` by the strategy they choose (in place);
    without them an explicit `strategy` stands, else a given beam decides (1: greedy, > 1: beam)."""
    greedy, sample = (options.pop(name, False) for name in ("greedy", "sample"))
    if greedy and sample:
        raise ValueError("choose one of greedy and sample (--greedy, --sample)")
    chosen = "greedy" if greedy else "sample" if sample else None
    if chosen is not None:
        if options.get("strategy", chosen) != chosen:
            raise ValueError(f"{chosen} conflicts with strategy={options['strategy']!r}")
        options["strategy"] = chosen
    elif "strategy" not in options and "beam" in options:
        beam = options["beam"]  # an int (`check_type`)
        options["strategy"] = "beam" if isinstance(beam, int) and beam > 1 else "greedy"
