"""The model calls of the server, made on the batching worker (`seq2seq.serve.batcher`), the only
thread that touches the model: a batch of texts (through the text pipeline, `translate_lines`) or
files (`Engine.run`), each with its steering, as one model call (`ModelCalls`), and what it gave each source (`Output`: its n-best list, or
`Unreadable` for a file that could not be read, and the warnings it drew).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Callable

from seq2seq.adapters.serving import using
from seq2seq.config.diagnostics import ByInput, Diagnostic, Warn
from seq2seq.documents.formats import document_translations
from seq2seq.documents.line_translation import pipeline_defaults, translate_line_inputs
from seq2seq.inference.glossary import Glossary
from seq2seq.inference.inputs import Call, SourceInput
from seq2seq.inference.engine import Engine
from seq2seq.inference.results import Translation
from seq2seq.serve.requests import Limits, PipelineSteps, RequestOptions

log = logging.getLogger("seq2seq.serve.app")  # the server's log lines keep one name, whichever module logs them


@dataclass(frozen=True)
class Unreadable:
    """In place of a source's n-best list: the source could not be read, and why."""

    reason: str


@dataclass(frozen=True)
class Output:
    """What the model call gave one source: its n-best list (or `Unreadable`) and the warnings it drew."""

    hyps: list[Translation] | Unreadable
    warnings: list[Diagnostic]


@dataclass(frozen=True)
class ServedCall:
    """What the items of a model call share, as the route checked them: the engine's `Call` (its search
    options resolved once, by the route: `Call.resolved`; the server's glossary and batch_tokens) and
    the request's options, of which the model call reads the text pipeline's steps (the others: the
    model's defaults), what each text is (`format`) and the adapter it runs with (none: the base)."""

    call: Call
    options: RequestOptions


Item = SourceInput
"""One source of a model call: its text (or a file's path) and its steering, the request's merged in."""


class ModelCalls:
    """The batching worker's `run` for one model: `run_texts` for a model that reads sentences (the
    server's glossary applied to them), `run_files` for one that reads files."""

    def __init__(self, model: Engine, limits: Limits, glossary: Glossary | None = None) -> None:
        self.model, self.limits, self.glossary = model, limits, glossary
        self.steps = pipeline_defaults(model)  # split_sentences, casing, loop_guard, spans, markup

    def run_texts(self, items: list[Item], served: ServedCall) -> list[Output]:
        """`_run_texts` with the adapter the request names (`serve --adapter`), if any."""
        with using(self.model, served.options.get("adapter")):
            return self._run_texts(items, served)

    def run_files(self, items: list[Item], served: ServedCall) -> list[Output]:
        """`_run_files` with the adapter the request names (`serve --adapter`), if any."""
        with using(self.model, served.options.get("adapter")):
            return self._run_files(items, served)

    def _run_texts(self, items: list[Item], served: ServedCall) -> list[Output]:
        """Each text's n-best list. The texts go through the text
        pipeline as `seq2seq translate` sends its lines (`translate_line_inputs`: sentences split and cased as
        the model directory says, unless the request's `split_sentences` / `casing` / `loop_guard` say otherwise)."""
        warn, notes = self._warnings(log.warning)
        steps = self._steps(served.options)
        call, fmt = served.call, served.options.get("format", "text")
        if fmt != "text":  # each text a whole document (the route refuses per-text steering with it)
            docs = document_translations(self.model, [x.text for x in items], fmt, warn=warn,
                                         batch_tokens=call.batch_tokens, glossary=call.glossary, terms=call.terms,
                                         term_forms=call.term_forms, tgt_lang=call.tgt_lang, **steps, **call.search)
            return [Output([t], notes.get(i, [])) for i, t in enumerate(docs)]
        results = translate_line_inputs(self.model, items, call, 1, warn, **steps)
        return [Output(hyps, notes.get(i, [])) for i, hyps in enumerate(results)]

    def _run_files(self, items: list[Item], served: ServedCall) -> list[Output]:
        """Each file's n-best list, or `Unreadable` with the reason it was skipped (an item's text: the path)."""
        skipped: dict[int, str] = {}
        warn, notes = self._warnings(log.info)
        call = dataclasses.replace(served.call, glossary=None, skip_bad=True)
        results = self.model.run(items, call, 1, warn, skipped)
        return [Output(Unreadable(skipped[i]) if i in skipped else hyps, notes.get(i, []))
                for i, hyps in enumerate(results)]

    def _steps(self, given: PipelineSteps) -> PipelineSteps:
        """The text pipeline's steps of a call: those the request gives, the model's defaults for the others."""
        default = self.steps
        return PipelineSteps(split_sentences=given.get("split_sentences", default["split_sentences"]),
                             casing=given.get("casing", default["casing"]),
                             loop_guard=given.get("loop_guard", default["loop_guard"]),
                             spans=given.get("spans", default["spans"]), markup=given.get("markup", default["markup"]))

    @staticmethod
    def _warnings(log_it: Callable[[str, Diagnostic], None]) -> tuple[Warn, dict[int, list[Diagnostic]]]:
        """A `warn` for the model call that logs each warning and keeps those about one input in
        {index: [diagnostics]}."""
        warn = ByInput(lambda diagnostic: log_it("%s", diagnostic))
        return warn, warn.notes

