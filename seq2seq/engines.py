"""Translating with an exported model on another engine, through the `Translator` interface.

    from seq2seq.engines import CTranslate2Translator
    t = CTranslate2Translator.load("runs/mine/ctranslate2")    # from `seq2seq export ... --to ctranslate2`
    t.translate(["A man rides a bike."], beam=5)
    t.translate_nbest(["..."], beam=5, nbest=3)                # -> [[Translation, ...], ...]

`CTranslate2Translator` takes the same search options as `Translator` (checked by the same rules;
the defaults are the model's `decoding` config, stored in the export) and returns the same
`Translation` objects, one n-best list per input text in input order ([] for an empty text, a
warning naming the line for one truncated to the model's positions). It encodes with the same
SentencePiece model, batches the same way, and maps our search onto CTranslate2's:

* beam search: CTranslate2's beam search is ours (the top 2 * beam extensions of each sentence,
  hypotheses ending with EOS among the top `beam` are finished, a sentence stops once `beam`
  hypotheses have finished). Its `length_penalty` divides by len ** alpha with len not counting EOS;
  ours is GNMT's ((5 + L) / 6) ** alpha with L counting it. So CTranslate2 runs with a
  length penalty of 1e-30 (a non-zero value keeps its stop-at-`beam`-finished rule; the scores are
  the plain log-probabilities) and returns all finished hypotheses, which are then scored with our
  GNMT penalty and ranked. For lenpen >= 0 the best hypothesis is exactly ours.
* PAD and BOS are never generated (as in ours); EOS is forbidden before `min_len` tokens;
  `no_repeat_ngram` maps to CTranslate2's.
* the length limit: ours allows max_len = min(a * source length + b, max_len) tokens and then
  forces EOS. A batch runs to the longest limit of its sentences; a sentence whose search reached
  its own limit is translated again alone, with CTranslate2 stopping at its limit. Such sentences
  (rare with a trained model: a translation as long as the limit) keep our length limit, but
  CTranslate2 ends them without scoring a final EOS, so their hypotheses may be ranked
  differently from ours.
* sampling: the same filters (top-k, top-p, temperature) but CTranslate2's random numbers: the
  same seed gives other samples than `Translator`.

Not available: `early_stopping: false` (CTranslate2 always stops at `beam` finished hypotheses: a
warning says so), per-token log-probabilities (`Translation.token_logprobs` is empty) and the
attention (`attention_layer`, `--alignment`, `--show-attention`).
"""

from __future__ import annotations

import logging
import math
import types
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from .export import EXPORT_INFO, ExportError, read_export_info, require, weights_digest
from .search import SearchConfig
from .tokenizer import BOS_ID, EOS_ID, PAD_ID, TokenizerPair
from .translator import Translation, Translator

log = logging.getLogger(__name__)

ENGINES = ("torch", "ctranslate2")
# CTranslate2's compute types for our precisions; fp32 keeps what was exported (an int8 export stays int8).
COMPUTE_TYPES = {"fp32": "default", "bf16": "bfloat16", "int8": "int8"}
NO_PENALTY = 1e-30  # non-zero: keeps CTranslate2's stop-at-beam-finished rule; x / len ** 1e-30 == x


def _gnmt(logprob: float, n_tokens: int, alpha: float) -> float:
    return logprob / ((5.0 + n_tokens + 1) / 6.0) ** alpha


