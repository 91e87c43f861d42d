"""The Python API for decoding with a model directory, and the one generation loop behind it.

    from seq2seq import Translator
    t = Translator.load("runs/quickstart/model")
    t.translate(["A man rides a bike."], beam=5)          # -> ["Ein Mann fährt Fahrrad."]
    t.translate_nbest(["..."], beam=5, nbest=3, attention_layer=-1)  # -> hypotheses with scores

Search options are the fields of `SearchConfig` (beam, nbest, lenpen, max_len_a, max_len_b,
max_len, min_len, no_repeat_ngram, topk, topp, temperature, seed, attention_layer, ...) plus two
switches, `greedy=True` and `sample=True`; unset options keep the model's `decoding` config
(`seq2seq.config.search.resolve_search`). `beam=1` means greedy search, `beam>1` beam search.

A `Translator` is an `Engine` (seq2seq.inference.engine: the one prepare -> search -> finish loop);
its search step serves every kind of source: the sources are prepared by the model's
`SourceProcessor` (texts tokenized, image and audio files loaded), sorted by length and grouped
into token-bounded batches, searched, and the hypotheses returned as `Translation`s in input order.
Every input gives exactly one result: an empty line gives an empty n-best list (no decoding), an
overlong line is truncated to the model's limit with a warning that names the line. `seq2seq translate`, `seq2seq test` and `seq2seq quickstart` all
translate through this class; `Generator` (captioning, speech) is this class for file sources.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence, TypedDict

import torch
import torch.nn.functional as F
from torch import nn

from seq2seq.accel.device import INFERENCE_PRECISIONS, autocast_context, native_bf16, slow_precision_warning
from seq2seq.accel.packed import ModuleT, pack_decoder
from seq2seq.config.diagnostics import Diagnostic, Warn
from seq2seq.config.model_section import ModelConfig
from seq2seq.config.root import Config
from seq2seq.config.search import SearchConfig
from seq2seq.data.batching import length_batches, to_device
from seq2seq.inference.controls import ControlError, SourceControls
from seq2seq.inference.ensemble import EnsembleModel, EnsembleProcessor, check_members
from seq2seq.inference import memory
from seq2seq.config.search import MAX_STEP_LOGITS
from seq2seq.inference.engine import Call, Engine, PreparedCall
from seq2seq.inference.results import Translation
from seq2seq.inference.search import Hypothesis, search
from seq2seq.inference.steering import SteeringError, continuation_pieces, sentence_end_pieces
from seq2seq.model.encoders.base import Encoder, source_kind, source_processor
from seq2seq.model.encoders.sources import PrefixedSource, SourceError, SourceKind, SourceProcessor
from seq2seq.model.transformer import Seq2SeqTransformer
from seq2seq.storage.model_dir import LoadedModel, load_model_dir
from seq2seq.text.languages import LanguageError, decoder_prefix, model_languages, source_prefix

log = logging.getLogger(__name__)

__all__ = ["Translation", "Translator", "int8_output", "quantize_int8"]


def checkpoint_members(model_dir: str | Path, last: int) -> list[Path]:
    """The last `last` checkpoints a run kept (`training.keep_last`), as ensemble members; ValueError
    for fewer than 2, CheckpointError (a ValueError) naming the directory when it kept fewer."""
    from seq2seq.storage.model_dir import ModelDir

    if last < 2:
        raise ValueError(f"last_checkpoints {last}: an ensemble needs 2 or more models")
    return ModelDir(model_dir).last_checkpoints(last)


class EnsembleKeywords(TypedDict, total=False):
    """`Translator.load`'s keywords beyond the model directory, device, precision and weights."""

    encoder: Encoder | None
    ensemble_weights: Sequence[float] | None
    ensemble_combine: str
    last_checkpoints: int | None
    adapter: str | Path | None


