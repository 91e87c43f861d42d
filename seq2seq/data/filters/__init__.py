"""Rule filters for noisy parallel text: what `seq2seq clean` runs (docs/cleaning.md; the `clean` config
section: `seq2seq.config.clean_section`). One filter a module, each a `PairFilter` (base.py) registered
here by name:

    length       empty sides, too few or too many characters or words
    ratio        a target/source length ratio far from the corpus's own
    truncation   one side ends its sentence, the other stops short
    html         tags, entities, boilerplate ("Click here", cookie banners)
    urls         URLs or e-mail addresses that differ between the sides
    numbers      numbers that differ between the sides
    copy         the source copied into the target (identical or nearly)
    script       a side's letters not in its language's script
    langid       `language`: a side not in its language (py3langid)
    lexicon      a misaligned pair: few words with their translation on the other side (a lexicon
                 learnt from the corpus's first pairs)
    dedup        exact and near duplicates (main process, last)

    base         `PairFilter`, `FilterError`
    normalise    `fold`: the form near duplicates and copies compare
    language_codes  `base_language`: pt_BR -> pt, deu -> de
    pipeline     chunks of pairs judged by the filters in worker processes, in input order
    report       `CleanReport`: per filter and reason, the pairs removed and the first examples
    corpus       `clean_corpus`: two files in, the kept pairs (and removed ones, with their reason) out
    training     `cleaned_data`: a config's `clean:` section applied by `seq2seq train`, cached

A new filter is a module with a `PairFilter` subclass plus one line in `BUILTIN`; a filter from outside
the package (a model-based one, such as dual conditional cross-entropy) calls `register_filter(name,
factory)` before `build_filters`, and is then named in `clean.filters` like the rules.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Callable

from seq2seq.config.clean_section import CleanConfig
from seq2seq.data.filters.base import FilterError, Pair, PairFilter

# name -> "module:class" of the built-in filters, imported when first built.
BUILTIN = {
    "length": "seq2seq.data.filters.length:LengthFilter",
    "ratio": "seq2seq.data.filters.ratio:RatioFilter",
    "truncation": "seq2seq.data.filters.truncation:TruncationFilter",
    "html": "seq2seq.data.filters.html:HtmlFilter",
    "urls": "seq2seq.data.filters.urls:UrlFilter",
    "numbers": "seq2seq.data.filters.numbers:NumberFilter",
    "copy": "seq2seq.data.filters.copy:CopyFilter",
    "script": "seq2seq.data.filters.script:ScriptFilter",
    "language": "seq2seq.data.filters.langid:LanguageFilter",
    "lexicon": "seq2seq.data.filters.lexicon:LexiconFilter",
    "dedup": "seq2seq.data.filters.dedup:DedupFilter",
}
FilterFactory = Callable[[CleanConfig], PairFilter]
_REGISTERED: dict[str, FilterFactory] = {}


def register_filter(name: str, factory: FilterFactory) -> None:
    """Make `name` a filter `clean.filters` can name: `factory(cfg)` builds it (a `PairFilter` subclass,
    or a function returning one). A model-based filter sets `in_workers = False` to judge in the main
    process, in batches (`keep_batch`)."""
    if name in BUILTIN:
        raise FilterError(f"filter name {name!r} is a built-in filter's")
    _REGISTERED[name] = factory


def filter_names() -> list[str]:
    """Every filter `clean.filters` can name: the built-in ones, then the registered ones."""
    return [*BUILTIN, *_REGISTERED]


def _factory(name: str, key: str) -> FilterFactory:
    if name in _REGISTERED:
        return _REGISTERED[name]
    if name not in BUILTIN:
        close = difflib.get_close_matches(name, filter_names(), n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise FilterError(f"{key}: unknown filter {name!r}.{hint} Filters: {', '.join(filter_names())}")
    module, cls = BUILTIN[name].split(":")
    return getattr(importlib.import_module(module), cls)


def build_filters(cfg: CleanConfig) -> list[PairFilter]:
    """The filters `cfg.filters` names, in its order; FilterError naming `clean.filters[i]` for an unknown one."""
    return [_factory(name, f"clean.filters[{i}]")(cfg) for i, name in enumerate(cfg.filters)]


__all__ = ["BUILTIN", "FilterError", "Pair", "PairFilter", "build_filters", "filter_names", "register_filter"]