class CTranslate2Translator:
    """`Translator`'s interface on a CTranslate2 export (see the module docstring)."""

    def __init__(self, path: str | Path, device: str = "cpu", compute_type: str = "default", threads: int = 0) -> None:
        ct2 = require("ctranslate2")
        self.path = Path(path)
        info = read_export_info(self.path)
        self.info = info
        self.config = info["config"]
        self.defaults: SearchConfig = self.config.decoding
        self.tokenizers = TokenizerPair.load(self.path)
        device, _, index = device.partition(":")
        if device == "auto":
            device = "cuda" if ct2.get_cuda_device_count() > 0 else "cpu"
        if device not in ("cpu", "cuda"):
            raise ValueError(f"CTranslate2 runs on cpu or cuda, not {device!r}")
        try:
            self.engine = ct2.Translator(str(self.path), device=device, device_index=int(index or 0),
                                         compute_type=compute_type, intra_threads=threads, inter_threads=1)
        except (RuntimeError, ValueError) as e:
            raise ValueError(f"cannot load the CTranslate2 model {self.path}: {str(e).splitlines()[0]}") from None
        self.device = device
        self.compute_type = compute_type
        tgt = self.tokenizers.tgt
        self._tgt_ids = {tgt.id_to_piece(i): i for i in range(tgt.vocab_size)}
        self._blocked = [[tgt.id_to_piece(PAD_ID)], [tgt.id_to_piece(BOS_ID)]]
        self._blocked_pieces = {tgt.id_to_piece(PAD_ID), tgt.id_to_piece(BOS_ID)}
        self.max_src_tokens = self.config.model.max_positions - 1
        self._warned: set[str] = set()

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu", precision: str = "fp32", threads: int = 0
             ) -> "CTranslate2Translator":
        if precision not in COMPUTE_TYPES:
            raise ValueError(f"precision must be one of {', '.join(COMPUTE_TYPES)}, got {precision!r}")
        return cls(path, device=device, compute_type=COMPUTE_TYPES[precision], threads=threads)

    def search_config(self, **options: Any) -> SearchConfig:
        """The model's decoding defaults with `options` applied, by `Translator.search_config`'s rules."""
        shim = types.SimpleNamespace(defaults=self.defaults, loaded=types.SimpleNamespace(config=self.config))
        cfg = Translator.search_config(shim, **options)  # type: ignore[arg-type]
        if cfg.attention_layer is not None:
            raise ValueError("the attention (--alignment, --show-attention) is not available with the ctranslate2 engine")
        if cfg.strategy == "beam" and cfg.min_len < 1:
            raise ValueError("min_len 0 is not available with the ctranslate2 engine's beam search")
        return cfg

    def translate(self, texts: list[str], **options: Any) -> list[str]:
        return [nbest[0].text if nbest else "" for nbest in self.translate_nbest(texts, **options)]

    def translate_nbest(
        self,
        texts: list[str],
        batch_tokens: int = 4000,
        first_line: int = 1,
        warn: Callable[[str], None] | None = None,
        **options: Any,
    ) -> list[list[Translation]]:
        """As `Translator.translate_nbest`: n-best hypotheses of each text, best first, in input order."""
        cfg = self.search_config(**options)
        if batch_tokens < 1:
            raise ValueError(f"batch_tokens must be >= 1, got {batch_tokens}")
        warn = warn or log.warning
        if cfg.strategy == "beam" and not cfg.early_stopping and "early_stopping" not in self._warned:
            self._warned.add("early_stopping")
            warn("decoding.early_stopping=false is not available in CTranslate2: beam search stops once "
                 "`beam` hypotheses have ended (as with early_stopping=true)")
        src_tok = self.tokenizers.src
        texts = [t.strip() for t in texts]
        results: list[list[Translation]] = [[] for _ in texts]
        todo = [i for i, t in enumerate(texts) if t]
        ids = dict(zip(todo, src_tok.encode([texts[i] for i in todo])))
        limit = self.max_src_tokens
        for i in todo:
            if len(ids[i]) > limit:
                warn(f"line {first_line + i}: {len(ids[i])} source tokens, truncated to the model's limit of {limit}")
                ids[i] = ids[i][:limit]
        pieces = {i: [src_tok.id_to_piece(t) for t in ids[i]] for i in todo}
        max_len = {i: self._max_len(len(ids[i]) + 1, cfg) for i in todo}
        # Sentences to translate again, alone: (limit, suppress) -> indices. A search that reached its
        # limit goes to `_at_limit`; one that generated PAD or BOS (which CTranslate2 can only forbid
        # by renormalizing the others, unlike ours: so only where needed) again with them forbidden.
        again: dict[tuple[int, bool], list[int]] = defaultdict(list)
        for batch in Translator._batches(todo, ids, batch_tokens):
            longest = max(max_len[i] for i in batch)
            if longest == 0:
                again[0, False] += batch
                continue
            out = self._run([pieces[i] for i in batch], cfg, longest + 1)
            offsets = self._eos_offsets([pieces[i] for i in batch], cfg)
            for i, r, c in zip(batch, out, offsets):
                if any(len(h) >= max_len[i] for h in r.hypotheses):
                    again[max_len[i], self._generated_blocked(r.hypotheses)].append(i)
                elif self._generated_blocked(r.hypotheses):
                    again[max_len[i] + 1, True].append(i)
                else:
                    results[i] = self._nbest(self._pairs(r, c), cfg, pieces[i])
        for (n, suppress), sentences in sorted(again.items()):
            for i in sentences:
                if n > max_len[i]:  # below the limit; PAD or BOS forbidden
                    r = self._run([pieces[i]], cfg, n, suppress=True)[0]
                    if not any(len(h) >= max_len[i] for h in r.hypotheses):
                        results[i] = self._nbest(self._pairs(r, self._eos_offsets([pieces[i]], cfg)[0]), cfg,
                                                 pieces[i])
                        continue
                results[i] = self._at_limit(pieces[i], cfg, max_len[i], suppress)
        return results

    # ---- internals ----------------------------------------------------------------------

    @staticmethod
    def _max_len(src_len: int, cfg: SearchConfig) -> int:
        cap = math.inf if cfg.max_len is None else cfg.max_len
        return max(0, int(min(math.floor(cfg.max_len_a * src_len + cfg.max_len_b + 1e-6), cap)))

    def _eos_offsets(self, batch: list[list[str]], cfg: SearchConfig) -> list[float]:
        """Per source: how much higher CTranslate2's log-probabilities are than ours. With min_len 1 it
        forbids EOS at the first step by renormalizing the other tokens' probabilities (ours keeps
        them), adding -log(1 - p(EOS | BOS)) to every hypothesis; scored here to take it back out
        (a constant per sentence, but the length penalty turns it into a different score change per
        hypothesis length). Sampling is not corrected (its probabilities are its own anyway)."""
        if cfg.min_len < 1 or cfg.strategy == "sample":
            return [0.0] * len(batch)
        scored = self.engine.score_batch(batch, [[]] * len(batch), max_input_length=0)
        return [-math.log1p(-min(math.exp(r.log_probs[0]), 1.0 - 1e-12)) for r in scored]

    @staticmethod
    def _pairs(result: Any, offset: float) -> list[tuple[list[str], float]]:
        return [(tokens, score - offset) for tokens, score in zip(result.hypotheses, result.scores)]

    def _generated_blocked(self, hypotheses: list[list[str]]) -> bool:
        return any(t in self._blocked_pieces for h in hypotheses for t in h)

    def _run(self, batch: list[list[str]], cfg: SearchConfig, max_length: int, keep_all: bool = False,
             suppress: bool = False) -> list[Any]:
        """translate_batch with our search. keep_all (a search that reaches max_length): patience 2, so
        that the hypotheses finishing at the last step are all returned (CTranslate2's stopping
        rule only changes after `beam` have finished, which such a search never reaches earlier).
        suppress: PAD and BOS are never generated (CTranslate2 then renormalizes the others'
        probabilities, which ours does not: the scores are then slightly higher than ours)."""
        options: dict[str, Any] = dict(
            max_batch_size=0, max_input_length=0, max_decoding_length=max_length,
            min_decoding_length=min(cfg.min_len, max_length), no_repeat_ngram_size=cfg.no_repeat_ngram,
            return_scores=True, **({"suppress_sequences": self._blocked} if suppress else {}),
        )
        if cfg.strategy == "beam":
            patience = 2 if keep_all else 1
            options.update(beam_size=cfg.beam, num_hypotheses=patience * cfg.beam, length_penalty=NO_PENALTY,
                           patience=patience)
        elif cfg.strategy == "greedy":
            options.update(beam_size=1, num_hypotheses=1, length_penalty=0.0)
        else:
            if cfg.seed is not None:
                import ctranslate2

                ctranslate2.set_random_seed(cfg.seed)
            options.update(beam_size=1, num_hypotheses=cfg.nbest, length_penalty=0.0, sampling_topk=cfg.topk,
                           sampling_topp=cfg.topp, sampling_temperature=cfg.temperature)
        return self.engine.translate_batch(batch, **options)

    def _at_limit(self, src_pieces: list[str], cfg: SearchConfig, n: int, suppress: bool = False) -> list[Translation]:
        """One sentence whose search reaches its limit of n tokens: CTranslate2 stops there (its last
        step keeps the `beam` best extensions as they are); the hypotheses of n tokens then get
        the log-probability of the EOS that ours forces after them (scored by CTranslate2)."""
        if n == 0:  # the limit allows no token: ours forces EOS at once
            scored = self.engine.score_batch([src_pieces], [[]], max_input_length=0)[0]
            return [self._translation([], float(sum(scored.log_probs)), cfg, src_pieces)]
        result = self._run([src_pieces], cfg, n, keep_all=True, suppress=suppress)[0]
        if not suppress and self._generated_blocked(result.hypotheses):
            result = self._run([src_pieces], cfg, n, keep_all=True, suppress=True)[0]
        hyps = self._pairs(result, self._eos_offsets([src_pieces], cfg)[0])
        full = [k for k, (tokens, _) in enumerate(hyps) if len(tokens) == n]
        if full:
            scored = self.engine.score_batch([src_pieces] * len(full), [hyps[k][0] for k in full], max_input_length=0)
            for k, s in zip(full, scored):
                hyps[k] = (hyps[k][0], sum(s.log_probs))
        return self._nbest(hyps, cfg, src_pieces)

    def _nbest(self, result: Any, cfg: SearchConfig, src_pieces: list[str]) -> list[Translation]:
        """(tokens, log-probability) pairs, scored with our GNMT penalty, distinct, best first, at most
        nbest."""
        hyps = [self._translation(tokens, float(logprob), cfg, src_pieces) for tokens, logprob in result]
        out, seen = [], set()
        for h in sorted(hyps, key=lambda h: -h.score):
            key = tuple(h.token_ids)
            if key not in seen:
                seen.add(key)
                out.append(h)
                if len(out) == cfg.nbest:
                    break
        return out

    def _translation(self, tokens: list[str], logprob: float, cfg: SearchConfig, src_pieces: list[str]) -> Translation:
        unk = self.tokenizers.tgt.unk_id
        token_ids = [self._tgt_ids.get(t, unk) for t in tokens]
        return Translation(
            text=self.tokenizers.tgt.decode([token_ids])[0],
            score=_gnmt(logprob, len(token_ids), cfg.lenpen),
            logprob=logprob,
            token_ids=token_ids,
            pieces=list(tokens),
            token_logprobs=[],
            src_pieces=src_pieces + [self.tokenizers.src.id_to_piece(EOS_ID)],
        )


