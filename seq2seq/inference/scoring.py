"""Forced decoding: the log-probability a model gives to a given translation of each source.

    from seq2seq import Translator
    from seq2seq.inference.scoring import score_pairs
    t = Translator.load("runs/quickstart/model")
    score_pairs(t, ["A man rides a bike."], ["Ein Mann fährt Fahrrad."])[0].logprob   # -> -3.21

What `fairseq-generate --score-reference` and `marian-scorer` compute: each target is tokenized by the
model's target tokenizer, EOS appended, and the decoder is run once over it with teacher forcing (no
search); a token's log-probability is the fp32 log-softmax of its step's logits at temperature 1, the
quantity the search reports (`seq2seq.inference.search`), so the score of the model's own greedy or
beam output equals the `logprob` that `translate --json` prints for it. The sources are prepared as
`Translator.translate_nbest` prepares them (the model's `SourceProcessor`: tokenized, truncated to the
model's positions, a multilingual model's language tag put on the source or forced on the decoder, as
its config says; `tgt_lang` chooses it) and grouped into token-bounded batches by `length_batches`.

Counting: `n_tokens` is the number of scored predictions, the target's pieces plus EOS (a forced
language tag is given, not predicted: it is neither scored nor counted, as in the search's `logprob`);
`logprob` is the sum of `token_logprobs`, `normalized` their mean. An empty target scores EOS alone. A
pair whose source has no example (an empty line) is not scored: `logprob` -inf, `n_tokens` 0, and a
warning naming its line. A target longer than the decoder's positions is cut to what fits (as the
search cuts its output there), with a warning naming the line, and marked `truncated`.

Both directions of a pair, for dual conditional cross-entropy (`seq2seq.data.dcce`): `dual_scores`, and
`DualScorer`, the scorer a `DualCrossEntropyFilter` calls.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import torch
import torch.nn.functional as F

from seq2seq.accel.device import autocast_context
from seq2seq.config.clean_section import CleanConfig
from seq2seq.config.diagnostics import Diagnostic, Seq2SeqError, Warn
from seq2seq.data.batching import length_batches, make_target, to_device
from seq2seq.data.dcce import DcceScore, DualCrossEntropyFilter
from seq2seq.config.search import MAX_STEP_LOGITS
from seq2seq.inference.protocol import SearchableModel

if TYPE_CHECKING:  # pragma: no cover
    from seq2seq.inference.translator import Translator

log = logging.getLogger(__name__)

__all__ = ["DualScorer", "PairScore", "ScoringError", "dcce_filter", "dual_scores", "register_model_filters", "score_ids",
           "score_pairs"]


class ScoringError(Seq2SeqError, ValueError):
    """A scoring call that cannot be made as asked (sources and targets of different counts)."""

    code = "scoring"


@dataclass(frozen=True)
class PairScore:
    """The model's score of one (source, target) pair.

    logprob: the target's total log-probability given the source (natural log; -inf when not scored);
    n_tokens: the scored predictions, target pieces + EOS (0 when not scored); token_logprobs: one per
    prediction, EOS last; pieces: the target's pieces as scored (without EOS); truncated: the target was
    cut to the decoder's positions; skipped: why the pair was not scored (None: it was).
    """

    logprob: float
    n_tokens: int
    token_logprobs: tuple[float, ...]
    pieces: tuple[str, ...] = ()
    truncated: bool = False
    skipped: str | None = None

    @property
    def normalized(self) -> float:
        """The mean log-probability per prediction (logprob / n_tokens; -inf when not scored)."""
        return self.logprob / self.n_tokens if self.n_tokens else -math.inf

    @property
    def cross_entropy(self) -> float:
        """The per-token cross-entropy in nats, -normalized (inf when not scored): dual conditional
        cross-entropy's H (`seq2seq.data.dcce`)."""
        return -self.normalized

    def to_json(self) -> dict[str, object]:
        """What `score --json` prints: logprob and normalized (null when not scored), n_tokens, tokens and
        token_logprobs (rounded to 4 decimals), and "truncated" / "skipped" where they apply."""
        scored = self.skipped is None
        out: dict[str, object] = {
            "logprob": round(self.logprob, 4) if scored else None,
            "normalized": round(self.normalized, 4) if scored else None,
            "n_tokens": self.n_tokens,
            "tokens": list(self.pieces),
            "token_logprobs": [round(x, 4) for x in self.token_logprobs],
        }
        if self.truncated:
            out["truncated"] = True
        if not scored:
            out["skipped"] = self.skipped
        return out


