"""The one decoding engine: a call's inputs and options in, n-best `Translation`s out, in three steps.

Every engine (`Translator`, the `Generator`s, an ensemble, the CTranslate2 engine) is an `Engine` and
decodes a call the same way (`Engine.run`):

    prepare   `Engine.prepare` (here, shared): the search options resolved (`search_config`), how terms
              reach the model (`term_mode`), the glossary loaded and checked, each input's steering
              (its `SourceInput`, plus the glossary's terms its text holds) checked against the search,
              the terms appended to the sources where the model reads them so (`with_terms`), and each
              steered input encoded to target token ids (`encode_steering`), once, so that what cannot
              be honoured is refused in one line naming the input before anything is decoded
    search    the engine's own `_decode`: the torch search over its model (`Translator`), over a
              recording's windows (`Transcriber`), or CTranslate2's batches; {index: n-best list}
    finish    here: one n-best list per input in input order ([] for an empty or skipped source)

so every engine accepts and refuses the same calls with the same words, and differs only in what its
search can do: its `capabilities` (the steering fields it honours, and its other abilities), refused
in one line (`Capabilities.refusal`). The server runs
`prepare` on a request before queueing it, so a request is refused exactly as the engine would
refuse it, before any decoding.

`translate_nbest(texts, prefix=[...], beam=5, ...)` and `translate(texts, ...)` are the Python API's
shape of the same call: they build the `SourceInput`s and the `Call` (`seq2seq.inference.inputs`)
and run it. `translate_stream` runs an engine over a stream of lines chunk by chunk (`seq2seq translate`,
`test`; `decode_stream` for any decoding call, `caption` and `transcribe`'s), each chunk's output
written as `seq2seq.inference.results.formatter` writes it before the next chunk is read.
"""

from __future__ import annotations

import itertools
import logging
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable, ClassVar, Iterator, Mapping, Sequence

from typing_extensions import Unpack

from seq2seq.config.diagnostics import ByInput, Diagnostic, Warn
from seq2seq.config.search import SearchConfig, SearchOptions, resolve_search
from seq2seq.inference.controls import SourceControls
from seq2seq.inference.glossary import Glossary
from seq2seq.inference.inputs import (
    FIELD_RULES, SHARED_FIELDS, STEERING_FIELDS, AvoidPhrases, Call, CallKeywords, PhraseLists, Prefixes, SourceInput, call_of, read_input,
    source_inputs,
)
from seq2seq.inference.results import Translation
from seq2seq.inference.steering import (
    SteeringError, check_steering, encode_steering, term_mode, with_terms,
)
from seq2seq.text.lines import warn as stderr_warn

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from seq2seq.config.model_section import ModelConfig
    from seq2seq.config.root import Config
    from seq2seq.model.encoders.sources import SourceProcessor
    from seq2seq.text.tokenizer import TokenizerPair

log = logging.getLogger("seq2seq.inference")


