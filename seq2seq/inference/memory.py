"""The memory a search takes, estimated before it starts, and the memory it may take.

A search's memory grows with what a call asks (beam or samples, constraints, the lengths of its
sources and outputs) and what the model is (target vocabulary, width, decoder layers): a beam of
444,000 or 200 constraints in a beam of 201 would ask for tens of gigabytes and fail deep inside
torch after minutes. `check_search` (one source, before its batch is searched) and
`constraints_problem` (one input's constraints, where its steering is checked) compare the estimates
`search_bytes` and `tracker_bytes` with the budget (`search_memory`) and refuse what does not fit, in
one line naming the largest beam, sample count or constraint count that does (`SearchMemoryError`).

The budget: the environment variable SEQ2SEQ_SEARCH_MEMORY (bytes, or a size such as 8GB, 512MiB),
else half the memory free on the device when it is first asked (on a CPU the RAM available to the
process: MemAvailable, within a cgroup's limit; on CUDA the device's free memory). The estimates
count float32 and int64 tensors, and are upper bounds of the peak (measured: benchmarks/README.md).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch

from seq2seq.config.diagnostics import Seq2SeqError
from seq2seq.config.search import SearchConfig

if TYPE_CHECKING:  # pragma: no cover
    from seq2seq.config.model_section import ModelConfig

MEMORY_ENV = "SEQ2SEQ_SEARCH_MEMORY"
FREE_SHARE = 0.5  # of the memory free on the device, without SEQ2SEQ_SEARCH_MEMORY

# Copies of the step logits [rows, V] alive at once: the decoder's output, its log-softmax, the masked
# scores, the beam's scores + log-probabilities, the top-k's work (sampling: the sort's values and int64
# order, the softmax, the cumulative sum), in float32 words.
LOGIT_COPIES = 8
# Bytes per entry of a constrained step's [candidates, phrases, constraints] tables (int64 products, bool
# temporaries), set above the measured peak (benchmarks/README.md).
TRACKER_BYTES = 24

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12,
          "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


class SearchMemoryError(Seq2SeqError, ValueError):
    """A search that would take more memory than it may (a ValueError, as an option the model refuses)."""

    code = "search_memory"


def parse_size(text: str) -> int:
    """Bytes of a size written as 8000000000, 8GB, 7.5GiB or 512M; ValueError naming the variable otherwise."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match and _UNITS.get(match.group(2).lower())
    if not match or unit is None or float(match.group(1)) * unit < 1:
        raise SearchMemoryError(f"{MEMORY_ENV}={text!r}: give a size in bytes such as 8GB, 512MiB or 4000000000")
    return int(float(match.group(1)) * unit)


def gigabytes(n: float) -> str:
    return f"{n / 1e9:.3g} GB"


def search_memory(device: torch.device | str | None = None) -> tuple[int, str]:
    """(the bytes a search on `device` may take, where that number comes from, for messages)."""
    given = os.environ.get(MEMORY_ENV)
    if given is not None and given.strip():
        return parse_size(given), MEMORY_ENV
    device = torch.device(device or "cpu")
    free = _free_cuda(device.index) if device.type == "cuda" else _free_ram()
    return int(free * FREE_SHARE), f"half the memory free on {device.type}; set {MEMORY_ENV} to change it"


@functools.lru_cache(maxsize=None)
def _free_cuda(index: int | None) -> int:
    return torch.cuda.mem_get_info(index)[0]


