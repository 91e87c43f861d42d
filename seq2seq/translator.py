"""The Python API for translating with a model directory.

    from seq2seq import Translator
    t = Translator.load("runs/quickstart/model")
    t.translate(["A man rides a bike."], beam=5)          # -> ["Ein Mann fährt Fahrrad."]
    t.translate_nbest(["..."], beam=5, nbest=3, attention_layer=-1)  # -> hypotheses with scores

Sources are sorted by length and grouped into token-bounded batches, then results are put back in
input order. Every input gives exactly one result: an empty line translates to an empty string
(no decoding), an overlong line is truncated to the model's limit with a warning.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

from .batching import pad_sequences
from .experiment import LoadedModel, load_model_dir
from .search import SearchConfig, search
from .tokenizer import EOS_ID, PAD_ID
from .train import autocast_context

log = logging.getLogger(__name__)

PRECISIONS = ("fp32", "bf16", "int8")


@dataclass
class Translation:
    """One hypothesis for one source sentence."""

    text: str
    score: float  # the search score (length-penalised log-probability for beam search)
    logprob: float  # total log-probability
    token_ids: list[int]
    pieces: list[str]  # target subword pieces (without EOS)
    token_logprobs: list[float]  # per target token, EOS included
    src_pieces: list[str]
    attention: list[list[float]] | None = None  # [target pieces + EOS, source pieces + EOS]

    def to_json(self) -> dict[str, Any]:
        out = {"text": self.text, "score": round(self.score, 4), "logprob": round(self.logprob, 4), "tokens": self.pieces}
        if self.attention is not None:
            out["alignment"] = [[round(w, 4) for w in row] for row in self.attention]
            out["src_tokens"] = self.src_pieces
        return out


class Translator:
    """Translates text with a loaded model; search options default to the model's `decoding` config."""

    def __init__(self, loaded: LoadedModel, precision: str = "fp32") -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        self.loaded = loaded
        self.model = loaded.model.eval()
        self.device = next(self.model.parameters()).device
        self.precision = precision
        if precision == "int8":
            if self.device.type != "cpu":
                raise ValueError("int8 dynamic quantization runs on CPU only")
            self.model = torch.ao.quantization.quantize_dynamic(self.model, {torch.nn.Linear}, dtype=torch.qint8)
        self.tokenizers = loaded.tokenizers
        self.defaults = loaded.config.decoding
        self.max_src_len = min(loaded.config.model.max_positions, loaded.config.data.max_len)

    @classmethod
    def load(cls, model_dir: str | Path, device: str = "auto", precision: str = "fp32",
             weights: str | Path | None = None) -> "Translator":
        return cls(load_model_dir(model_dir, device=device, weights=weights), precision)

    def search_config(self, **options: Any) -> SearchConfig:
        """The model's decoding defaults with `options` applied (e.g. beam=5, lenpen=0.6)."""
        valid = {f.name for f in dataclasses.fields(SearchConfig)}
        unknown = sorted(set(options) - valid)
        if unknown:
            raise ValueError(f"unknown search option(s) {unknown}; valid: {sorted(valid)}")
        if options.get("beam") is not None and "strategy" not in options and options["beam"] >= 1:
            options.setdefault("strategy", "beam" if options["beam"] > 1 else "greedy")
        cfg = dataclasses.replace(self.defaults, **{k: v for k, v in options.items() if v is not None})
        max_len = self.loaded.config.model.max_positions - 1
        return dataclasses.replace(cfg, nbest=min(cfg.nbest, max(cfg.beam, 1)), max_len=min(cfg.max_len or max_len, max_len))

    def translate(self, texts: list[str], **options: Any) -> list[str]:
        """Best translation of each text, in input order."""
        return [nbest[0].text if nbest else "" for nbest in self.translate_nbest(texts, **options)]

    def translate_nbest(self, texts: list[str], batch_tokens: int = 4000, **options: Any) -> list[list[Translation]]:
        """n-best hypotheses (best first) of each text, in input order; [] for an empty text."""
        cfg = self.search_config(**options)
        src_tok, tgt_tok = self.tokenizers.src, self.tokenizers.tgt
        ids = src_tok.encode([t.strip() for t in texts])
        results: list[list[Translation]] = [[] for _ in texts]
        for i, seq in enumerate(ids):
            if len(seq) > self.max_src_len - 1:
                log.warning("line %d: %d source tokens, truncated to %d", i + 1, len(seq), self.max_src_len - 1)
                ids[i] = seq[: self.max_src_len - 1]
        todo = [i for i, t in enumerate(texts) if t.strip()]
        for batch in self._batches(todo, ids, batch_tokens):
            src = pad_sequences([ids[i] + [EOS_ID] for i in batch], PAD_ID).to(self.device)
            with torch.inference_mode(), autocast_context(self.device, "bf16" if self.precision == "bf16" else "fp32"):
                hyps = search(self.model, src, cfg)
            for i, nbest in zip(batch, hyps):
                src_pieces = src_tok.pieces(texts[i].strip())[: len(ids[i])] + ["</s>"]
                results[i] = [self._translation(h, src_pieces, tgt_tok) for h in nbest]
        return results

    @staticmethod
    def _translation(h, src_pieces: list[str], tgt_tok) -> Translation:
        attention = None
        if h.attention is not None:
            attention = h.attention.float().tolist()
        return Translation(
            text=tgt_tok.decode([h.tokens])[0],
            score=float(h.score),
            logprob=float(h.logprob),
            token_ids=list(h.tokens),
            pieces=[tgt_tok.id_to_piece(t) for t in h.tokens],
            token_logprobs=[float(x) for x in h.token_logprobs],
            src_pieces=src_pieces,
            attention=attention,
        )

    @staticmethod
    def _batches(order: list[int], ids: list[list[int]], batch_tokens: int) -> Iterator[list[int]]:
        """Token-bounded batches of similar length: padded source tokens <= batch_tokens."""
        order = sorted(order, key=lambda i: len(ids[i]))
        batch: list[int] = []
        longest = 0
        for i in order:
            n = len(ids[i]) + 1
            if batch and max(longest, n) * (len(batch) + 1) > batch_tokens:
                yield batch
                batch, longest = [], 0
            batch.append(i)
            longest = max(longest, n)
        if batch:
            yield batch