def score_pairs(translator: Translator, srcs: Sequence[str], tgts: Sequence[str], batch_tokens: int = 4000,
                *, first_line: int = 1, warn: Warn | None = None, tgt_lang: str | None = None) -> list[PairScore]:
    """The score of each (srcs[i], tgts[i]) pair, in input order (see the module docstring): each target
    stripped and tokenized by the model's target tokenizer (its one, deterministic segmentation, as the
    training data had), then `score_ids`.

    batch_tokens: padded positions per batch, counting each pair as the longer of its source and its
    target (+ EOS). first_line: the line number of the first pair, for warnings (a caller streaming a
    file in chunks passes its position). warn: where warnings go (default: this module's logger).
    tgt_lang: a multilingual model's target language (LanguageError, a ValueError, as for `translate`).
    ScoringError when srcs and tgts differ in length.
    """
    if len(srcs) != len(tgts):
        raise ScoringError(f"{len(srcs)} sources but {len(tgts)} targets: give one target per source")
    ids = translator.tokenizers.tgt.encode([t.strip() for t in tgts])
    return score_ids(translator, srcs, ids, batch_tokens, first_line=first_line, warn=warn, tgt_lang=tgt_lang)


def score_ids(translator: Translator, srcs: Sequence[str], targets: Sequence[Sequence[int]], batch_tokens: int = 4000,
              *, first_line: int = 1, warn: Warn | None = None, tgt_lang: str | None = None) -> list[PairScore]:
    """As `score_pairs`, of targets given as target token ids (without BOS, EOS or a forced language tag):
    e.g. a hypothesis's `token_ids` as the search made them, which may be a segmentation the tokenizer
    would not make of its text."""
    if len(srcs) != len(targets):
        raise ScoringError(f"{len(srcs)} sources but {len(targets)} targets: give one target per source")
    if batch_tokens < 1:
        raise ValueError(f"batch_tokens must be at least 1, got {batch_tokens}")
    say = warn or log.warning
    processor = translator.processor_for(tgt_lang)
    forced = translator.decoder_prefix_ids(tgt_lang)
    given = len(forced)
    examples = processor.prepare(list(srcs), first_line, say)
    tokenizer = translator.tokenizers.tgt
    model: SearchableModel = translator.model  # one model or an ensemble (whose decode mixes its members')
    # BOS + forced tag + pieces must fit the decoder's positions (EOS is predicted at the last one), as
    # the search's length cap (`SearchConfig.length_cap`) keeps its outputs
    room = model.cfg.max_positions - 1 - given
    vocab = translator.config.model.tgt_vocab_size
    keys = sorted(examples)
    cut: dict[int, list[int]] = {}
    truncated: set[int] = set()
    for k in keys:
        ids = [int(t) for t in targets[k]]
        wrong = next((t for t in ids if not 0 <= t < vocab), None)
        if wrong is not None:
            raise ScoringError(f"target token id {wrong} is not in the model's {vocab}-piece target vocabulary",
                               line=first_line + k, field="target", code="unknown_token")
        if len(ids) > room:
            say(Diagnostic(f"{len(ids)} target tokens, cut to the model's limit of {room} (the rest is not scored)",
                           first_line + k, "target", "target_truncated"))
            ids = ids[:room]
            truncated.add(k)
        cut[k] = ids
    results: dict[int, PairScore] = {}
    for k in range(len(srcs)):
        if k not in examples:
            say(Diagnostic("an empty source: the pair is not scored", first_line + k, "source", "empty_source"))
            results[k] = PairScore(-math.inf, 0, (), skipped="empty source")
    lengths = {k: max(processor.length(examples[k]), given + len(cut[k]) + 1) for k in keys}
    longest = max((given + len(ids) + 1 for ids in cut.values()), default=1)
    rows = max(1, MAX_STEP_LOGITS // (longest * vocab))  # the batch's logits [rows, T, V] within the search's bound
    autocast = "bf16" if translator.precision == "bf16" else "fp32"
    cfg = translator.defaults
    # in eval mode (no dropout) and restored, as `search` runs it: an ensemble's members are left in
    # training mode by a search that restores the ensemble's own (True) flag
    was_training = model.training
    model.eval()
    try:
        for batch in length_batches(lengths, batch_tokens, rows):
            src = to_device(processor.collate([examples[k] for k in batch]), translator.device)
            tgt_in, tgt_out = make_target([[*forced, *cut[k]] for k in batch], cfg.pad_id, cfg.bos_id, cfg.eos_id)
            tgt_in, tgt_out = tgt_in.to(translator.device), tgt_out.to(translator.device)
            with torch.inference_mode(), autocast_context(translator.device, autocast):
                memory, pad_mask = model.encode(src)
                logits, _ = model.decode(tgt_in, memory, pad_mask, None)
                # the search's log-softmax (fp32, temperature 1), at the given tokens only
                lprobs = F.log_softmax(logits.float(), dim=-1).gather(2, tgt_out.unsqueeze(2)).squeeze(2)
            for k, row in zip(batch, lprobs.cpu().tolist()):
                ids = cut[k]
                token_logprobs = tuple(row[given: given + len(ids) + 1])
                results[k] = PairScore(math.fsum(token_logprobs), len(token_logprobs), token_logprobs,
                                       tuple(tokenizer.id_to_piece(t) for t in ids), k in truncated)
    finally:
        model.train(was_training)
    return [results[k] for k in range(len(srcs))]


def dual_scores(forward: Translator, backward: Translator, srcs: Sequence[str], tgts: Sequence[str],
                batch_tokens: int = 4000, *, first_line: int = 1, warn: Warn | None = None,
                tgt_lang: str | None = None, src_lang: str | None = None) -> list[DcceScore]:
    """Each pair's dual conditional cross-entropy (`seq2seq.data.dcce.DcceScore`): `forward` scores
    (src -> tgt), `backward` (tgt -> src); tgt_lang / src_lang: the target language of each, for
    multilingual models."""
    f = score_pairs(forward, srcs, tgts, batch_tokens, first_line=first_line, warn=warn, tgt_lang=tgt_lang)
    b = score_pairs(backward, tgts, srcs, batch_tokens, first_line=first_line, warn=warn, tgt_lang=src_lang)
    return [DcceScore.of(x, y) for x, y in zip(f, b)]


@dataclass(frozen=True)
class DualScorer:
    """A forward (source -> target) and a backward (target -> source) model as the scorer of a
    `seq2seq.data.dcce.DualCrossEntropyFilter`: called with (srcs, tgts, first_line, warn), `dual_scores`."""

    forward: Translator
    backward: Translator
    batch_tokens: int = 4000
    tgt_lang: str | None = None  # the forward model's target language (multilingual models)
    src_lang: str | None = None  # the backward model's

    def __call__(self, srcs: Sequence[str], tgts: Sequence[str], first_line: int = 1,
                 warn: Warn | None = None) -> list[DcceScore]:
        return dual_scores(self.forward, self.backward, srcs, tgts, self.batch_tokens, first_line=first_line,
                           warn=warn, tgt_lang=self.tgt_lang, src_lang=self.src_lang)


def dcce_filter(cfg: CleanConfig) -> DualCrossEntropyFilter:
    """The `dcce` filter of a `clean` section: its forward and backward models loaded (CPU or the
    default device), judged by `clean.dcce`'s threshold or keep_share (`CleanConfig` checked them)."""
    from seq2seq.inference.generator import load_engine
    from seq2seq.inference.translator import Translator

    rules = cfg.dcce
    assert rules.forward is not None and rules.backward is not None  # (`DcceRules.check`)
    scorer = DualScorer(load_engine(rules.forward, decodes=Translator), load_engine(rules.backward, decodes=Translator),
                        rules.batch_tokens)
    return DualCrossEntropyFilter(scorer, threshold=rules.threshold, keep_share=rules.keep_share)


def register_model_filters() -> None:
    """Make the model-based filters (`dcce`) names `clean.filters` can use: called by the front-ends that
    clean (`seq2seq clean`, `seq2seq train` with a `clean:` section), since the data layer, where the
    filters are built, loads no model."""
    from seq2seq.data.filters import register_filter

    # (a PairFilter by duck typing: seq2seq.data.dcce imports no pipeline)
    register_filter("dcce", dcce_filter)  # type: ignore[arg-type]