@dataclass(frozen=True)
class Capabilities:
    """What an engine's search can do beyond plain decoding; each one it lacks is refused in one line
    naming the engine (`refusal`). fields: the steering fields of an input (`SourceInput`) it honours,
    every one by default (`seq2seq.inference.inputs.FIELD_RULES`): an input that gives another is
    refused (`check_inputs`), so an engine refuses a field added to `SourceInput` until it declares it
    (without `constraints`, lexically constrained beam search, a glossary's terms are refused too where
    they would be constraints); attention: the cross-attention of a layer (`attention_layer`);
    term_bias: the annotated terms' bonus asked by a call; beam_without_min_len: beam search with
    min_len 0 (EOS allowed at the first step)."""

    engine: str = "torch"
    fields: frozenset[str] = frozenset(STEERING_FIELDS)
    attention: bool = True
    term_bias: bool = True
    beam_without_min_len: bool = True

    def refusal(self, what: str) -> str:
        """The one line that refuses `what`: a steering field (named as its `FieldRule.refused_as` says) or
        another capability (a field of this class)."""
        if what in FIELD_RULES:
            return f"the {self.engine} engine cannot honour {FIELD_RULES[what].refused_as}; use --engine torch"
        return {
            "attention": f"the attention (--alignment, --show-attention) is not available with the {self.engine} "
                         "engine",
            "term_bias": f"term_bias is not available with the {self.engine} engine; translate with the torch engine "
                         "(--engine torch), or pass --term-bias 0",
            "beam_without_min_len": f"min_len 0 is not available with the {self.engine} engine's beam search",
        }[what]

    def check_search(self, cfg: SearchConfig, asked: SearchOptions) -> None:
        """ValueError (its `refusal`) where the search `cfg`, or the options a call `asked`, need what the
        engine lacks. term_bias is refused only where the call asks for it: a model's own default is
        warned about by the engine (`CTranslate2Translator`)."""
        if not self.attention and cfg.attention_layer is not None:
            raise ValueError(self.refusal("attention"))
        if not self.term_bias and asked.get("term_bias"):
            raise ValueError(self.refusal("term_bias"))
        if not self.beam_without_min_len and cfg.strategy == "beam" and cfg.min_len < 1:
            raise ValueError(self.refusal("beam_without_min_len"))

    def check_inputs(self, inputs: Sequence[SourceInput], mode: str) -> None:
        """SteeringError (its `refusal`) for the first steering field, in `FIELD_RULES` order, that an input
        gives and the engine does not honour; a field of terms (`FieldRule.terms`) is not the search's
        where the call's terms are annotated on the sources (`mode` "annotate")."""
        for name, rule in FIELD_RULES.items():
            if name not in self.fields and not (rule.terms and mode == "annotate") and \
                    any(getattr(x, name) for x in inputs):
                raise SteeringError(self.refusal(name), field=name, code="unsupported_option")


@dataclass(frozen=True)
class PreparedCall:
    """A call after its prepare step: the sources as the model reads them (terms appended where
    annotated), the resolved search, how terms reach the model, the call's inputs, each input's glossary
    terms as the search gets them ([] each without a glossary) and the encoded controls of each
    non-empty steered input, by index."""

    texts: list[str]
    cfg: SearchConfig
    mode: str
    inputs: list[SourceInput]
    terms: list[list[str]]
    controls: dict[int, SourceControls]


