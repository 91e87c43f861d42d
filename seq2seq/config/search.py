"""The `decoding` section of the config and a call's search options: how to search (`SearchConfig`).

Fields a user may set per call (a CLI option, a field of a server request, a keyword of
`Translator.translate`) carry `metadata["option"]`: their help text and, for `strategy`, the
switches that choose it. The command line's search options (seq2seq.cli.common) and the fields a
server request may hold (seq2seq.serve.requests) are both built from `SEARCH_OPTIONS`, and both hand
what they were given to `resolve_search` (a model's decoding defaults + a call's options ->
`SearchConfig`): a field added to `SearchConfig` with an `option` is an option everywhere, and the
command line, the server and a config file accept and refuse the same values with the same message.
A value of 0 is a value like any other (`--lenpen 0`, `"seed": 0`).

This module holds the data and the rules of a search, each in one place: an option's type
(`check_type`), which values combine (`check_search`, run where a `SearchConfig` is made, for a
config file and a call's options alike), what a call may ask on top (`resolve_search`: switches,
sampling options), the rows a source takes (`rows_per_source`), the per-sentence length limit
(`max_length`) and that CTC rescoring needs a CTC head (`check_ctc_head`). How a hypothesis is scored
(the GNMT length penalty, a control's bonus) is the search's rule, in `seq2seq.inference.search`.
"""
from __future__ import annotations

import dataclasses
import json
import math
import numbers
import typing
from collections.abc import Mapping
from dataclasses import InitVar, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeVar, overload

from seq2seq.config.checks import require
from seq2seq.config.diagnostics import Diagnostic

if TYPE_CHECKING:
    from seq2seq.config.model_section import ModelConfig

T = TypeVar("T")


def _option(default: T, help: str, switches: dict[str, str] | None = None) -> T:
    """A field that is also a per-call search option (`--flag-name` on the command line); `switches`:
    {name: help} of the boolean options that choose its value instead (`strategy`'s greedy and sample)."""
    option: dict[str, object] = {"help": help}
    if switches is not None:
        option["switches"] = switches
    return field(default=default, metadata={"option": option})


class SearchFields(TypedDict, total=False):
    """The fields of `SearchConfig` as keywords (`ModelDir.set_decoding`, a call's search options)."""

    strategy: Literal["greedy", "beam", "sample"]
    beam: int
    nbest: int
    lenpen: float
    constraint_lenpen: float | None
    term_bias: float
    max_len_a: float
    max_len_b: int
    max_len: int | None
    min_len: int
    no_repeat_ngram: int
    early_stopping: bool
    topk: int
    topp: float
    temperature: float
    seed: int | None
    attention_layer: int | None
    ctc_weight: float
    bos_id: int
    eos_id: int
    pad_id: int


class SearchOptions(SearchFields, total=False):
    """A call's search options (`resolve_search` checks their values): the
    fields of `SearchConfig` and the switches that choose its strategy."""

    greedy: bool
    sample: bool


