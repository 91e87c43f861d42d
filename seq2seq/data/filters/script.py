"""`script`: the share of a side's letters that are in its language's writing system (`clean.script`):
Latin for en and de, Cyrillic for ru, Han for zh, Han and kana for ja ... A side in another script is
the wrong language, or mojibake; digits, punctuation and symbols are not letters and do not count."""

from __future__ import annotations

import re

from seq2seq.config.clean_section import CleanConfig
from seq2seq.data.filters.base import PairFilter
from seq2seq.data.filters.language_codes import base_language

LETTER = re.compile(r"[^\W\d_]")
# Each script's letters (its Unicode blocks), as a character class.
SCRIPTS = {
    "latin": "A-Za-z\u00aa\u00b5\u00ba\u00c0-\u024f\u0250-\u02af\u1e00-\u1eff\u2c60-\u2c7f\ua720-\ua7ff\uff21-\uff5a",
    "cyrillic": "\u0400-\u052f\u1c80-\u1c8f\u2de0-\u2dff\ua640-\ua69f",
    "greek": "\u0370-\u03ff\u1f00-\u1fff",
    "arabic": "\u0600-\u06ff\u0750-\u077f\u08a0-\u08ff\ufb50-\ufdff\ufe70-\ufeff",
    "hebrew": "\u0590-\u05ff\ufb1d-\ufb4f",
    "devanagari": "\u0900-\u097f\ua8e0-\ua8ff",
    "bengali": "\u0980-\u09ff",
    "gurmukhi": "\u0a00-\u0a7f",
    "gujarati": "\u0a80-\u0aff",
    "oriya": "\u0b00-\u0b7f",
    "tamil": "\u0b80-\u0bff",
    "telugu": "\u0c00-\u0c7f",
    "kannada": "\u0c80-\u0cff",
    "malayalam": "\u0d00-\u0d7f",
    "sinhala": "\u0d80-\u0dff",
    "thai": "\u0e00-\u0e7f",
    "lao": "\u0e80-\u0eff",
    "tibetan": "\u0f00-\u0fff",
    "myanmar": "\u1000-\u109f",
    "georgian": "\u10a0-\u10ff\u2d00-\u2d2f",
    "ethiopic": "\u1200-\u139f",
    "khmer": "\u1780-\u17ff",
    "mongolian": "\u1800-\u18af",
    "hangul": "\u1100-\u11ff\u3130-\u318f\uac00-\ud7af",
    "kana": "\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f",
    "han": "\u2e80-\u2fdf\u3005\u3007\u3021-\u3029\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff",
    "armenian": "\u0530-\u058f",
}
_LATIN = ("af an ast az br bs ca cs cy da de en eo es et eu fi fo fr ga gl hr ht hu id is it jv ku la lb lt lv "
          "mg ms mt nb nl nn no oc pl pt qu ro rw sk sl sq sv sw tl tr vi vo wa xh zu").split()
LANGUAGE_SCRIPTS: dict[str, tuple[str, ...]] = {
    **{lang: ("latin",) for lang in _LATIN},
    **{lang: ("cyrillic",) for lang in "be bg kk ky mk mn ru tg uk".split()},
    **{lang: ("arabic",) for lang in "ar fa ps ug ur".split()},
    "sr": ("cyrillic", "latin"), "el": ("greek",), "he": ("hebrew",), "yi": ("hebrew",), "hi": ("devanagari",),
    "mr": ("devanagari",), "ne": ("devanagari",), "bn": ("bengali",), "as": ("bengali",), "pa": ("gurmukhi",),
    "gu": ("gujarati",), "or": ("oriya",), "ta": ("tamil",), "te": ("telugu",), "kn": ("kannada",),
    "ml": ("malayalam",), "si": ("sinhala",), "th": ("thai",), "lo": ("lao",), "dz": ("tibetan",),
    "my": ("myanmar",), "ka": ("georgian",), "am": ("ethiopic",), "km": ("khmer",), "hy": ("armenian",),
    "zh": ("han",), "ja": ("han", "kana"), "ko": ("hangul", "han"),
}


def script_pattern(lang: str | None) -> re.Pattern[str] | None:
    """The letters of `lang`'s script(s); None for no language, or one the table does not know."""
    scripts = LANGUAGE_SCRIPTS.get(base_language(lang)) if lang else None
    return re.compile("[" + "".join(SCRIPTS[s] for s in scripts) + "]") if scripts else None


def script_share(text: str, pattern: re.Pattern[str]) -> float | None:
    """The share of `text`'s letters that `pattern` matches; None for a text without letters."""
    letters = len(LETTER.findall(text))
    return len(pattern.findall(text)) / letters if letters else None


def latin_script(lang: str | None) -> bool:
    """Whether `lang` is written in Latin letters (so a plain-ASCII side needs no counting)."""
    return bool(lang) and "latin" in LANGUAGE_SCRIPTS.get(base_language(lang or ""), ())


class ScriptFilter(PairFilter):
    """Reasons: `source_script` / `target_script`, a side with less than `min_share` of its letters in
    its language's script."""

    name = "script"
    reasons = ("source_script", "target_script")

    def __init__(self, cfg: CleanConfig) -> None:
        super().__init__(cfg)
        self.sides = ((script_pattern(cfg.src_lang), latin_script(cfg.src_lang), "source_script"),
                      (script_pattern(cfg.tgt_lang), latin_script(cfg.tgt_lang), "target_script"))

    def keep(self, src: str, tgt: str) -> str | None:
        least = self.cfg.script.min_share
        for text, (pattern, latin, reason) in zip((src, tgt), self.sides):
            if pattern is None or (latin and text.isascii()):  # (an ASCII line in a Latin script: no regex)
                continue
            share = script_share(text, pattern)
            if share is not None and share < least:
                return reason
        return None