class Engine(ABC):
    """A decoding engine (see the module docstring). A subclass sets the attributes below, says what
    its search cannot do (`capabilities`), and writes `_decode` and `processor_for`.

    path: the model directory (or export); config: its config; defaults: its `decoding` section;
    tokenizers, processor (what the model reads: `processor.kind`), device; precision and parameters
    (what the server's page shows); annotates_terms: was it trained with terms on its sources."""

    capabilities: ClassVar[Capabilities] = Capabilities()
    path: Path
    config: Config
    defaults: SearchConfig
    tokenizers: TokenizerPair
    processor: SourceProcessor
    device: torch.device | str
    precision: str

    @property
    @abstractmethod
    def parameters(self) -> int: ...

    @property
    def annotates_terms(self) -> bool:
        """Was the model trained with terms on its sources (`data.terminology`)? It then takes them so."""
        return self.config.data.terminology.on

    @property
    def search_model(self) -> ModelConfig:
        """The model config the search options are checked against (`resolve_search`)."""
        return self.config.model

    def ctc_heads(self) -> list[tuple[float, Path]]:
        """(training.ctc_weight, directory) of each model whose CTC head the search may mix in."""
        return [(self.config.training.ctc_weight, self.path)]

    @abstractmethod
    def processor_for(self, tgt_lang: str | None, src_lang: str | None = None) -> SourceProcessor:
        """The source processor of a call into `tgt_lang` (LanguageError for one the model does not take)."""

    def search_config(self, **options: Unpack[SearchOptions]) -> SearchConfig:
        """The model's decoding defaults with `options` applied (e.g. beam=5, lenpen=0.6) by `resolve_search`
        (max_len capped at the model's positions), refusing what the engine cannot do (`capabilities`).
        ValueError with a readable message for unknown, mistyped or conflicting options."""
        cfg = resolve_search(self.defaults, options, self.search_model)
        for weight, path in self.ctc_heads():  # an ensemble mixes its members' CTC heads: each needs one
            cfg.check_ctc_head(weight, path)
        self.capabilities.check_search(cfg, options)
        return cfg

    def translate(self, texts: list[str], **options: Unpack[CallKeywords]) -> list[str]:
        """Best output of each source, in input order ("" for an empty or skipped one); options as
        `translate_nbest` takes them."""
        return [nbest[0].text if nbest else "" for nbest in self.translate_nbest(texts, **options)]

    def translate_nbest(self, texts: list[str], batch_tokens: int = 4000, first_line: int = 1,
                        warn: Warn | None = None, *, skip_bad: bool = False, skipped: dict[int, str] | None = None,
                        prefix: Prefixes | None = None, constraints: PhraseLists | None = None,
                        avoid: AvoidPhrases | None = None, glossary: Glossary | str | Path | None = None,
                        terms: str | None = None, term_forms: str = "exact", tgt_lang: str | None = None,
                        src_lang: str | None = None, max_window_seconds: float | None = None,
                        timestamps: bool = False, progress: bool = False,
                        **search: Unpack[SearchOptions]) -> list[list[Translation]]:
        """n-best hypotheses (best first) of each source, in input order; [] for an empty text.

        texts: the sources (texts, or file paths for an image or audio model). batch_tokens: padded
        source positions per batch. first_line: the line number of texts[0], used in warnings (a
        caller streaming a file in chunks passes its position). warn: where warnings go (default:
        this package's logger). skip_bad: a file that cannot be read gets [] and a warning instead of
        raising `SourceError`; `skipped`, if given, receives {index: reason} of each such file.
        Steering (docs/decoding-controls.md): prefix, one target prefix per source; constraints,
        one list of words or phrases per source that must appear (beam search); avoid, phrases that
        must not appear (one list for all sources, or one per source); glossary (a `Glossary` or its
        TSV file; text sources): its target terms become constraints where its source terms occur.
        terms: how constraints and glossary terms reach the model: "annotate", "constrain" or "both"
        (`seq2seq.inference.steering.term_mode`; default: "both" for a model trained with terms on its
        sources, docs/terminology.md, else "constrain"); with "annotate", the option term_bias > 0 gives each
        term's pieces a bonus (`seq2seq.inference.controls.TermBias`); term_forms "inflected": the beam takes any
        inflected form of a term given as a lemma ("exact": only the term as written).
        tgt_lang: the target language of a multilingual model, which needs one; a bilingual model
        refuses it (LanguageError, a ValueError). src_lang: the source language, for a model whose
        sources start with their own language's tag (`data.language_tag: both`: M2M100, NLLB,
        mBART-50), which needs one; other models ignore it. max_window_seconds, timestamps, progress:
        a `Transcriber`'s. search: the search options (`search_config`).
        """
        inputs = source_inputs(texts, prefix, constraints, avoid, first_line)
        call = Call(search, glossary=glossary, terms=terms, term_forms=term_forms, tgt_lang=tgt_lang,
                    src_lang=src_lang, batch_tokens=batch_tokens, skip_bad=skip_bad,
                    max_window_seconds=max_window_seconds, timestamps=timestamps, progress=progress)
        return self.run(inputs, call, first_line, warn, skipped)

    def translate_inputs(self, inputs: Sequence[SourceInput | str | Mapping[str, object]],
                         **options: Unpack[CallKeywords]) -> list[list[Translation]]:
        """n-best hypotheses of each input (a `SourceInput`, or its JSON form: a string or a dict), in
        input order; `options`: the `Call` (search options, glossary, terms, tgt_lang ...), first_line
        and warn as `translate_nbest` takes them. An input of another form is a FieldError naming it
        ("inputs[2]"); a steering field that a call may give all its inputs (`SHARED_FIELDS`) given for
        the whole call, a SteeringError (a keyword that shares its name with a field an input gives only
        for itself, e.g. a search option, is the call's)."""
        given = sorted(set(options) & set(SHARED_FIELDS))
        if given:
            raise SteeringError(f"{', '.join(given)} belong(s) to each input here (SourceInput.{given[0]}), "
                                "not to the call", field=given[0], code="bad_field")
        read = [x if isinstance(x, SourceInput) else read_input(x, f"inputs[{i}]") for i, x in enumerate(inputs)]
        first_line, warn = options.pop("first_line", 1), options.pop("warn", None)
        return self.run(read, call_of(options), first_line, warn, options.pop("skipped", None))

    def run(self, inputs: Sequence[SourceInput], call: Call, first_line: int = 1, warn: Warn | None = None,
            skipped: dict[int, str] | None = None) -> list[list[Translation]]:
        """The call: prepare -> search -> finish (see the module docstring). first_line: the line number
        of inputs[0], for messages; warn: where warnings go; skipped: receives {index: reason} of each
        file skipped with call.skip_bad."""
        warn = warn or log.warning
        prepared = self.prepare(inputs, call, first_line, warn)
        done = self._decode(prepared, call, first_line, warn, skipped)
        return [done.get(i, []) for i in range(len(inputs))]

    def prepare(self, inputs: Sequence[SourceInput], call: Call, first_line: int = 1,
                warn: Warn | None = None) -> PreparedCall:
        """The prepare step of a call (see the module docstring). On an engine without constrained search,
        terms default to "annotate" for a model trained with them, which needs no constraint, and
        constraints are refused otherwise."""
        warn = warn or log.warning
        cfg = call.resolved if call.resolved is not None else self.search_config(**call.search)
        can_constrain = "constraints" in self.capabilities.fields
        terms, glossary = self._terms(call), call.glossary
        annotates = self.annotates_terms
        if not can_constrain and terms is None and annotates:
            terms = "annotate"
        mode = term_mode(terms, annotates, self.path)
        if glossary is not None and not can_constrain and mode != "annotate":
            raise SteeringError(f"{self.capabilities.refusal('constraints')} (a glossary's terms are constraints)",
                                field="glossary", code="unsupported_option")
        if glossary is not None and not isinstance(glossary, Glossary):
            glossary = Glossary.load(glossary)
        if glossary is not None and self.processor.kind.reads_files:
            raise SteeringError(f"a glossary matches source text, but {self.path} reads "
                                f"{self.processor.kind.name} files; give constraints instead")
        if glossary is not None:
            glossary.check_writable(self.tokenizers.tgt)  # every target term, once: naming its line of the file
        inputs = list(inputs)
        texts = [x.text for x in inputs]
        found = _glossary_terms(inputs, glossary)  # each input's glossary terms
        self.capabilities.check_inputs(inputs, mode)
        if can_constrain:
            found = [self._checked(x, t, cfg, first_line + i, mode, warn)
                     for i, (x, t) in enumerate(zip(inputs, found))]
        if mode != "constrain":  # the terms on the sources, as the model was trained
            texts = [with_terms(x, t, mode) for x, t in zip(inputs, found)]
        controls = {}
        for i, (x, t) in enumerate(zip(inputs, found)):
            if not (x.steered or t):
                continue
            if not texts[i].strip():
                warn(Diagnostic("an empty input: its prefix, constraints and terms are not used (its output is empty)",
                                first_line + i, "text", "empty_input"))
                continue
            source = None if self.processor.kind.reads_files else texts[i]
            controls[i] = encode_steering(x, self.tokenizers.tgt, first_line + i, mode, source, call.term_forms,
                                          warn, prefer=cfg.term_bias > 0, terms=t)
        return PreparedCall(texts, cfg, mode, inputs, found, controls)

    def _terms(self, call: Call) -> str | None:
        """How the call asks its terms to reach the model (None: the model's default)."""
        return call.terms

    def _checked(self, given: SourceInput, terms: list[str], cfg: SearchConfig, line: int, mode: str,
                 warn: Warn) -> list[str]:
        """One input's glossary terms as the search gets them (`check_steering`), those beyond what the
        beam holds dropped with a warning."""
        kept, dropped = check_steering(given, terms, cfg, line, mode, self.device)
        if dropped:
            warn(Diagnostic(f"a beam of {cfg.beam} holds {cfg.beam - 1} constraints; glossary "
                            f"term(s) {dropped} not enforced (pass a larger --beam)", line, "glossary", "terms_dropped"))
        return kept

    @abstractmethod
    def _decode(self, prepared: PreparedCall, call: Call, first_line: int, warn: Warn,
                skipped: dict[int, str] | None) -> dict[int, list[Translation]]:
        """The engine's search step: {index: n-best list} of the inputs it decoded (see `run`)."""


