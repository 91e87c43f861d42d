"""The `clean` section (`CleanConfig`): which rule filters `seq2seq clean` runs over a parallel corpus, in
which order, with which thresholds (the filters themselves: `seq2seq.data.filters`; docs/cleaning.md).

    clean:
      src_lang: en            # the languages each side must be in (the command's --src-lang/--tgt-lang win)
      tgt_lang: de
      filters: [length, html, urls, numbers, copy, ratio, truncation, script, language, lexicon, dedup]
      ratio: {tolerance: 1.6}
      language: {min_chars: 10}

Each filter's thresholds are a small frozen dataclass of its own, named as the filter is; a pair is
removed by the first filter in `filters` that rejects it, and counted under that filter only. Pure
config: nothing here imports the filters (the names in `filters` are checked where they are built).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from seq2seq.config.data_section import LANGUAGE_CODE
from seq2seq.config.checks import check_ranges, require

# The rule filters in their default order: the specific ones first (a copy or an HTML remnant is also
# often a bad ratio: the report should name it for what it is), language identification, the costliest,
# late, so it sees fewer pairs; dedup last, so its hash set holds only pairs every other filter kept.
DEFAULT_FILTERS = ("length", "html", "urls", "numbers", "copy", "ratio", "truncation", "script", "language",
                   "lexicon", "dedup")


@dataclass(frozen=True)
class LengthRules:
    """`length`: each side's size in characters and in whitespace-separated words (after stripping);
    an empty side is always removed (reason `empty`)."""

    min_chars: int = 1
    max_chars: int = 1000
    min_words: int = 1
    max_words: int = 200

    def __post_init__(self) -> None:
        check_ranges(self, "clean.length", {"min_chars": (1, None), "max_chars": (1, None),
                                            "min_words": (1, None), "max_words": (1, None)})
        require(not (self.min_chars > self.max_chars or self.min_words > self.max_words),
                "clean.length: a minimum is above its maximum "
                f"(chars {self.min_chars}..{self.max_chars}, words {self.min_words}..{self.max_words})")


@dataclass(frozen=True)
class RatioRules:
    """`ratio`: the target/source character ratio, relative to the corpus's own (`expected`; None: the
    median over the first `CleanConfig.sample_size` pairs, so en->de and en->zh need no tuning). A pair
    is removed when its ratio is more than `tolerance` times above or below the expected one; pairs
    whose longer side has at most `exempt_chars` characters are not judged (short lines vary most)."""

    tolerance: float = 1.6
    expected: float | None = None
    exempt_chars: int = 15

    def __post_init__(self) -> None:
        require(self.tolerance > 1.0, f"clean.ratio.tolerance must be above 1, got {self.tolerance}")
        require(self.expected is None or self.expected > 0,
                f"clean.ratio.expected must be positive, got {self.expected}")
        check_ranges(self, "clean.ratio", {"exempt_chars": (0, None)})


@dataclass(frozen=True)
class TruncationRules:
    """`truncation`: one side ends a sentence (. ! ? and their CJK and Arabic forms) and the other does
    not, and that other side is shorter than `max_share` of the length the expected ratio gives it:
    a line cut short (at a byte limit, by a bad sentence split)."""

    max_share: float = 0.7

    def __post_init__(self) -> None:
        check_ranges(self, "clean.truncation", {"max_share": (0.0, 1.0)})


@dataclass(frozen=True)
class HtmlRules:
    """`html`: tags (<b>, </p>, <br/>), character entities (&amp; &#39; &nbsp;) and boilerplate phrases
    ("click here", "accept cookies", "all rights reserved" and their German, French and Spanish forms,
    plus `extra_phrases`, matched case-insensitively) on either side."""

    tags: bool = True
    entities: bool = True
    boilerplate: bool = True
    extra_phrases: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CopyRules:
    """`copy`: the target is the source (identical once case, digits, punctuation and spaces are folded:
    reason `identical`) or nearly (the Jaccard overlap of their word sets is at least `max_overlap`:
    reason `near_identical`); sides of fewer than `min_words` words are only checked for identity."""

    max_overlap: float = 0.6
    min_words: int = 3

    def __post_init__(self) -> None:
        check_ranges(self, "clean.copy", {"max_overlap": (0.0, 1.0), "min_words": (1, None)})


@dataclass(frozen=True)
class ScriptRules:
    """`script`: at least `min_share` of each side's letters are in its language's script (Latin for en,
    Cyrillic for ru, Han for zh ...). A language the table does not know is not judged."""

    min_share: float = 0.8

    def __post_init__(self) -> None:
        check_ranges(self, "clean.script", {"min_share": (0.0, 1.0)})


@dataclass(frozen=True)
class LanguageRules:
    """`language`: py3langid's most likely language of each side must be that side's language.
    `candidates` narrows the languages it chooses among (None: all it knows, 140 in py3langid 0.4; fewer
    is faster and surer on short lines, but a language left out can only be mistaken for one kept);
    sides shorter than `min_chars` characters are not judged (too little text to tell)."""

    candidates: list[str] | None = None
    min_chars: int = 10

    def __post_init__(self) -> None:
        check_ranges(self, "clean.language", {"min_chars": (0, None)})


@dataclass(frozen=True)
class LexiconRules:
    """`lexicon`: a misaligned pair (the target of another source) shares no content words' translations.
    A translation lexicon is learnt from the first `CleanConfig.sample_size` pairs (words that co-occur
    in at least `min_count` pairs with a Dice coefficient of at least `min_dice`, each word's
    `max_translations` best; words in more than
    `max_df` of the pairs, "a", "the", "ein", are left out); a pair is removed when fewer than
    `min_coverage` of the known words of its two sides have a translation on the other side. Pairs
    with fewer than `min_known` known words (on both sides together) are not judged."""

    min_coverage: float = 0.25
    min_known: int = 4
    min_dice: float = 0.1
    min_count: int = 2
    max_df: float = 0.1
    max_translations: int = 3

    def __post_init__(self) -> None:
        check_ranges(self, "clean.lexicon", {"min_coverage": (0.0, 1.0), "min_known": (1, None),
                                             "max_translations": (1, None),
                                             "min_dice": (0.0, 1.0), "min_count": (1, None), "max_df": (0.0, 1.0)})


@dataclass(frozen=True)
class DedupRules:
    """`dedup`: exact duplicates (reason `duplicate`) and, with `near`, pairs equal once lowercased with
    digits, punctuation and whitespace folded (`near_duplicate`), of the whole pair or of the source only
    (`key: source`, as a corpus where each source should have one translation). The first copy stays.
    Kept as 8-byte digests in memory: about 120 bytes per kept pair (60 without `near`)."""

    near: bool = True
    key: Literal["pair", "source"] = "pair"


@dataclass(frozen=True)
class DcceRules:
    """`dcce` (a model-based filter, not in the default list): dual conditional cross-entropy
    (Junczys-Dowmunt 2018) with a `forward` (source -> target) and a `backward` (target -> source) model
    directory; a pair stays where its adequacy exp(-dcce) is at least `threshold`, or where it is among the
    best `keep_share` (the share of the first `sample_size` pairs turned into a threshold); one of the two.
    docs/scoring.md."""

    forward: str | None = None
    backward: str | None = None
    threshold: float | None = None
    keep_share: float | None = None
    batch_tokens: int = 4000

    def check(self) -> None:
        """The rules a run with `dcce` in `clean.filters` needs (one line naming the key)."""
        require(self.forward is not None and self.backward is not None,
                "clean.filters has dcce: give clean.dcce.forward and clean.dcce.backward (model "
                "directories: source -> target and target -> source)")
        require((self.threshold is None) != (self.keep_share is None),
                "clean.dcce needs threshold (an adequacy in (0, 1]) or keep_share (a share of the pairs), one of them")
        require(self.threshold is None or 0 < self.threshold <= 1,
                f"clean.dcce.threshold is an adequacy exp(-dcce) in (0, 1]; got {self.threshold}")
        require(self.keep_share is None or 0 < self.keep_share <= 1,
                f"clean.dcce.keep_share must be in (0, 1]; got {self.keep_share}")
        check_ranges(self, "clean.dcce", {"batch_tokens": (1, None)})


@dataclass(frozen=True)
class CleanConfig:
    """The `clean` section: the filters `seq2seq clean` runs, in order, and each one's thresholds.

    src_lang / tgt_lang: the languages of the two sides (ISO 639-1 codes such as en, de; the filters that
        need one, language and script, are skipped for a side without one).
    filters: the filters to run, in order (`DEFAULT_FILTERS`; `seq2seq.data.filters.filter_names()`
        lists every registered one, model-based filters included where registered).
    examples: how many removed pairs each reason keeps as examples in the report.
    sample_size: the first pairs the filters that learn from the corpus look at (ratio's expected ratio,
        lexicon's translations).
    """

    src_lang: str | None = None
    tgt_lang: str | None = None
    filters: list[str] = field(default_factory=lambda: list(DEFAULT_FILTERS))
    examples: int = 5
    sample_size: int = 20_000
    length: LengthRules = field(default_factory=LengthRules)
    ratio: RatioRules = field(default_factory=RatioRules)
    truncation: TruncationRules = field(default_factory=TruncationRules)
    html: HtmlRules = field(default_factory=HtmlRules)
    copy: CopyRules = field(default_factory=CopyRules)
    script: ScriptRules = field(default_factory=ScriptRules)
    language: LanguageRules = field(default_factory=LanguageRules)
    lexicon: LexiconRules = field(default_factory=LexiconRules)
    dedup: DedupRules = field(default_factory=DedupRules)
    dcce: DcceRules = field(default_factory=DcceRules)

    def __post_init__(self) -> None:
        for name in ("src_lang", "tgt_lang"):
            value = getattr(self, name)
            require(value is None or bool(LANGUAGE_CODE.fullmatch(value)),
                    f"clean.{name} {value!r} is not a language code (e.g. en, de, pt_BR)")
        require(len(set(self.filters)) == len(self.filters), f"clean.filters names a filter twice: {self.filters}")
        check_ranges(self, "clean", {"examples": (0, None), "sample_size": (1, None)})
        if "dcce" in self.filters:
            self.dcce.check()
