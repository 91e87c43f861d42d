"""The `decoding` section of the config: how to search (`SearchConfig`).

Fields a user may set per call (a CLI option, a field of a server request, a keyword of
`Translator.translate`) carry `metadata["option"]`: their help text and, for `strategy`, the
switches that choose it. `seq2seq.inference.options` builds the CLI options and the server's
request fields from it and resolves a call's options against a model's defaults; this module
holds the data and its own invariants only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


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
    max_len_a, max_len_b, max_len: the per-sentence length limit (see seq2seq.inference.search);
    max_len (optional) is a hard cap. min_len: EOS is forbidden before this many tokens.
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
        def check(ok: bool, message: str) -> None:
            if not ok:
                raise ValueError(f"decoding.{message}")

        strategies = ("greedy", "beam", "sample")
        check(self.strategy in strategies, f"strategy must be one of {strategies}, not {self.strategy!r}")
        check(self.beam >= 1, f"beam must be >= 1, got {self.beam}")
        check(self.nbest >= 1, f"nbest must be >= 1, got {self.nbest}")
        check(self.strategy != "beam" or self.nbest <= self.beam, f"nbest ({self.nbest}) must be <= beam ({self.beam})")
        check(self.strategy != "greedy" or self.nbest == 1, "nbest must be 1 for greedy search (use beam or sample)")
        check(self.max_len is None or self.max_len >= 0, f"max_len must be >= 0, got {self.max_len}")
        check(self.min_len >= 0, f"min_len must be >= 0, got {self.min_len}")
        check(self.no_repeat_ngram >= 0, f"no_repeat_ngram must be >= 0, got {self.no_repeat_ngram}")
        check(self.topk >= 0, f"topk must be >= 0, got {self.topk}")
        check(0.0 < self.topp <= 1.0, f"topp must be in (0, 1], got {self.topp}")
        check(self.temperature > 0.0, f"temperature must be > 0, got {self.temperature}")
        check(0.0 <= self.ctc_weight <= 1.0, f"ctc_weight must be in [0, 1], got {self.ctc_weight}")
        check(self.ctc_weight == 0.0 or self.strategy != "sample", "ctc_weight needs beam or greedy search, not sample")