def _glossary_terms(inputs: Sequence[SourceInput], glossary: Glossary | None) -> list[list[str]]:
    """Each input's glossary terms: the target terms of the source terms its text holds, less those it
    already constrains ([] each without a glossary)."""
    if glossary is None:
        return [[] for _ in inputs]
    return [[t for t in glossary.constraints_for(x.text) if t not in (x.constraints or [])] for x in inputs]


# ---- an engine over a stream of lines ---------------------------------------------------------

Decode = Callable[[list[SourceInput], Call, int, Warn], list[list[Translation]]]
"""A decoding call on a chunk of inputs: (inputs, call, first_line, warn) -> one n-best list per input
(`Engine.run`, or the text pipeline's `translate_line_inputs` bound to an engine)."""

Steer = Callable[[list[str]], list[SourceInput]]
"""Turns a chunk of input lines into their inputs, one a line (`seq2seq.cli.steering.Steerer`)."""


def translate_stream(
    translator: Engine,
    lines: Iterator[str],
    out: BinaryIO,
    emit: Callable[..., str],
    chunk_lines: int,
    call: Call,
    warn: Warn = stderr_warn,
    progress: bool = False,
    total: int | None = None,
    steer: Steer | None = None,
    pipeline: Decode | None = None,
) -> int:
    """Translate `lines` with `translator.run` (`decode_stream`; each chunk sorted into token-bounded
    batches by the translator), or with `pipeline`, a `Decode` that takes lines as people write them
    (the command line's: the documents layer's `translate_line_inputs` bound to the translator, sentences
    split and cased), every chunk with the one `call`. Each warning goes to `warn`, and those about one
    line to its output too (`emit`'s notes: `--json` prints them). Returns the number of lines."""
    by_line = ByInput(warn)
    run = pipeline or translator.run

    def decode(inputs: list[SourceInput], first_line: int) -> list[list[Translation]]:
        return run(inputs, call, first_line, by_line)

    return decode_stream(lines, out, decode, lambda i, _, r: emit(i, r, by_line.pop(i)), chunk_lines, progress,
                         total, steer)