@dataclass(frozen=True)
class SearchConfig:
    """How to decode (the `decoding` section of the YAML config).

    strategy: "greedy", "beam" or "sample".
    beam: beam size (beam search only). nbest: hypotheses returned per source (<= beam for beam
    search, 1 for greedy, the number of independent samples for sampling).
    lenpen: GNMT length-penalty exponent alpha in score = logprob / ((5 + L) / 6) ** alpha.
    constraint_lenpen: the lenpen of the sentences that have constraints (None: `lenpen`); the others
    are searched with `lenpen`, exactly as without it (`constrained`).
    term_bias: with terms only annotated (`--terms annotate`), a bonus in nats added to the next piece of
    each term an output has not met yet (`seq2seq.inference.controls.TermBias`): a push, not a guarantee; 0: off.
    max_len_a, max_len_b, max_len: the per-sentence length limit (`max_length`); max_len (optional)
    is a hard cap. min_len: EOS is forbidden before this many tokens.
    no_repeat_ngram: if n > 0, no n-gram occurs twice in a hypothesis.
    early_stopping (beam): True stops a sentence as soon as `beam` of its hypotheses have ended
    (fairseq's rule: the n-best is the best of those, and a longer hypothesis that the length
    penalty would have preferred may be missed). False keeps the beam going until no live
    hypothesis can beat the worst of the `beam` best finished ones even at its most favourable
    length (max_len when lenpen > 0) - exact with respect to the beam, and slower.
    topk (0 = off), topp (1.0 = off), temperature: sampling filters. seed: sampling seed (None =
    nondeterministic).
    attention_layer: when set, each hypothesis carries that decoder layer's head-averaged
    cross-attention (negative values count from the last layer).
    ctc_weight: w > 0 rescores each source's finished hypotheses, plus the CTC best path, with
    (1 - w) * attention + w * CTC log-probability (models trained with training.ctc_weight > 0;
    beam and greedy search; see seq2seq.inference.ctc).
    bos_id, eos_id, pad_id: special token ids.
    """

    strategy: Literal["greedy", "beam", "sample"] = _option(
        "beam", "The search strategy.",
        switches={"greedy": "Greedy search.", "sample": "Sample (see --topk, --topp, --temperature, --seed)."},
    )
    beam: int = _option(5, "Beam size (1 = greedy search).")
    nbest: int = _option(1, "Hypotheses per source (> 1: an n-best list).")
    lenpen: float = _option(1.0, "Length penalty exponent (GNMT).")
    constraint_lenpen: float | None = _option(
        None, "Length penalty of the sentences with constraints (default: --lenpen): forced terms lengthen "
              "an output, a lower one keeps it as long as without them.")
    term_bias: float = _option(
        0.0, "With --terms annotate: a bonus (nats) on the next piece of each term an output has not met yet, "
             "so that the model writes the term where it would write its own word (0: off; not a guarantee).")
    max_len_a: float = _option(1.2, "Max output length = a * source length + b.")
    max_len_b: int = _option(10, "See --max-len-a.")
    max_len: int | None = None
    min_len: int = _option(1, "EOS is forbidden before this many tokens.")
    no_repeat_ngram: int = _option(0, "No n-gram of this size occurs twice in a hypothesis (0: off).")
    early_stopping: bool = True
    topk: int = _option(0, "Sample from the k most likely tokens (0: all).")
    topp: float = _option(1.0, "Sample from the smallest set with probability >= p.")
    temperature: float = _option(1.0, "Sampling temperature.")
    seed: int | None = _option(None, "Sampling seed.")
    attention_layer: int | None = None
    ctc_weight: float = _option(0.0, "Rescore with the CTC head: (1 - w) attention + w CTC (models trained with CTC).")
    bos_id: int = 2
    eos_id: int = 3
    pad_id: int = 0
    # How messages name a field: "decoding." for a config file, "" for a call's options (named as given).
    where: InitVar[str] = "decoding."
    # The positions of the model the search runs on (None: not known): max_len is capped at what fits
    # after BOS, max_positions - 1 (`length_cap`).
    max_positions: InitVar[int | None] = None

    def __post_init__(self, where: str, max_positions: int | None) -> None:
        check_search(vars(self), where)
        if max_positions is not None:  # after the check: the cap is at most max_len and at least 1 (a model
            # has max_positions >= 2), so it breaks no rule, and a max_len out of range is refused as given
            object.__setattr__(self, "max_len", self.length_cap(max_positions))

    # ---- the search's rules, each written here only ---------------------------------------

    def check_model(self, model: ModelConfig, where: str = "decoding.") -> None:
        """ConfigError (a ValueError) where this search cannot run on a model whose `ModelConfig` is `model`:
        a token id outside its target vocabulary, an attention_layer it does not have, or a min_len longer
        than any output it can write (max_positions - 1 tokens after BOS). where: as in `check_search`. Run
        for a config file by `Config` (its `model` section) and for a call's options by `resolve_search`."""
        vocab = model.tgt_vocab_size
        for name in ("bos_id", "eos_id", "pad_id"):
            token = getattr(self, name)
            require(token < vocab, f"{where}{name} ({token}) is not in the target vocabulary of {vocab} pieces "
                                   f"(ids 0 to {vocab - 1})")
        layers = model.n_decoder_layers
        require(self.attention_layer is None or -layers <= self.attention_layer < layers,
                f"{where}attention_layer {self.attention_layer} does not exist: the decoder has {layers} layer(s)")
        cap = model.max_positions - 1  # (what the model can write; an explicit max_len below min_len wins over it)
        require(self.min_len <= cap, f"{where}min_len ({self.min_len}) is more than the longest output this model "
                                     f"can write ({cap} tokens: model.max_positions {model.max_positions} - 1): "
                                     "no output could end")

    def length_warnings(self, lengths: Mapping[int, int], max_positions: int, first_line: int = 1) -> list[Diagnostic]:
        """A warning for each source (lengths: {index: its positions}; line first_line + index) whose length
        limit (`max_length`) is 0 tokens, so its output is empty, or below min_len, so its output runs to the
        limit without an end of its own: the limit wins, and the search says so."""
        out = []
        for i, n in lengths.items():
            limit = self.max_length(n, max_positions)
            if limit == 0:
                why = (f"max_len {self.max_len}" if self.max_len == 0 else
                       f"max_len_a {self.max_len_a} x {n} source positions + max_len_b {self.max_len_b}")
                out.append(Diagnostic(f"its length limit is 0 tokens ({why}): its output is empty", first_line + i,
                                      "max_len" if self.max_len == 0 else "max_len_b", "empty_length_limit"))
            elif self.min_len > limit:
                out.append(Diagnostic(f"min_len {self.min_len} is more than its length limit of {limit} tokens: its "
                                      "output runs to the limit without an end of its own", first_line + i, "min_len",
                                      "min_len_over_limit"))
        return out

    @property
    def distinct_nbest(self) -> bool:
        """Does an n-best list hold distinct hypotheses? Beam and greedy search: yes. Sampling: no, its
        `nbest` samples are independent draws, each returned even when two coincide (as fairseq's
        `--sampling --nbest N` and Hugging Face's `num_return_sequences` do), so N samples come back."""
        return self.strategy != "sample"

    @property
    def rows_per_source(self) -> int:
        """Decoder rows one source takes in a search: its beam, its samples, or 1 (greedy)."""
        return self.beam if self.strategy == "beam" else self.nbest if self.strategy == "sample" else 1

    @overload
    def length_cap(self, max_positions: int) -> int: ...

    @overload
    def length_cap(self, max_positions: None = None) -> int | float: ...

    def length_cap(self, max_positions: int | None = None) -> int | float:
        """The most tokens any sentence may get: max_len (math.inf when unset) and, given a model's
        max_positions, what fits in its positions after BOS (max_positions - 1)."""
        cap = math.inf if self.max_len is None else self.max_len
        if max_positions is not None:
            cap = min(cap, max_positions - 1)  # BOS + max_len tokens must fit in the positions
        return cap

    def max_length(self, src_len: int, max_positions: int | None = None) -> int:
        """The length limit of a sentence whose source has src_len positions: floor(max_len_a * src_len
        + max_len_b) tokens, at most `length_cap(max_positions)`, at least 0."""
        limit = math.floor(self.max_len_a * src_len + self.max_len_b + 1e-6)
        return max(0, int(min(limit, self.length_cap(max_positions))))

    def constrained(self) -> SearchConfig:
        """The search of the sentences with constraints: `constraint_lenpen` as the lenpen, where set."""
        if self.constraint_lenpen is None:
            return self
        return dataclasses.replace(self, lenpen=self.constraint_lenpen, constraint_lenpen=None)

    def check_ctc_head(self, training_ctc_weight: float, model: object = None) -> None:
        """ctc_weight > 0 needs a CTC head, which only a model trained with training.ctc_weight > 0 has.
        ConfigError (a ValueError) when it is missing: for a config file (model None) saying how to
        fix it, for a call's options on the model directory `model` naming it."""
        missing = self.ctc_weight > 0 and not training_ctc_weight
        if model is None:
            require(not missing, f"decoding.ctc_weight ({self.ctc_weight}) needs a CTC head: set "
                                 "training.ctc_weight > 0 (or decoding.ctc_weight: 0)")
        else:
            require(not missing, f"ctc_weight {self.ctc_weight}: {model} was trained without CTC "
                                 "(training.ctc_weight 0), so it has no CTC head to rescore with")