@functools.lru_cache(maxsize=None)
def _free_ram() -> int:
    """Bytes of RAM this process may still take: MemAvailable, within the cgroup's limit (measured once)."""
    free = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                free = int(line.split()[1]) * 1024
    except OSError:
        pass
    if free is None:
        free = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    for limit_file, used_file in (("memory.max", "memory.current"),  # cgroup v2, then v1
                                  ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes")):
        try:
            limit, used = (Path("/sys/fs/cgroup", name).read_text().strip() for name in (limit_file, used_file))
        except OSError:
            continue
        if limit.isdigit() and used.isdigit():
            free = min(free, int(limit) - int(used))
        break
    return max(free, 0)


def search_bytes(cfg: SearchConfig, model: ModelConfig, sources: int, src_len: int, out_len: int, members: int = 1) -> int:
    """Peak bytes of a search of `sources` sources of `src_len` positions for up to `out_len` tokens each,
    with a model whose `ModelConfig` is `model` (an ensemble: `members` decoders): the step logits
    (`LOGIT_COPIES` x rows x V), each decoder layer's self-attention keys and values [rows, T, d_model]
    (and the copy a step's concatenation makes of one layer's), its cross-attention keys and values and the encoder's output
    [units, S, d_model], the rows' tokens and log-probabilities, and the alignments asked for."""
    rows = sources * cfg.rows_per_source
    units = sources * (cfg.nbest if cfg.strategy == "sample" else 1)
    steps, d, layers = out_len + 1, model.d_model, model.n_decoder_layers
    logits = LOGIT_COPIES * rows * model.tgt_vocab_size * 4
    self_attention = (layers * 2 + 2) * rows * steps * d * 4  # + 2: the copy a step's concatenation makes
    memory = (layers * 2 + 1) * units * src_len * d * 4
    activations = rows * (model.ffn_dim + 4 * d) * 4
    rows_kept = rows * steps * (8 + 4) * 2
    alignments = rows * steps * src_len * 4 * 2 if cfg.attention_layer is not None else 0
    return members * (logits + self_attention + memory + activations) + rows_kept + alignments


def tracker_bytes(beam: int, constraints: int, sources: int = 1) -> int:
    """Peak bytes of the constraint tracker's step for `sources` sources with `constraints` constraints
    each in a beam of `beam`: a unit's beam * (constraints + 4) candidates, each against every phrase
    and constraint (`seq2seq.inference.controls.ConstraintTracker.banks`)."""
    return sources * beam * (constraints + 4) * constraints * constraints * TRACKER_BYTES


def largest(fits: Callable[[int], bool], upto: int) -> int:
    """The largest n in [1, upto) with fits(n), 0 if none (fits is monotone: true, then false), by bisection."""
    low, high = 0, upto  # fits(high) is false; fits(low) is true, or low is 0
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def check_search(cfg: SearchConfig, model: ModelConfig, src_len: int, out_len: int, members: int = 1,
                 device: torch.device | str | None = None) -> None:
    """SearchMemoryError when one source of `src_len` positions and an output of up to `out_len` tokens
    (the longest of a call) would take more than `search_memory(device)`, naming the largest beam (or
    number of samples) that fits."""
    budget, origin = search_memory(device)
    need = search_bytes(cfg, model, 1, src_len, out_len, members)
    if need <= budget:
        return
    name = "nbest" if cfg.strategy == "sample" else "beam"
    value = getattr(cfg, name)

    def fits(n: int) -> bool:
        smaller = (dataclasses.replace(cfg, nbest=n) if name == "nbest" else
                   dataclasses.replace(cfg, beam=n, nbest=min(cfg.nbest, n)))
        return search_bytes(smaller, model, 1, src_len, out_len, members) <= budget

    most = largest(fits, value)
    advice = f"at most {name} {most}" if most else "not even a beam of 1: give a larger budget or shorter outputs"
    raise SearchMemoryError(f"{name} {value} needs about {gigabytes(need)} to translate a source of {src_len} "
                            f"positions into up to {out_len} tokens; the search may take {gigabytes(budget)} "
                            f"({origin}): {advice}", field=name)


def constraints_problem(beam: int, constraints: int, device: torch.device | str | None = None) -> str | None:
    """Why tracking `constraints` constraints in a beam of `beam` cannot be done within
    `search_memory(device)`, naming the largest count that fits; None when it can."""
    budget, origin = search_memory(device)
    need = tracker_bytes(beam, constraints)
    if need <= budget:
        return None
    most = largest(lambda n: tracker_bytes(beam, n) <= budget, constraints)
    return (f"{constraints} constraints in a beam of {beam} are too many to track (about {gigabytes(need)} a step; "
            f"the search may take {gigabytes(budget)}: {origin}): give at most {most} constraints in this beam, "
            "or a smaller beam")


def sources_that_fit(cfg: SearchConfig, model: ModelConfig, longest: int, members: int = 1,
                     device: torch.device | str | None = None) -> int:
    """How many sources of `longest` positions one batch may search within `search_memory(device)`, at least
    1; SearchMemoryError (`check_search`) when not even one does: refused before anything is allocated."""
    out_len = cfg.max_length(longest, model.max_positions)
    check_search(cfg, model, longest, out_len, members, device)
    budget, _ = search_memory(device)
    return max(1, budget // search_bytes(cfg, model, 1, longest, out_len, members))