def decode_stream(
    lines: Iterator[str],
    out: BinaryIO,
    decode: Callable[[list[SourceInput], int], list[list[Translation]]],
    emit: Callable[[int, str, list[Translation]], str],
    chunk_lines: int,
    progress: bool = False,
    total: int | None = None,
    steer: Steer | None = None,
) -> int:
    """Decode `lines` (texts, or media file paths) chunk by chunk, writing and flushing each chunk's
    output before reading the next: one `emit(index, source text, n-best list)` per line, in order.
    Returns the number of lines. decode(inputs, first_line) -> one n-best list per input. `progress`:
    a progress bar on stderr (lines done, of `total` if known). steer: turns a chunk's lines into their
    inputs (`seq2seq.cli.steering.Steerer`; its `close()` is called at the end of the input); without
    it, each line is an input without steering."""
    from tqdm import tqdm

    done = 0
    with tqdm(total=total, unit=" lines", disable=not progress, file=sys.stderr, dynamic_ncols=True) as bar:
        while True:
            chunk = list(itertools.islice(lines, chunk_lines))
            if not chunk:
                if steer is not None and hasattr(steer, "close"):
                    steer.close()
                return done
            inputs = steer(chunk) if steer is not None else [SourceInput(line) for line in chunk]
            results = decode(inputs, done + 1)
            text = "".join(emit(done + i, x.text, r) for i, (x, r) in enumerate(zip(inputs, results)))
            out.write(text.encode("utf-8"))
            out.flush()
            done += len(chunk)
            bar.update(len(chunk))


__all__ = ["Capabilities", "Decode", "Engine", "PreparedCall", "Steer", "decode_stream", "translate_stream"]