STRATEGIES = ("greedy", "beam", "sample")

INT_LIMIT = 2**31 - 1  # the largest count or id a search takes (a torch int32 index)

# The documented range [low, high] of each numeric field (None: unbounded on that side); a float must
# also be finite. Wide enough for any real use, narrow enough that no arithmetic of the search
# overflows: ((5 + L) / 6) ** lenpen stays a float32 for every L a model can write, a temperature
# keeps logits / temperature finite, max_len_a * source length + max_len_b is an exact float.
RANGES: dict[str, tuple[float | None, float | None]] = {
    "beam": (1, INT_LIMIT), "nbest": (1, INT_LIMIT), "lenpen": (-10.0, 10.0), "constraint_lenpen": (-10.0, 10.0),
    "term_bias": (0.0, 100.0), "max_len_a": (0.0, 10_000.0), "max_len_b": (-1_000_000, 1_000_000),
    "max_len": (0, INT_LIMIT), "min_len": (0, INT_LIMIT), "no_repeat_ngram": (0, INT_LIMIT), "topk": (0, INT_LIMIT),
    "temperature": (1e-4, 1e4), "attention_layer": (-INT_LIMIT, INT_LIMIT),
    "bos_id": (0, INT_LIMIT), "eos_id": (0, INT_LIMIT), "pad_id": (0, INT_LIMIT),
}


