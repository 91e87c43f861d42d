"""The model calls of the server, made on the batching worker (`seq2seq.serve.batcher`), the only
thread that touches the model: a batch of texts (through the text pipeline, `translate_lines`) or
files (`Engine.run`), each with its steering, as one model call (`ModelCalls`), and what it gave each source (`Output`: its n-best list, or
`Unreadable` for a file that could not be read, and the warnings it drew).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from seq2seq.adapters.serving import using
from seq2seq.config.diagnostics import ByInput, Diagnostic, Warn
from seq2seq.documents.formats import document_translations
from seq2seq.documents.line_translation import pipeline_defaults, translate_line_inputs
from seq2seq.inference.glossary import Glossary
from seq2seq.inference.inputs import SourceInput, call_of
from seq2seq.inference.engine import Engine
from seq2seq.inference.steering import Steering
from seq2seq.serve.requests import Limits

log = logging.getLogger("seq2seq.serve.app")  # the server's log lines keep one name, whichever module logs them


@dataclass(frozen=True)
class Unreadable:
    """In place of a source's n-best list: the source could not be read, and why."""

    reason: str


@dataclass(frozen=True)
class Output:
    """What the model call gave one source: its n-best list (or `Unreadable`) and the warnings it drew."""

    hyps: Any
    warnings: list[Diagnostic]


class ModelCalls:
    """The batching worker's `run` for one model: `run_texts` for a model that reads sentences (the
    server's glossary applied to them), `run_files` for one that reads files."""

    def __init__(self, model: Engine, limits: Limits, glossary: Glossary | None = None) -> None:
        self.model, self.limits, self.glossary = model, limits, glossary
        self.steps = pipeline_defaults(model)  # split_sentences, casing, loop_guard, spans, markup

    def run_texts(self, items: list[tuple[str, Steering | None]], options: dict[str, Any]) -> list[Output]:
        """`_run_texts` with the adapter the options name (`serve --adapter`), if any."""
        options = dict(options)
        with using(self.model, options.pop("adapter", None)):
            return self._run_texts(items, options)

    def run_files(self, items: list[tuple[str, Steering | None]], options: dict[str, Any]) -> list[Output]:
        """`_run_files` with the adapter the options name (`serve --adapter`), if any."""
        options = dict(options)
        with using(self.model, options.pop("adapter", None)):
            return self._run_files(items, options)

    def _run_texts(self, items: list[tuple[str, Steering | None]], options: dict[str, Any]) -> list[Output]:
        """Each text's n-best list; items: (text, its steering or None). The texts go through the text
        pipeline as `seq2seq translate` sends its lines (`translate_line_inputs`: sentences split and cased as
        the model directory says, unless the request's `split_sentences` / `casing` / `loop_guard` say otherwise)."""
        warn, notes = self._warnings(log.warning)
        options = dict(options)
        steps = {name: options.pop(name, default) for name, default in self.steps.items()}
        fmt = options.pop("format", "text")
        if fmt != "text":  # each text a whole document (the route refuses per-text steering with it)
            docs = document_translations(self.model, [text for text, _ in items], fmt, warn=warn,
                                         batch_tokens=self.limits.batch_tokens, glossary=self.glossary, **steps,
                                         **options)
            return [Output([t], notes.get(i, [])) for i, t in enumerate(docs)]
        call = call_of({**options, "glossary": self.glossary, "batch_tokens": self.limits.batch_tokens})
        results = translate_line_inputs(self.model, _inputs(items), call, 1, warn, **steps)
        return [Output(hyps, notes.get(i, [])) for i, hyps in enumerate(results)]

    def _run_files(self, items: list[tuple[str, Steering | None]], options: dict[str, Any]) -> list[Output]:
        """Each file's n-best list, or `Unreadable` with the reason it was skipped; items: (path, steering)."""
        skipped: dict[int, str] = {}
        warn, notes = self._warnings(log.info)
        call = call_of({**options, "batch_tokens": self.limits.batch_tokens, "skip_bad": True})
        results = self.model.run(_inputs(items), call, 1, warn, skipped)
        return [Output(Unreadable(skipped[i]) if i in skipped else hyps, notes.get(i, []))
                for i, hyps in enumerate(results)]

    @staticmethod
    def _warnings(log_it: Any) -> tuple[Warn, dict[int, list[Diagnostic]]]:
        """A `warn` for the model call that logs each warning and keeps those about one input in
        {index: [diagnostics]}."""
        warn = ByInput(lambda diagnostic: log_it("%s", diagnostic))
        return warn, warn.notes


def _inputs(items: list[tuple[str, Steering | None]]) -> list[SourceInput]:
    """The engine's input of each (text or path, its steering or None)."""
    return [SourceInput(text, s.prefix, s.constraints, s.avoid) if s else SourceInput(text) for text, s in items]
