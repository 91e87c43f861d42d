"""Search strategies: which (row, token) pairs continue a search step (see seq2seq.inference.search,
whose loop owns everything else).

* `Greedy`: each row takes its most likely token;
* `Beam`: the top 2*beam of the beam*V extensions of a sentence (as in fairseq), so that `beam`
  live hypotheses remain even when up to `beam` of the candidates end with EOS;
* `Sample`: each row draws its token after temperature, top-k and top-p (nucleus) filtering,
  from a `torch.Generator` seeded with `SearchConfig.seed`.

Shapes: U active units, g rows per unit (`Strategy.group`), B = U * g decoder rows, V vocabulary,
C candidates per unit.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from seq2seq.config.search import SearchConfig

NEG_INF = float("-inf")
BLOCK = 64  # columns per block of `row_topk`


def row_topk(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """`x.topk(k, dim=1)` of a wide x [B, V] (values best first, and their columns, [B, k] each), faster on
    a CPU: a row's k best values lie in the k blocks of BLOCK columns with the largest maxima (those k
    maxima are k values of the row at least as large as anything in another block), so one max per block,
    a top-k over the blocks and one over their k * BLOCK columns replace the top-k over V, which costs
    several times a pass over memory on a CPU. Among equal values the columns may differ from
    torch.topk's, whose order among ties is unspecified too.
    """
    b, v = x.shape
    blocks = v // BLOCK
    if x.device.type != "cpu" or blocks < 4 * k:
        return x.topk(k, dim=1)
    x = x.contiguous()
    maxima = x.as_strided((b, blocks, BLOCK), (x.stride(0), BLOCK, 1)).amax(dim=2)  # [B, blocks]
    best = maxima.topk(k, dim=1, sorted=False).indices  # [B, k]
    columns = (best[:, :, None] * BLOCK + torch.arange(BLOCK, device=x.device)).view(b, k * BLOCK)
    if blocks * BLOCK < v:  # the last columns, short of a block, are always candidates
        rest = torch.arange(blocks * BLOCK, v, device=x.device).expand(b, -1)
        columns = torch.cat([columns, rest], dim=1)
    values, where = x.gather(1, columns).topk(k, dim=1)
    return values, columns.gather(1, where)


class Candidates(NamedTuple):
    """A strategy's proposals for each unit, [U, C] each; C > g means sorted best first."""

    rows: Tensor  # row within the unit's group that is extended
    tokens: Tensor  # the token appended
    logprob: Tensor  # its log-probability
    scores: Tensor  # the cumulative log-probability of the extended hypothesis


class Strategy:
    """Chooses continuations. `group` rows per unit, `units_per_source` units per source,
    `candidates` proposals per unit (== group: one per row; > group: sorted, beam-style)."""

    group: int = 1
    units_per_source: int = 1
    candidates: int = 1

    def initial_scores(self, units: int, device: torch.device) -> Tensor:
        """Cumulative log-probabilities of the B = units * group rows before the first step."""
        return torch.zeros(units * self.group, device=device)

    def select(self, lprobs: Tensor, scores: Tensor) -> Candidates:
        """lprobs [B, V] (constrained log-probabilities), scores [B] -> Candidates [U, C]."""
        raise NotImplementedError


class Greedy(Strategy):
    """Each row takes its arg-max token."""

    def select(self, lprobs: Tensor, scores: Tensor) -> Candidates:
        logprob, tokens = lprobs.max(dim=-1, keepdim=True)  # [B, 1]
        return Candidates(torch.zeros_like(tokens), tokens, logprob, scores[:, None] + logprob)


class Beam(Strategy):
    """The 2 * beam best extensions of each sentence's beam (of beam * V), best first."""

    def __init__(self, beam: int) -> None:
        self.group = beam
        self.candidates = 2 * beam

    def initial_scores(self, units: int, device: torch.device) -> Tensor:
        # Only the first row of a beam is live at first, or the beam would hold `beam` copies.
        scores = torch.full((units, self.group), NEG_INF, device=device)
        scores[:, 0] = 0.0
        return scores.view(-1)

    def select(self, lprobs: Tensor, scores: Tensor) -> Candidates:
        b, v = lprobs.shape
        units, per_row = b // self.group, min(self.candidates, v)
        # A row's score adds the same amount to each of its tokens, so a sentence's best extensions are
        # among its rows' best `per_row` tokens: one top-k over [B, V], then one over those [U, g * per_row]
        # (not over a [U, g * V] sum, which costs a pass over memory more and a slower top-k).
        row_logprob, row_token = row_topk(lprobs, per_row)  # [B, per_row]
        total = (row_logprob + scores[:, None]).view(units, -1)
        top, index = total.topk(min(self.candidates, total.size(1)), dim=1)  # sorted, [U, C]
        rows = torch.div(index, per_row, rounding_mode="floor")
        tokens = row_token.view(units, -1).gather(1, index)
        logprob = row_logprob.view(units, -1).gather(1, index)
        return Candidates(rows, tokens, logprob, top)


class Sample(Strategy):
    """Each row samples from the filtered distribution softmax(lprobs / temperature)."""

    def __init__(self, cfg: SearchConfig, device: torch.device) -> None:
        self.units_per_source = cfg.nbest
        self.topk, self.topp, self.temperature = cfg.topk, cfg.topp, cfg.temperature
        self.generator = torch.Generator(device=device)
        if cfg.seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(cfg.seed)

    def select(self, lprobs: Tensor, scores: Tensor) -> Candidates:
        logits = lprobs if self.temperature == 1.0 else lprobs / self.temperature
        if 0 < self.topk < logits.size(-1):
            kth = row_topk(logits, self.topk)[0][:, -1:]
            logits = logits.masked_fill(logits < kth, NEG_INF)
        if self.topp < 1.0:
            logits = top_p_filter(logits, self.topp)
        tokens = torch.multinomial(logits.softmax(dim=-1), 1, generator=self.generator)  # [B, 1]
        logprob = lprobs.gather(1, tokens)
        return Candidates(torch.zeros_like(tokens), tokens, logprob, scores[:, None] + logprob)


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Keep the smallest set of most likely tokens whose probability reaches p (at least one).

    logits [B, V] -> [B, V] with the others set to -inf.
    """
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    probs = sorted_logits.softmax(dim=-1)
    before = probs.cumsum(dim=-1) - probs  # mass of the more likely tokens
    drop = before >= p
    drop[:, 0] = False  # the most likely token stays, even for a p that float32 rounds to 0 (1e-300)
    sorted_logits = sorted_logits.masked_fill(drop, NEG_INF)
    return torch.full_like(logits, NEG_INF).scatter(1, order, sorted_logits)


def make_strategy(cfg: SearchConfig, device: torch.device) -> Strategy:
    if cfg.strategy == "greedy":
        return Greedy()
    if cfg.strategy == "beam":
        return Beam(cfg.beam)
    return Sample(cfg, device)
