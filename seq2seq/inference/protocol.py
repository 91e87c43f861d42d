"""What the command line and the server need of a decoding engine (`TranslationEngine`).

The torch `Translator`, the `Generator`s built on it (`Captioner`, `Transcriber`) and the CTranslate2
engine (`seq2seq.deploy.engine.CTranslate2Translator`) all satisfy it; tests/test_protocol.py checks
each, by `isinstance` and by the signatures of the methods.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, runtime_checkable

from seq2seq.config.search import SearchConfig
from seq2seq.inference.results import Translation


@runtime_checkable
class TranslationEngine(Protocol):
    """Sources in (texts, or files for an image or audio model), n-best `Translation`s out.

    defaults: the model's `decoding` config; search_config(**options) applies a call's search
    options to it (`seq2seq.inference.options.resolve_search`, plus what the engine cannot do),
    ValueError for a bad one; translate_nbest gives each source's n-best list in input order
    ([] for an empty or skipped source), translate each source's best text ("" for none).
    """

    defaults: SearchConfig
    device: Any

    def search_config(self, **options: Any) -> SearchConfig: ...

    def translate_nbest(self, texts: list[str], batch_tokens: int = 4000, first_line: int = 1,
                        warn: Callable[[str], None] | None = None, **options: Any) -> list[list[Translation]]: ...

    def translate(self, texts: list[str], **options: Any) -> list[str]: ...