def _shown(value: object) -> str:
    """A value for a message: a 400-digit integer as its first digits and its length."""
    text = str(value)
    return text if len(text) <= 24 else f"{text[:12]}... ({len(text)} characters)"


def check_search(values: Mapping[str, Any], where: str = "") -> None:
    """ValueError for the first rule the decoding `values` (every `SearchConfig` field, by name) break:
    each field's range (`RANGES`; floats finite), how strategy, beam, nbest and ctc_weight combine, and
    that the length limits let an output be written (max_len_a 0 with max_len_b <= 0 would make every
    output empty). The length limit wins over min_len where they conflict (an explicit max_len 0 gives
    empty outputs): a min_len over no more than the longest output a model can write is refused
    (`check_model`); over the limit of a source, or a limit of 0, is warned about for that source, where
    its length is known (`seq2seq.inference.translator`).

    The one validator, run where a `SearchConfig` is made (`SearchConfig.__post_init__`): for a config
    file's `decoding` section (where="decoding.") and for a call's options
    (`resolve_search`, where="": the options are named as the call gave them),
    so the two refuse the same values with the same message ("nbest (3) must be <= beam (2); ...").
    """

    def check(ok: bool, message: str) -> None:  # (a ValueError: `from_dict` names a config file's section before it)
        require(ok, f"{where}{message}", ValueError)

    v = values
    strategy, beam, nbest = v["strategy"], v["beam"], v["nbest"]
    check(strategy in STRATEGIES, f"strategy must be one of {STRATEGIES}, not {strategy!r}")
    check(0.0 < v["topp"] <= 1.0, f"topp must be in (0, 1], got {v['topp']}")
    check(v["temperature"] > 0.0, f"temperature must be > 0, got {v['temperature']}")
    check(v["term_bias"] >= 0.0 and math.isfinite(v["term_bias"]),
          f"term_bias must be a finite number >= 0, got {v['term_bias']}")
    check(0.0 <= v["ctc_weight"] <= 1.0, f"ctc_weight must be in [0, 1], got {v['ctc_weight']}")
    check(v.get("seed") is None or 0 <= v["seed"] < 2**63, f"seed must be between 0 and 2**63 - 1, got {v['seed']}")
    for name, (low, high) in RANGES.items():
        value = v[name]
        if value is None:
            continue
        check(not isinstance(value, float) or math.isfinite(value), f"{name} must be a finite number, got {value}")
        check(low is None or value >= low, f"{name} must be >= {low}, got {_shown(value)}")
        check(high is None or value <= high, f"{name} must be <= {high}, got {_shown(value)}")
    check(strategy != "beam" or nbest <= beam, f"nbest ({nbest}) must be <= beam ({beam}); pass a larger beam")
    check(strategy != "greedy" or nbest == 1,
          f"nbest={nbest}: greedy search gives one hypothesis; use beam search (beam >= {nbest}) or sampling")
    check(v["ctc_weight"] == 0.0 or strategy != "sample", "ctc_weight needs beam or greedy search, not sample")
    a, b = v["max_len_a"], v["max_len_b"]
    check(a > 0 or b > 0, f"max_len_a {a} and max_len_b {b} give every output a length limit of 0 tokens "
                          "(an empty output): give max_len_b >= 1 or max_len_a > 0")


