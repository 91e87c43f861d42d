"""The step every engine shares: a call's arguments become what its search starts from.

Every engine (`Translator`, the `Generator`s, an ensemble, the CTranslate2 engine) decodes a call in
three steps:

    prepare   `prepare_call` (here, shared): the search options resolved by the engine's
              `search_config`, batch_tokens checked, how terms reach the model (`term_mode`), the
              glossary loaded and checked, each input's `Steering` read (`steer_inputs`) and checked
              against the search, so that what cannot be honoured is refused in one line naming the
              input before anything is decoded; the terms appended to the sources where the model
              reads them so (`with_terms`)
    search    the engine's own: the torch search over its model (`Translator._search`), over a
              recording's windows (`Transcriber`), or CTranslate2's batches; each input's steering
              encoded to target token ids (`encode_steering`) on the way
    finish    n-best `Translation`s in input order ([] for an empty or skipped source), texts decoded

so every engine accepts and refuses the same calls with the same words, and differs only in what its
search can do (an engine that cannot honour constraints says so: its `constraints_refused`). The server
runs the same step on a request before queueing it, so a request is refused as the engine would refuse
it, before any decoding.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from seq2seq.config.diagnostics import Diagnostic, Warn
from seq2seq.config.search import SearchConfig
from seq2seq.inference.glossary import Glossary
from seq2seq.inference.steering import (
    AvoidPhrases, PhraseLists, Prefixes, Steering, SteeringError, check_steering, steer_inputs, term_mode, with_terms,
)

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from seq2seq.model.encoders.sources import SourceProcessor
    from seq2seq.text.tokenizer import TokenizerPair

log = logging.getLogger("seq2seq.inference")


class Prepares(Protocol):
    """What `prepare_call` reads of an engine."""

    @property
    def path(self) -> Path: ...

    @property
    def annotates_terms(self) -> bool: ...

    @property
    def processor(self) -> SourceProcessor: ...

    @property
    def tokenizers(self) -> TokenizerPair: ...

    @property
    def constraints_refused(self) -> str | None:
        """None for an engine whose search honours constraints, else the message that refuses them."""

    @property
    def device(self) -> torch.device | str: ...

    def search_config(self, **options: Any) -> SearchConfig: ...


@dataclass
class PreparedCall:
    """A call after its prepare step: the sources as the model reads them (terms appended where
    annotated), the resolved search, how terms reach the model, and each input's checked steering
    (None: the call asks for none)."""

    texts: list[str]
    cfg: SearchConfig
    mode: str
    steering: list[Steering] | None


def check_batch_tokens(batch_tokens: int) -> None:
    """ValueError unless a call's batch_tokens is a usable batch size."""
    if batch_tokens < 1:
        raise ValueError(f"batch_tokens must be >= 1, got {batch_tokens}")


def prepare_call(engine: Prepares, texts: list[str], batch_tokens: int, first_line: int, warn: Warn | None, *,
                 prefix: Prefixes | None = None, constraints: PhraseLists | None = None,
                 avoid: AvoidPhrases | None = None,
                 glossary: Glossary | str | Path | None = None, terms: str | None = None,
                 options: dict[str, Any]) -> PreparedCall:
    """The prepare step of a call to `engine` (see the module docstring); the arguments as
    `Translator.translate_nbest` takes them, `options` its search options. On an engine that cannot
    honour constraints (`constraints_refused`), terms default to "annotate" for a model trained with them,
    which needs no constraint, and constraints are refused otherwise."""
    cfg = engine.search_config(**options)
    constraints_refused = engine.constraints_refused
    check_batch_tokens(batch_tokens)
    annotates = engine.annotates_terms
    if constraints_refused is not None and terms is None and annotates:
        terms = "annotate"
    mode = term_mode(terms, annotates, engine.path)
    if glossary is not None and constraints_refused is not None and mode != "annotate":
        raise SteeringError(f"{constraints_refused} (a glossary's terms are constraints)", field="glossary",
                            code="unsupported_option")
    if glossary is not None and not isinstance(glossary, Glossary):
        glossary = Glossary.load(glossary)
    if glossary is not None and engine.processor.kind.reads_files:
        raise SteeringError(f"a glossary matches source text, but {engine.path} reads "
                            f"{engine.processor.kind.name} files; give constraints instead")
    if glossary is not None:
        glossary.check_writable(engine.tokenizers.tgt)  # every target term, once: naming its line of the file
    steering = steer_inputs(len(texts), prefix=prefix, constraints=constraints, avoid=avoid, glossary=glossary,
                            sources=texts, first_line=first_line)
    if steering is not None and constraints_refused is not None:
        if mode != "annotate" and any(s.constraints for s in steering):
            raise SteeringError(constraints_refused, field="constraints", code="unsupported_option")
    elif steering is not None:
        steering = [_checked(s, cfg, first_line + i, mode, warn, engine.device) for i, s in enumerate(steering)]
    if steering is not None and mode != "constrain":  # the terms on the sources, as the model was trained
        texts = [with_terms(text, steer, mode) for text, steer in zip(texts, steering)]
    return PreparedCall(texts, cfg, mode, steering)


def _checked(steering: Steering, cfg: SearchConfig, line: int, mode: str, warn: Warn | None,
             device: torch.device | str) -> Steering:
    """One input's steering as the search on `device` gets it (`check_steering`), glossary terms beyond what
    the beam holds dropped with a warning."""
    steering, dropped = check_steering(steering, cfg, line, mode, device)
    if dropped:
        (warn or log.warning)(Diagnostic(f"a beam of {cfg.beam} holds {cfg.beam - 1} constraints; glossary "
                                         f"term(s) {dropped} not enforced (pass a larger --beam)",
                                         line, "glossary", "terms_dropped"))
    return steering

