"""The Python API for translating with a model directory.

    from seq2seq import Translator
    t = Translator.load("runs/quickstart/model")
    t.translate(["A man rides a bike."], beam=5)          # -> ["Ein Mann fährt Fahrrad."]
    t.translate_nbest(["..."], beam=5, nbest=3, attention_layer=-1)  # -> hypotheses with scores

Search options are the fields of `SearchConfig` (beam, nbest, lenpen, max_len_a, max_len_b,
max_len, min_len, no_repeat_ngram, topk, topp, temperature, seed, attention_layer, ...) plus two
switches, `greedy=True` and `sample=True`; unset options keep the model's `decoding` config.
`beam=1` means greedy search, `beam>1` beam search.

Sources are sorted by length and grouped into token-bounded batches, then results are put back in
input order. Every input gives exactly one result: an empty line translates to an empty string
(no decoding), an overlong line is truncated to the model's limit with a warning that names the
line. `seq2seq translate`, `seq2seq test` and `seq2seq quickstart` all translate through this class.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from seq2seq.data.batching import length_batches, pad_sequences
from seq2seq.storage.model_dir import LoadedModel, load_model_dir
from seq2seq.accel.packed import pack_decoder
from seq2seq.inference.search import Hypothesis, SearchConfig, search
from seq2seq.text.tokenizer import EOS_ID, PAD_ID, Tokenizer
from seq2seq.accel.device import INFERENCE_PRECISIONS, autocast_context, native_bf16

log = logging.getLogger(__name__)

SAMPLING_OPTIONS = ("topk", "topp", "temperature")


@dataclass
class Translation:
    """One hypothesis for one source sentence."""

    text: str
    score: float  # the search score (length-penalised log-probability, see seq2seq.inference.search)
    logprob: float  # total log-probability
    token_ids: list[int]
    pieces: list[str]  # target subword pieces (without EOS)
    token_logprobs: list[float]  # per target token, EOS included
    src_pieces: list[str]  # source subword pieces the model saw (after truncation), EOS included
    attention: list[list[float]] | None = None  # [target pieces + EOS, source pieces + EOS]

    def to_json(self) -> dict[str, Any]:
        out = {"text": self.text, "score": round(self.score, 4), "logprob": round(self.logprob, 4), "tokens": self.pieces}
        if self.attention is not None:
            out["alignment"] = [[round(w, 4) for w in row] for row in self.attention]
            out["src_tokens"] = self.src_pieces
        return out


class Translator:
    """Translates text with a loaded model; search options default to the model's `decoding` config.

    precision: "fp32" (on CPU the decoder's weights are pre-packed once for MKL's sgemm, see
    `seq2seq.accel.packed`: the same results up to float rounding); "bf16" (weights cast to bfloat16
    once, run under bf16 autocast; search takes the log-softmax in fp32); "int8" (CPU only:
    dynamic int8 quantization of the linear layers, weights int8, activations quantized per call;
    the output projection in bf16 where the CPU has native bf16, else int8 too). The packed or
    reduced-precision model is a copy: `loaded.model` stays as it was (`Translator.load` converts
    its own freshly loaded model in place instead).
    """

    def __init__(self, loaded: LoadedModel, precision: str = "fp32", _owns_model: bool = False) -> None:
        if precision not in INFERENCE_PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(INFERENCE_PRECISIONS)}, got {precision!r}")
        self.loaded = loaded
        self.model: nn.Module = loaded.model.eval()
        self.device = next(self.model.parameters()).device
        self.precision = precision
        if precision == "int8":
            if self.device.type != "cpu":
                raise ValueError(f"int8 precision runs on CPU only (the model is on {self.device})")
            self.model = quantize_int8(self.model, inplace=_owns_model)
        elif precision == "bf16":
            # Casting the weights once beats autocast's per-call weight casts (measured: beam 5
            # 1.26x vs 0.97x over fp32 on 2 CPU cores); autocast still keeps its fp32 ops in fp32.
            self.model = (self.model if _owns_model else copy.deepcopy(self.model)).to(torch.bfloat16)
        elif self.device.type == "cpu":
            self.model = pack_decoder(self.model, inplace=_owns_model)
        self.tokenizers = loaded.tokenizers
        self.defaults = loaded.config.decoding
        # The encoder sees ids + EOS, which must fit in the model's positions.
        self.max_src_tokens = loaded.config.model.max_positions - 1

    @classmethod
    def load(
        cls, model_dir: str | Path, device: str = "auto", precision: str = "fp32", weights: str | Path | None = None
    ) -> "Translator":
        """Load a model directory (see `load_model_dir`); `weights` replaces its model.safetensors,
        e.g. with averaged checkpoints from `seq2seq average`."""
        if precision == "int8" and device == "auto":
            device = "cpu"  # dynamic int8 quantization runs on CPU
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device {device!r} asked for, but CUDA is not available")
        return cls(load_model_dir(model_dir, device=device, weights=weights), precision, _owns_model=True)

    def search_config(self, *, greedy: bool = False, sample: bool = False, **options: Any) -> SearchConfig:
        """The model's decoding defaults with `options` applied (e.g. beam=5, lenpen=0.6).

        The strategy: `greedy=True`, `sample=True`, or an explicit `strategy=`; otherwise `beam`
        decides (1: greedy, > 1: beam search); otherwise the model's default. Options left at
        None keep their default. nbest is 1 for greedy search and must be <= beam for beam search
        (left unset it is capped there); max_len is capped at model.max_positions - 1.
        Raises ValueError with a readable message for unknown or conflicting options.
        """
        valid = {f.name for f in dataclasses.fields(SearchConfig)}
        unknown = sorted(set(options) - valid)
        if unknown:
            raise ValueError(f"unknown search option(s) {unknown}; valid: {sorted(valid | {'greedy', 'sample'})}")
        options = {k: v for k, v in options.items() if v is not None}
        if greedy and sample:
            raise ValueError("choose one of greedy and sample (--greedy, --sample)")
        chosen = "greedy" if greedy else "sample" if sample else None
        if chosen is not None:
            if options.get("strategy", chosen) != chosen:
                raise ValueError(f"{chosen} conflicts with strategy={options['strategy']!r}")
            options["strategy"] = chosen
        elif "strategy" not in options and "beam" in options:
            options["strategy"] = "beam" if options["beam"] > 1 else "greedy"
        if "beam" in options and options["beam"] < 1:
            raise ValueError(f"beam must be >= 1, got {options['beam']}")
        strategy = options.get("strategy", self.defaults.strategy)
        if strategy == "greedy" and options.get("beam", 1) > 1:
            raise ValueError(f"greedy search conflicts with beam={options['beam']}")
        given = sorted(k for k in SAMPLING_OPTIONS if k in options)
        if given and strategy != "sample":
            raise ValueError(f"{', '.join(given)}: only for sampling; add sample=True (--sample)")

        beam = options.get("beam", self.defaults.beam)
        nbest = options.get("nbest")
        if strategy == "greedy":
            if nbest is not None and nbest > 1:
                raise ValueError(f"greedy search gives one hypothesis; nbest={nbest} needs beam search (beam >= {nbest}) or sampling")
            options["nbest"] = 1
        elif strategy == "beam":
            if nbest is not None and nbest > beam:
                raise ValueError(f"nbest ({nbest}) must be <= beam ({beam}); pass a larger beam")
            options["nbest"] = min(self.defaults.nbest if nbest is None else nbest, beam)
        layer = options.get("attention_layer")
        layers = self.loaded.config.model.n_decoder_layers
        if layer is not None and not -layers <= layer < layers:
            raise ValueError(f"attention_layer {layer} does not exist: the decoder has {layers} layer(s)")
        cap = self.loaded.config.model.max_positions - 1  # BOS + max_len tokens must fit
        max_len = options.get("max_len", self.defaults.max_len)
        options["max_len"] = cap if max_len is None else min(max_len, cap)
        try:
            return dataclasses.replace(self.defaults, **options)
        except ValueError as e:  # SearchConfig's own checks ("decoding.topp must be in (0, 1]")
            raise ValueError(str(e).removeprefix("decoding.")) from None

    def translate(self, texts: list[str], **options: Any) -> list[str]:
        """Best translation of each text, in input order ("" for an empty or blank text)."""
        return [nbest[0].text if nbest else "" for nbest in self.translate_nbest(texts, **options)]

    def translate_nbest(
        self,
        texts: list[str],
        batch_tokens: int = 4000,
        first_line: int = 1,
        warn: Callable[[str], None] | None = None,
        **options: Any,
    ) -> list[list[Translation]]:
        """n-best hypotheses (best first) of each text, in input order; [] for an empty text.

        batch_tokens: padded source tokens per batch. first_line: the line number of texts[0],
        used in warnings (a caller streaming a file in chunks passes its position). warn: where
        warnings go (default: this module's logger). options: see `search_config`.
        """
        cfg = self.search_config(**options)
        if batch_tokens < 1:
            raise ValueError(f"batch_tokens must be >= 1, got {batch_tokens}")
        warn = warn or log.warning
        src_tok, tgt_tok = self.tokenizers.src, self.tokenizers.tgt
        texts = [t.strip() for t in texts]
        results: list[list[Translation]] = [[] for _ in texts]
        todo = [i for i, t in enumerate(texts) if t]
        ids: dict[int, list[int]] = dict(zip(todo, src_tok.encode([texts[i] for i in todo])))
        limit = self.max_src_tokens
        for i in todo:
            if len(ids[i]) > limit:
                warn(f"line {first_line + i}: {len(ids[i])} source tokens, truncated to the model's limit of {limit}")
                ids[i] = ids[i][:limit]
        autocast = "bf16" if self.precision == "bf16" else "fp32"
        for batch in self._batches(todo, ids, batch_tokens):
            src = pad_sequences([ids[i] + [EOS_ID] for i in batch], PAD_ID).to(self.device)
            with torch.inference_mode(), autocast_context(self.device, autocast):
                hyps = search(self.model, src, cfg)
            for i, nbest in zip(batch, hyps):
                src_pieces = src_tok.pieces(texts[i])[: len(ids[i])] + ["</s>"]
                results[i] = [self._translation(h, src_pieces, tgt_tok) for h in nbest]
        return results

    @staticmethod
    def _translation(h: Hypothesis, src_pieces: list[str], tgt_tok: Tokenizer) -> Translation:
        return Translation(
            text=tgt_tok.decode([h.tokens])[0],
            score=float(h.score),
            logprob=float(h.logprob),
            token_ids=list(h.tokens),
            pieces=[tgt_tok.id_to_piece(t) for t in h.tokens],
            token_logprobs=[float(x) for x in h.token_logprobs],
            src_pieces=src_pieces,
            attention=None if h.attention is None else h.attention.float().tolist(),
        )

    @staticmethod
    def _batches(order: list[int], ids: dict[int, list[int]], batch_tokens: int) -> Iterator[list[int]]:
        """Token-bounded batches of similar length: padded source tokens (EOS included) <= batch_tokens
        (a longer single source is a batch of its own)."""
        return length_batches({i: len(ids[i]) + 1 for i in order}, batch_tokens)


class Bf16Linear(nn.Module):
    """y = x W^T computed in bfloat16 (W cast once), fp32 in and out: int8's output projection
    where the CPU has native bf16."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight.detach().to(torch.bfloat16), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.to(torch.bfloat16), self.weight).float()


def quantize_int8(model: nn.Module, inplace: bool = False) -> nn.Module:
    """`model` (a copy unless `inplace`) with dynamically int8-quantized linear layers (CPU inference).

    The output projection (logits = x W^T, W the embedding when tied) gets its own copy of W: at
    d_model 256 and 8000 words it is the largest matmul of a decoding step. Where the CPU has
    native bf16 it runs in bf16 (`Bf16Linear`): int8 there cost 0.35 BLEU at beam 5 on the
    Multi30K recipe model, bf16 0.10, and was no faster. Elsewhere it is quantized to int8 with
    the rest. The cross-attention input projections stay fp32: the attention code reads slices of
    their weight (queries per step, keys/values once per source).
    """
    from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic

    model = (model if inplace else copy.deepcopy(model)).cpu().eval()
    decoder = getattr(model, "decoder", None)
    if decoder is not None:
        if native_bf16(torch.device("cpu")):
            decoder.output = Bf16Linear(decoder.output_weight)
        elif decoder.output is None:  # tied: an own Linear, quantized below with the rest
            weight = decoder.output_weight.detach()
            decoder.output = nn.Linear(weight.size(1), weight.size(0), bias=False)
            decoder.output.weight = nn.Parameter(weight.clone(), requires_grad=False)
    names = {
        name: default_dynamic_qconfig
        for name, module in model.named_modules()
        if type(module) is nn.Linear and not name.endswith("cross_attn.in_proj")
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notices
        return quantize_dynamic(model, names, dtype=torch.qint8, inplace=True)
