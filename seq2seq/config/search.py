"""The `decoding` section of the config: how to search (`SearchConfig`).

Fields a user may set per call (a CLI option, a field of a server request, a keyword of
`Translator.translate`) carry `metadata["option"]`: their help text and, for `strategy`, the
switches that choose it. `seq2seq.inference.options` builds the CLI options and the server's
request fields from it and resolves a call's options against a model's defaults; this module
holds the data and the rules of a search, each in one place: which values combine (`check_search`,
for a config file and a call's options alike), the rows a source takes (`rows_per_source`), the
per-sentence length limit (`max_length`), the GNMT length penalty and score (`length_penalty`,
`score`) and that CTC rescoring needs a CTC head (`check_ctc_head`).
"""

from __future__ import annotations

import dataclasses

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, overload

from seq2seq.config.schema import ConfigError


def _option(default: Any, help: str, **extra: Any) -> Any:
    """A field that is also a per-call search option (`--flag-name` on the command line)."""
    return field(default=default, metadata={"option": {"help": help, **extra}})


@dataclass
class SearchConfig:
    """How to decode (the `decoding` section of the YAML config).

    strategy: "greedy", "beam" or "sample".
    beam: beam size (beam search only). nbest: hypotheses returned per source (<= beam for beam
    search, 1 for greedy, the number of independent samples for sampling).
    lenpen: GNMT length-penalty exponent alpha in score = logprob / ((5 + L) / 6) ** alpha.
    constraint_lenpen: the lenpen of the sentences that have constraints (None: `lenpen`); the others
    are searched with `lenpen`, exactly as without it (`constrained`).
    term_bias: with terms only annotated (`--terms annotate`), a bonus in nats added to the next piece of
    each term an output has not met yet (`seq2seq.inference.term_bias`): a push, not a guarantee; 0: off.
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

    def __post_init__(self) -> None:
        check_search(vars(self), where="decoding.")

    # ---- the search's rules, each written here only ---------------------------------------

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

    def length_penalty(self, length: int) -> float:
        """GNMT's ((5 + length) / 6) ** lenpen; length counts the EOS (see `score`)."""
        return length_penalty(length, self.lenpen)

    def score(self, logprob: Any, length: int, bonus: Any = None) -> Any:
        """The search score of a hypothesis of `length` predictions (its tokens and the EOS) and total
        log-probability `logprob` (a float, or a tensor of them): logprob / length_penalty(length). bonus (the
        same kind, None: none): what a control added to `logprob` (`decoding.term_bias`), which counts after
        the length penalty: (logprob - bonus) / length_penalty(length) + bonus."""
        if bonus is None:
            return logprob / self.length_penalty(length)
        return (logprob - bonus) / self.length_penalty(length) + bonus

    def check_ctc_head(self, training_ctc_weight: float, model: Any = None) -> None:
        """ctc_weight > 0 needs a CTC head, which only a model trained with training.ctc_weight > 0 has.
        ConfigError (a ValueError) when it is missing: for a config file (model None) saying how to
        fix it, for a call's options on the model directory `model` naming it."""
        if self.ctc_weight > 0 and not training_ctc_weight:
            if model is None:
                raise ConfigError(f"decoding.ctc_weight ({self.ctc_weight}) needs a CTC head: set "
                                  "training.ctc_weight > 0 (or decoding.ctc_weight: 0)")
            raise ConfigError(f"ctc_weight {self.ctc_weight}: {model} was trained without CTC "
                              "(training.ctc_weight 0), so it has no CTC head to rescore with")


def length_penalty(length: int, alpha: float) -> float:
    """GNMT: ((5 + length) / 6) ** alpha."""
    return ((5.0 + length) / 6.0) ** alpha


STRATEGIES = ("greedy", "beam", "sample")


def check_search(values: Mapping[str, Any], where: str = "") -> None:
    """ValueError for the first rule the decoding `values` (every `SearchConfig` field, by name) break:
    each field's range, and how strategy, beam, nbest and ctc_weight combine.

    The one validator of both a config file's `decoding` section (`SearchConfig.__post_init__`,
    where="decoding.") and a call's options (`seq2seq.inference.options.resolve_search`, where="":
    the options are named as the call gave them), so the two refuse the same values with the same
    message ("nbest (3) must be <= beam (2); ...").
    """

    def check(ok: bool, message: str) -> None:
        if not ok:
            raise ValueError(f"{where}{message}")

    v = values
    strategy, beam, nbest = v["strategy"], v["beam"], v["nbest"]
    check(strategy in STRATEGIES, f"strategy must be one of {STRATEGIES}, not {strategy!r}")
    check(beam >= 1, f"beam must be >= 1, got {beam}")
    check(nbest >= 1, f"nbest must be >= 1, got {nbest}")
    check(strategy != "beam" or nbest <= beam, f"nbest ({nbest}) must be <= beam ({beam}); pass a larger beam")
    check(strategy != "greedy" or nbest == 1,
          f"nbest={nbest}: greedy search gives one hypothesis; use beam search (beam >= {nbest}) or sampling")
    check(v["max_len"] is None or v["max_len"] >= 0, f"max_len must be >= 0, got {v['max_len']}")
    check(v["min_len"] >= 0, f"min_len must be >= 0, got {v['min_len']}")
    check(v["no_repeat_ngram"] >= 0, f"no_repeat_ngram must be >= 0, got {v['no_repeat_ngram']}")
    check(v["topk"] >= 0, f"topk must be >= 0, got {v['topk']}")
    check(0.0 < v["topp"] <= 1.0, f"topp must be in (0, 1], got {v['topp']}")
    check(v["temperature"] > 0.0, f"temperature must be > 0, got {v['temperature']}")
    check(v["term_bias"] >= 0.0 and math.isfinite(v["term_bias"]),
          f"term_bias must be a finite number >= 0, got {v['term_bias']}")
    check(0.0 <= v["ctc_weight"] <= 1.0, f"ctc_weight must be in [0, 1], got {v['ctc_weight']}")
    check(v["ctc_weight"] == 0.0 or strategy != "sample", "ctc_weight needs beam or greedy search, not sample")
    check(v.get("seed") is None or 0 <= v["seed"] < 2**63, f"seed must be between 0 and 2**63 - 1, got {v['seed']}")