class Translator(Engine):
    """Decodes a loaded model's sources; search options default to the model's `decoding` config.

    precision: "fp32" (on CPU the decoder's weights are pre-packed once for MKL's sgemm, see
    `seq2seq.accel.packed`: the same results up to float rounding); "bf16" (weights cast to bfloat16
    once, run under bf16 autocast; search takes the log-softmax in fp32); "int8" (CPU only:
    dynamic int8 quantization of the linear layers, weights int8, activations quantized per call;
    the output projection in bf16 where the CPU has native bf16, else int8 too). The packed or
    reduced-precision model is a copy: `loaded.model` stays as it was (`Translator.load` converts
    its own freshly loaded model in place instead).
    """

    def __init__(self, loaded: LoadedModel | Sequence[LoadedModel], precision: str = "fp32", _owns_model: bool = False,
                 *, ensemble_weights: Sequence[float] | None = None, ensemble_combine: str = "prob") -> None:
        if precision not in INFERENCE_PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(INFERENCE_PRECISIONS)}, got {precision!r}")
        members = [loaded] if isinstance(loaded, LoadedModel) else list(loaded)
        for member in members:
            self._check_model(member)
        if len(members) > 1:
            check_members(members)
        elif ensemble_weights is not None and len(ensemble_weights) != 1:
            raise ValueError(f"{len(ensemble_weights)} ensemble weights for 1 model; give one per model")
        self.loaded = members[0]
        self.members = members
        self.device: torch.device = next(self.loaded.model.parameters()).device
        self.precision = precision
        models = [self._converted(m.model.eval(), precision, _owns_model) for m in members]
        self.model: Seq2SeqTransformer | EnsembleModel = models[0] if len(models) == 1 else \
            EnsembleModel(models, ensemble_weights, ensemble_combine).eval()  # (a new Module starts in training mode)
        self.tokenizers = self.loaded.tokenizers
        self.path: Path = self.loaded.path  # the (first) model directory
        self.config: Config = self.loaded.config
        self.defaults = self.config.decoding
        processors = [source_processor(m.config.model, m.tokenizers.src) for m in members]
        self.processor = processors[0] if len(processors) == 1 else \
            EnsembleProcessor(processors, [str(m.path) for m in members])

    def _converted(self, model: Seq2SeqTransformer, precision: str, owns: bool) -> Seq2SeqTransformer:
        """`model` ready to decode at `precision` (see the class docstring); a copy unless `owns`."""
        if precision == "int8":
            if self.device.type != "cpu":
                raise ValueError(f"int8 precision runs on CPU only (the model is on {self.device})")
            return quantize_int8(model, inplace=owns)
        if precision == "bf16":
            warning = slow_precision_warning(precision, self.device)
            if warning:
                log.warning(warning)
            # Weights cast once, not by autocast at every call; autocast still keeps its fp32 ops in fp32.
            return (model if owns else copy.deepcopy(model)).to(torch.bfloat16)
        if self.device.type == "cpu":
            return pack_decoder(model, inplace=owns)
        return model

    def _check_model(self, loaded: LoadedModel) -> None:
        """Refuse a model this class does not decode (SourceError naming the command that does)."""
        kind = source_kind(loaded.config.model.encoder)
        if not self.decodes(kind):
            raise SourceError(f"{loaded.path} is a model for {kind.name} sources, not {self.wanted()}: "
                              f"use {kind.decoded_by()}")

    @classmethod
    def decodes(cls, kind: SourceKind) -> bool:
        """Does this class decode models whose sources are of this kind? Sentences here."""
        return not kind.reads_files

    @classmethod
    def wanted(cls) -> str:
        """What this class decodes, for messages."""
        return "text"

    @classmethod
    def load(cls, model_dir: str | Path | Sequence[str | Path], device: str = "auto", precision: str = "fp32",
             weights: str | Path | None = None, encoder: Encoder | None = None, *,
             ensemble_weights: Sequence[float] | None = None, ensemble_combine: str = "prob",
             last_checkpoints: int | None = None, adapter: str | Path | None = None) -> Translator:
        """Load a model directory (see `load_model_dir`); `weights` replaces its model.safetensors,
        e.g. with averaged checkpoints from `seq2seq average`; `encoder` is the injected encoder
        instance it was trained with, if any.

        Ensembles (seq2seq.inference.ensemble): a list of model directories decodes them as one
        model (ensemble_weights: one per member; ensemble_combine: "prob" or "logprob"), and
        last_checkpoints=N the last N checkpoints of one run (`training.keep_last`) as members.

        adapter: a LoRA adapter directory (seq2seq.adapters) merged into the loaded weights, refused in one
        line (AdapterError) when trained on other weights; a LoRA run's directory given as model_dir loads
        the base its adapter.json names, with that adapter."""
        from seq2seq.adapters.files import resolve_base
        from seq2seq.adapters.merge import merge_into

        if precision == "int8" and device == "auto":
            device = "cpu"  # dynamic int8 quantization runs on CPU
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ValueError(f"device {device!r} asked for, but CUDA is not available")
        dirs = [model_dir] if isinstance(model_dir, (str, Path)) else list(model_dir)
        if len(dirs) == 1 and last_checkpoints is None:
            base, adapter = resolve_base(dirs[0], adapter)
            dirs = [base]
        elif adapter is not None:
            raise ValueError("an adapter adapts one model directory, not an ensemble")
        if last_checkpoints is not None:
            if len(dirs) != 1 or weights is not None:
                raise ValueError("last_checkpoints ensembles the checkpoints of one model directory, without weights")
            members = [load_model_dir(dirs[0], device=device, weights=p, encoder=encoder)
                       for p in checkpoint_members(dirs[0], last_checkpoints)]
        else:
            if weights is not None and len(dirs) > 1:
                raise ValueError("weights replaces one model directory's weights; not with an ensemble")
            members = [load_model_dir(d, device=device, weights=weights, encoder=encoder) for d in dirs]
        if adapter is not None:
            merge_into(members[0], adapter, weights)
        return cls(members if len(members) > 1 else members[0], precision, _owns_model=True,
                   ensemble_weights=ensemble_weights, ensemble_combine=ensemble_combine)

    def tied_output(self, table: torch.Tensor) -> nn.Module | None:
        """The output projection of a served adapter's own target `table` (`seq2seq.adapters.serving`) where the
        model is tied: at int8 the copy the int8 model makes of its table (`int8_output`), so that the logits
        are the merged model's exactly; else None, the decoder reading the table itself (at fp32 on CPU the
        base's packed copy is not made again: the plain product, the same to float rounding, and no memory
        beyond the adapter's table)."""
        return int8_output(table) if self.precision == "int8" else None

    @property
    def search_model(self) -> ModelConfig:
        """The decoded model's config (an ensemble's: the members' shortest positions)."""
        return self.model.cfg

    def ctc_heads(self) -> list[tuple[float, Path]]:
        return [(m.config.training.ctc_weight, m.path) for m in self.members]

    def _decode(self, prepared: PreparedCall, call: Call, first_line: int, warn: Warn,
                skipped: dict[int, str] | None) -> dict[int, list[Translation]]:
        """The sources read by the processor of the call's languages (a decoder language tag forced
        before each output and left out of it), searched in token-bounded batches (`_search`)."""
        texts, cfg = prepared.texts, prepared.cfg
        processor = self.processor_for(call.tgt_lang, call.src_lang)
        forced = self.decoder_prefix_ids(call.tgt_lang)
        examples = self._prepare(texts, first_line, warn, call.skip_bad, skipped, processor)
        if not processor.kind.reads_files:  # a limit of 0 tokens, or below min_len, is said
            for d in cfg.length_warnings({i: processor.length(x) for i, x in examples.items()},
                                         self.config.model.max_positions, first_line):
                warn(d)
        about = processor.describe
        controls = None
        if prepared.controls or forced:
            controls = {}
            for i in examples:
                c = prepared.controls.get(i, SourceControls())
                if c or forced:
                    controls[i] = dataclasses.replace(c, prefix=[*forced, *c.prefix])
        return self._search(examples, cfg, call.batch_tokens, lambda i: about(texts[i], examples[i]),
                            controls=controls, line=lambda i: first_line + i, warn=warn, processor=processor,
                            given=len(forced))

    @property
    def parameters(self) -> int:
        """The number of parameters decoding uses (every member's, for an ensemble); a weight shared by two
        modules (a tied output projection, packed for decoding over the embedding's storage) counts once."""
        sizes = {p.data_ptr(): p.numel() for m in self.members for p in m.model.parameters()}
        return sum(sizes.values())

    @property
    def annotates_terms(self) -> bool:
        """Was the model (every member of an ensemble) trained with terms on its sources (`data.terminology`)?"""
        return all(m.config.data.terminology.on for m in self.members)

    @property
    def languages(self) -> list[str]:
        """The target languages of a multilingual model ([] for a bilingual one): `tgt_lang` values."""
        return model_languages(self.config)

    def processor_for(self, tgt_lang: str | None, src_lang: str | None = None) -> SourceProcessor:
        """The source processor of a call into `tgt_lang`: sources start with the model's tag for it
        (`seq2seq.text.languages.source_prefix`). LanguageError (a ValueError) when a multilingual model
        gets no language or one it does not know, or a bilingual model gets one; `src_lang`: the source
        language of a model whose sources start with its tag (`data.language_tag: both`), else unused."""
        if not self.languages and tgt_lang is None:
            return self.processor
        members = [source_prefix(m.config, tgt_lang, src_lang=src_lang) for m in self.members]
        if not any(members):  # the language tag goes on the decoder (`decoder_prefix_ids`)
            return self.processor
        ensemble = self.processor if isinstance(self.processor, EnsembleProcessor) else None
        processors = ensemble.processors if ensemble is not None else [self.processor]
        prefixed = []
        for processor, pieces, member in zip(processors, members, self.members):
            if not isinstance(processor, PrefixedSource):
                raise LanguageError(f"{member.path} reads {processor.kind.name} sources, which take no language tag")
            prefixed.append(processor.with_prefix(pieces))
        return prefixed[0] if ensemble is None else EnsembleProcessor(prefixed, ensemble.names)

    def decoder_prefix_ids(self, tgt_lang: str | None) -> list[int]:
        """The target ids a translation into `tgt_lang` starts with: the language tag of a model that puts
        it on the decoder (`seq2seq.text.languages.decoder_prefix`; the members agree, `check_members`),
        forced at decoding and left out of the output; [] for every other model."""
        ids = []
        for piece in decoder_prefix(self.config, tgt_lang):
            token_id = self.tokenizers.tgt.piece_id(piece)
            if token_id is None:
                raise LanguageError(f"{self.path}: its target tokenizer has no piece {piece!r}, which its "
                                    f"config (data.language_tag: decoder) starts every translation with")
            ids.append(token_id)
        return ids

    def _prepare(self, sources: list[str], first_line: int, warn: Warn | None, skip_bad: bool,
                 skipped: dict[int, str] | None, processor: SourceProcessor | None = None) -> dict[int, object]:
        """{index: example} of the sources that have one (see `SourceProcessor.prepare`)."""
        if skip_bad and skipped is None:
            skipped = {}
        return (processor or self.processor).prepare(sources, first_line, warn or log.warning,
                                                     skipped if skip_bad else None)

    def _search(self, examples: dict[Any, object], cfg: SearchConfig, batch_tokens: int,
                about: Callable[[Any], dict[str, Any]],
                on_batch: Callable[[int], object] | None = None, controls: dict[Any, SourceControls] | None = None,
                line: Callable[[Any], Any] = str, warn: Warn = log.warning,
                processor: SourceProcessor | None = None, given: int = 0) -> dict[Any, list[Translation]]:
        """{key: example} -> {key: n-best Translations}, searched in token-bounded batches of similar
        length; about(key): the fields telling about its source; on_batch(rows) after each batch.
        controls: {key: its decoding controls}; a source whose constraints cannot all be met within
        its length limit is searched again without them (keeping its prefix and banned phrases),
        with a warning naming line(key). processor: the call's (default: the model's). given: each
        hypothesis's first `given` tokens are a forced language tag (`decoder_prefix_ids`), left out of
        its Translation. The sources with constraints are searched with `cfg.constrained()` (their own
        length penalty, `constraint_lenpen`), the others with `cfg`."""
        processor = processor or self.processor
        constrained = {k for k, c in (controls or {}).items() if c.constraints and k in examples}
        if constrained and cfg.constrained() != cfg:  # their own length penalty: two searches, one per kind
            groups = [({k: x for k, x in examples.items() if k in constrained}, cfg.constrained()),
                      ({k: x for k, x in examples.items() if k not in constrained}, cfg)]
            return {k: v for group, group_cfg in groups if group
                    for k, v in self._search(group, group_cfg, batch_tokens, about, on_batch, controls, line, warn,
                                             processor, given).items()}
        lengths = {k: processor.length(x) for k, x in examples.items()}
        autocast = "bf16" if self.precision == "bf16" else "fp32"
        results: dict[Any, list[Translation]] = {}
        unmet = []
        max_sources = max(1, MAX_STEP_LOGITS // (cfg.rows_per_source * self.config.model.tgt_vocab_size))
        max_sources = min(max_sources, memory.sources_that_fit(cfg, self.config.model, max(lengths.values(), default=0),
                                                               len(self.members), self.device))
        for batch in length_batches(lengths, batch_tokens, max_sources):
            src = to_device(processor.collate([examples[k] for k in batch]), self.device)
            steer = None if not controls else [controls.get(k) for k in batch]
            try:
                with torch.inference_mode(), autocast_context(self.device, autocast):
                    continuation = None if steer is None else self._continuation()
                    sentence_end = None if steer is None else self._sentence_end()
                    # one call, written per kind of model: each is a `SearchableModel` of its own memory type
                    if isinstance(self.model, EnsembleModel):
                        hyps = search(self.model, src, cfg, controls=steer, continuation=continuation,
                                      sentence_end=sentence_end)
                    else:
                        hyps = search(self.model, src, cfg, controls=steer, continuation=continuation,
                                      sentence_end=sentence_end)
            except ControlError as e:
                d = e.diagnostic
                raise SteeringError(d.message, line=line(batch[e.index]), field=d.field, code=d.code) from None
            for k, nbest in zip(batch, hyps):
                results[k] = [self._translation(h, about(k), given) for h in nbest]
                if nbest and not nbest[0].constraints_met:
                    unmet.append(k)
            if on_batch is not None:
                on_batch(len(batch))
        if unmet:
            assert controls is not None  # only constraints go unmet
            for k in unmet:
                warn(Diagnostic("its constraints cannot all be met within its length limit; translated without them",
                                line(k), "constraints", "constraints_unmet"))
            relaxed = {k: dataclasses.replace(controls[k], constraints=[], forms=None, sentence_ends=None) for k in unmet}
            results.update(self._search({k: examples[k] for k in unmet}, cfg, batch_tokens, about,
                                        controls=relaxed, line=line, warn=warn, processor=processor, given=given))
        return results

    def _continuation(self) -> torch.Tensor:
        """[V] bool: the target pieces that continue a word (constraints are met as whole words)."""
        if getattr(self, "_continues", None) is None:
            self._continues = continuation_pieces(self.tokenizers.tgt, self.config.model.tgt_vocab_size)
        return self._continues

    def _sentence_end(self) -> torch.Tensor:
        """[V] bool: the target pieces that end a sentence (the constraints' sentence-end rule)."""
        if getattr(self, "_sentence_ends", None) is None:
            self._sentence_ends = sentence_end_pieces(self.tokenizers.tgt, self.config.model.tgt_vocab_size)
        return self._sentence_ends

    def _translation(self, h: Hypothesis, about: dict[str, Any], given: int = 0) -> Translation:
        """The Translation of hypothesis `h` without its first `given` tokens (a forced language tag):
        its logprob and token_logprobs are those of the output; `score` ranks as the search did."""
        tgt_tok = self.tokenizers.tgt
        tokens, token_logprobs = list(h.tokens)[given:], [float(x) for x in h.token_logprobs]
        return Translation(
            text=tgt_tok.decode([tokens])[0],
            score=float(h.score),
            logprob=float(h.logprob) - sum(token_logprobs[:given]),
            token_ids=tokens,
            pieces=[tgt_tok.id_to_piece(t) for t in tokens],
            token_logprobs=token_logprobs[given:],
            attention=None if h.attention is None else h.attention[given:].float().tolist(),
            **about,
        )


class Bf16Linear(nn.Module):
    """y = x W^T computed in bfloat16 (W cast once), fp32 in and out: int8's output projection
    where the CPU has native bf16."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight.detach().to(torch.bfloat16), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.to(torch.bfloat16), self.weight).float()


def int8_output(weight: torch.Tensor) -> nn.Module:
    """The output projection x W^T that `quantize_int8` gives a tied model whose table is `weight`: a
    `Bf16Linear` where the CPU has native bf16, else an int8 dynamically quantized Linear over a copy
    (what a served adapter's own table projects through; `seq2seq.adapters.serving`)."""
    if native_bf16(torch.device("cpu")):
        return Bf16Linear(weight)
    from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic

    linear = nn.Linear(weight.size(1), weight.size(0), bias=False)
    linear.weight = nn.Parameter(weight.detach().float().cpu().clone(), requires_grad=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notices
        return quantize_dynamic(nn.Sequential(linear), {"0": default_dynamic_qconfig}, dtype=torch.qint8,
                                inplace=True)[0]


def quantize_int8(model: ModuleT, inplace: bool = False) -> ModuleT:
    """`model` (a copy unless `inplace`) with dynamically int8-quantized linear layers (CPU inference).

    The output projection (logits = x W^T, W the embedding when tied) gets its own copy of W: at
    d_model 256 and 8000 words it is the largest matmul of a decoding step. Where the CPU has
    native bf16 it runs in bf16 (`Bf16Linear`), which kept the BLEU that int8 there lost, at the same
    speed (benchmarks/README.md has the measurements). Elsewhere it is quantized to int8 with
    the rest. The cross-attention input projections stay fp32: the attention code reads slices of
    their weight (queries per step, keys/values once per source).
    """
    from torch.ao.quantization import default_dynamic_qconfig, quantize_dynamic

    model = (model if inplace else copy.deepcopy(model)).cpu().eval()
    decoder = getattr(model, "decoder", None)
    if decoder is not None and (native_bf16(torch.device("cpu")) or decoder.output is None):
        decoder.output = int8_output(decoder.output_weight)  # (an untied one without bf16: quantized below)
    names = {
        name: default_dynamic_qconfig
        for name, module in model.named_modules()
        if type(module) is nn.Linear and not name.endswith("cross_attn.in_proj")
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notices
        return quantize_dynamic(model, names, dtype=torch.qint8, inplace=True)