def find_export(model_dir: str | Path, engine_dir: str | Path | None = None) -> Path:
    """Where a model directory's CTranslate2 export is: `engine_dir`, else MODEL_DIR itself when it is
    one, else MODEL_DIR/ctranslate2. ExportError saying how to make one when there is none."""
    model_dir = Path(model_dir)
    candidates = [Path(engine_dir)] if engine_dir else [model_dir, model_dir / "ctranslate2"]
    for c in candidates:
        if (c / EXPORT_INFO).is_file():
            return c
    where = engine_dir or f"{model_dir / 'ctranslate2'}"
    raise ExportError(
        f"no CTranslate2 model in {where}: make one with `seq2seq export {model_dir} --to ctranslate2 {where}`"
        + ("" if engine_dir else " (or pass --engine-dir)")
    )


def stale_export_warning(model_dir: str | Path, export_dir: Path) -> str | None:
    """A warning when MODEL_DIR's weights are not the ones the export was made from (None if they are)."""
    weights = Path(model_dir) / "model.safetensors"
    if not weights.is_file() or Path(model_dir).resolve() == export_dir.resolve():
        return None
    info = read_export_info(export_dir)
    if info.get("weights") != str(weights.resolve()):
        return None  # exported from other weights on purpose (e.g. averaged checkpoints)
    if info.get("weights_sha256") != weights_digest(weights):
        return (f"{export_dir} was exported from an earlier {weights}; re-export it with "
                f"`seq2seq export {model_dir} --to ctranslate2 {export_dir} --force`")
    return None


__all__ = ["COMPUTE_TYPES", "CTranslate2Translator", "ENGINES", "find_export", "stale_export_warning"]