# ---- a call's search options ------------------------------------------------------------------

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
    require(ok, f"{name} must be {TYPE_NAMES[kind]}, got {_show(value)}", ValueError)
    if kind is float and isinstance(value, numbers.Real):  # (`ok`: it is)
        value = float(value)
        require(math.isfinite(value), f"{name} must be a finite number, got {value}", ValueError)
    elif kind is int and isinstance(value, numbers.Integral):  # (`ok`: it is)
        value = int(value)
    return value


MAX_STEP_LOGITS = 2**28  # decoder outputs (rows x target vocabulary) of one search step: 1 GiB in float32


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
    require(not unknown, f"unknown search option(s) {unknown}; valid: {sorted(set(FIELD_TYPES) | set(SWITCHES))}",
            ValueError)
    options = {k: check_type(k, v) for k, v in overrides.items() if v is not None}
    _choose_strategy(options)
    strategy = options.get("strategy", defaults.strategy)
    require(strategy != "greedy" or options.get("beam", 1) <= 1,
            f"greedy search conflicts with beam={options.get('beam')}", ValueError)
    given = sorted(k for k in SAMPLING_OPTIONS if k in options)
    require(not given or strategy == "sample", f"{', '.join(given)}: only for sampling; add sample=True (--sample)",
            ValueError)

    nbest = options.get("nbest")
    if strategy == "greedy" and (nbest is None or nbest <= 1):  # (nbest > 1 is refused by check_search)
        options["nbest"] = 1
    elif strategy == "beam" and nbest is None:  # the default, capped at the beam
        options["nbest"] = min(defaults.nbest, options.get("beam", defaults.beam))
    # a config file's rules, the options named as given; max_len capped at the model's positions
    cfg = SearchConfig(**{**vars(defaults), **options}, where="",
                       max_positions=None if model is None else model.max_positions)
    if model is not None:
        cfg.check_model(model, where="")
    rows, vocab = cfg.rows_per_source, getattr(model, "tgt_vocab_size", 1)
    name = "beam" if cfg.strategy == "beam" else "nbest"
    require(rows * vocab <= MAX_STEP_LOGITS,  # one source's search step must fit in memory
            f"{name} {rows} is too large for this model: {rows} rows x {vocab} target pieces of "
            f"logits per step; at most {MAX_STEP_LOGITS // vocab}", ValueError)
    return cfg


def _choose_strategy(options: dict[str, object]) -> None:
    """Replace the switches `greedy` and `sample` in `options` by the strategy they choose (in place);
    without them an explicit `strategy` stands, else a given beam decides (1: greedy, > 1: beam)."""
    greedy, sample = (options.pop(name, False) for name in ("greedy", "sample"))
    require(not (greedy and sample), "choose one of greedy and sample (--greedy, --sample)", ValueError)
    chosen = "greedy" if greedy else "sample" if sample else None
    if chosen is not None:
        require(options.get("strategy", chosen) == chosen,
                f"{chosen} conflicts with strategy={options.get('strategy')!r}", ValueError)
        options["strategy"] = chosen
    elif "strategy" not in options and "beam" in options:
        beam = options["beam"]  # an int (`check_type`)
        options["strategy"] = "beam" if isinstance(beam, int) and beam > 1 else "greedy"
