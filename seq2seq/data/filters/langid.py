"""`language` (langid.py): language identification of each side with py3langid (a naive Bayes model over byte
n-grams that ships inside the package: no download; chosen over lingua-language-detector by accuracy and
speed on short Multi30K sentences, docs/cleaning.md). A side whose most likely language is not its
own is removed; close variants the model cannot tell apart count as the same (`SAME_LANGUAGE`)."""

from __future__ import annotations

import copy
import functools
from typing import TYPE_CHECKING

from seq2seq.config.clean_section import CleanConfig
from seq2seq.data.filters.base import FilterError, PairFilter
from seq2seq.data.filters.language_codes import base_language

if TYPE_CHECKING:  # (py3langid ships no type information: mypy leaves its names unchecked)
    from py3langid.langid import LanguageIdentifier

# Languages py3langid confuses with each other on short lines, and a corpus would not tell apart.
SAME_LANGUAGE = [{"no", "nb", "nn"}, {"ar", "ary", "arz"}, {"hr", "bs", "sr"}, {"ms", "id"}]


@functools.lru_cache(maxsize=1)
def _full_identifier() -> LanguageIdentifier:
    """py3langid's identifier over every language it knows, loaded once a process (0.6 s)."""
    from py3langid import langid

    return langid.LanguageIdentifier.from_modelpath(langid.MODEL_DIR / langid.MODEL_FILE)


def _identifier(candidates: list[str] | None) -> LanguageIdentifier:
    """An identifier choosing among `candidates` (None: all): a copy of the loaded one, narrowed
    (`set_languages` replaces the copy's tables, leaving the loaded one's as they are)."""
    identifier = copy.copy(_full_identifier())
    if candidates:
        identifier.set_languages(candidates)
    return identifier


def accepted(lang: str) -> frozenset[str]:
    """The labels that count as `lang` (itself, and its `SAME_LANGUAGE` group)."""
    for group in SAME_LANGUAGE:
        if lang in group:
            return frozenset(group)
    return frozenset({lang})


class LanguageFilter(PairFilter):
    """Reasons: `source_language` / `target_language`. The model is loaded in each process that judges
    (0.6 s), not pickled."""

    name = "language"
    reasons = ("source_language", "target_language")

    def __init__(self, cfg: CleanConfig) -> None:
        super().__init__(cfg)
        self.langs = [base_language(lang) if lang else None for lang in (cfg.src_lang, cfg.tgt_lang)]
        candidates = [base_language(c) for c in cfg.language.candidates] if cfg.language.candidates else None
        identifier = _identifier(None)
        known = set(identifier.nb_classes)
        for lang, key in zip([*self.langs, *(candidates or [])],
                             ["clean.src_lang", "clean.tgt_lang", *(f"clean.language.candidates[{i}]"
                                                                    for i in range(len(candidates or [])))]):
            if lang is not None and lang not in known:
                raise FilterError(f"{key}: py3langid does not know the language {lang!r}; give one of "
                                  f"{', '.join(sorted(known))}, or leave 'language' out of clean.filters")
        if candidates:
            missing = [lang for lang in self.langs if lang is not None and lang not in candidates]
            if missing:
                raise FilterError(f"clean.language.candidates must include the corpus's languages; "
                                  f"{', '.join(missing)} missing")
        self.candidates = candidates
        self.accepted = [accepted(lang) if lang else None for lang in self.langs]
        if candidates:
            identifier.set_languages(candidates)
        self._model: LanguageIdentifier | None = identifier

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_model": None}  # each worker loads its own

    def classify(self, text: str) -> str:
        """py3langid's most likely language of `text`."""
        if self._model is None:
            self._model = _identifier(self.candidates)
        return self._model.classify(text)[0]

    def keep(self, src: str, tgt: str) -> str | None:
        shortest = self.cfg.language.min_chars
        for text, ok, reason in zip((src, tgt), self.accepted, self.reasons):
            if ok is not None and len(text) >= shortest and self.classify(text) not in ok:
                return reason
        return None
