"""Language and corpus tags: the reserved source pieces of multilingual and multi-corpus models.

A model is multilingual when its training corpora (`data.corpora`) have more than one target
language, or when its config declares its tagged target languages in `data.languages` (a model
without training corpora: `import-hf` of a multilingual opus-mt model, whose `>>fr<<` tokens become
`<2fr>`); `DataConfig.target_languages` reads either, and is the one source of truth. Every source
then starts with its target language's tag, `<2xx>` (Johnson et al. 2017: the tag on the source,
the decoder unchanged), then the tag of its corpus where that has one (e.g.
`<BT>` on back-translated pairs; Caswell et al. 2019). With `data.language_tag: decoder` the
language tag is the target's first token instead (M2M-100, NLLB): training targets start with it,
decoding forces it (`decoder_prefix`) and leaves it out of the output; corpus tags stay on the
source. With `data.language_tag: both` (M2M100, NLLB-200, mBART-50 imported by `import-hf`) the
target's first token is its language's tag as with `decoder`, and every source starts with the tag of
its own language (`source_prefix(config, "de", src_lang="en")` -> ["<2en>"]; both sides' languages are
`data.languages`). Each tag is one reserved SentencePiece piece (a user-defined symbol of the tokenizer, so it
is never split), and the config saved in the model directory says which languages and tags the
model knows:

    language_tag("de")                              -> "<2de>"
    model_languages(config)                         -> ["de", "fr"]    ([] for a bilingual model)
    reserved_pieces(config)                         -> ["<2de>", "<2fr>", "<BT>"]  (+ data.reserved)
    source_prefix(config, "fr")                     -> ["<2fr>"]        (checks the language; [] on the decoder)
    decoder_prefix(config, "fr")                    -> ["<2fr>"] with language_tag: decoder, else []
    tag_source("A dog.", "de", ["<BT>"])            -> "<2de> <BT> A dog."
    split_tags("<2de> <BT> A dog.")                 -> (["<2de>", "<BT>"], "A dog.")

The pipelines put the tags' ids before the source's own ids (training data: `seq2seq.data.cache`;
decoding: `TextProcessor.with_target_language`), never the tagged text through SentencePiece, which
would add a word-start piece "▁" before each tag: `tag_source` is the text form, for people and
files. `config` is the root `Config` or its `DataConfig`. Pure: nothing here reads files or models.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Union

from seq2seq.config.data_section import CORPUS_TAG, LANGUAGE_CODE, CorpusConfig, DataConfig, ValidSetConfig
from seq2seq.config.diagnostics import Seq2SeqError
from seq2seq.text.terminology import TERM

if TYPE_CHECKING:  # pragma: no cover
    from seq2seq.config.root import Config

LANGUAGE_TAG = re.compile(r"<2([^\s<>]+)>")


class LanguageError(Seq2SeqError, ValueError):
    """A target language a model cannot translate into (or a language given to a bilingual model);
    the message lists the model's languages."""


ModelSettings = Union["Config", DataConfig]  # a model's whole config, or its data section alone


def _data(config: ModelSettings) -> DataConfig:
    return config if isinstance(config, DataConfig) else config.data


def language_tag(lang: str) -> str:
    """"de" -> "<2de>"; LanguageError for a string that is not a language code."""
    if not isinstance(lang, str) or not LANGUAGE_CODE.fullmatch(lang):
        raise LanguageError(f"{lang!r} is not a language code (two or three letters, then optional -/_ parts: "
                            f"de, fra, pt_BR, zh-Hans)")
    return f"<2{lang}>"


def model_languages(config: ModelSettings) -> list[str]:
    """The target languages of a multilingual model, sorted; [] for a bilingual model (its corpora
    have one target language, or name none, and it has no data.languages)."""
    data = _data(config)
    return data.target_languages if data.multilingual else []


def source_languages(config: ModelSettings) -> list[str]:
    """The source languages a model was trained or validated on, sorted: the `src_lang` of its
    data.corpora and data.valid_sets; [] where none names one (the model does not say)."""
    data = _data(config)
    named: list[CorpusConfig | ValidSetConfig] = [*data.corpora, *data.valid_sets]
    return sorted({x.src_lang for x in named if x.src_lang is not None})


# A language code at the end of a file's name: "train.en.gz", "val.de", "corpus-fr"
FILE_LANGUAGE = re.compile(r"(?:^|[._-])([a-z]{2,3})(?:\.gz)?$")


def file_languages(config: ModelSettings) -> list[str] | None:
    """[source, target] language codes read from the training files' names (train.en.gz,
    train.de.gz), or None where they do not say."""
    data = _data(config)
    found = [FILE_LANGUAGE.search(name.replace("\\", "/").rsplit("/", 1)[-1])
             for name in (data.train_src, data.train_tgt) if name]
    codes = [m.group(1) for m in found if m]
    return codes if len(codes) == 2 and codes[0] != codes[1] else None


def source_language(config: ModelSettings) -> str | None:
    """The one language a model translates from: the `src_lang` its corpora name (`source_languages`)
    where there is exactly one, else the training source file's name (`file_languages`); None where
    neither says (several source languages, or files named otherwise)."""
    known = source_languages(config)
    if known:
        return known[0] if len(known) == 1 else None
    named = file_languages(config)
    return named[0] if named else None


def check_source_language(config: ModelSettings, lang: str, model: str, flag: str) -> None:
    """LanguageError when a model that knows its source languages (`source_languages`) does not
    translate from `lang` (given as `flag`, e.g. "--mono-lang"); nothing when it does not say."""
    known = source_languages(config)
    if known and lang not in known:
        raise LanguageError(f"{model} translates from {', '.join(known)}, not from {lang} ({flag} {lang}): "
                            f"give a model whose source language is {lang}")


def tags_on_decoder(config: ModelSettings) -> bool:
    """A multilingual model whose language tag is the decoder's first token (`data.language_tag`)."""
    data = _data(config)
    return data.multilingual and data.language_tag in ("decoder", "both")


def tags_source_language(config: ModelSettings) -> bool:
    """A multilingual model whose sources start with their own language's tag (`data.language_tag: both`)."""
    data = _data(config)
    return data.multilingual and data.language_tag == "both"


def target_reserved_pieces(config: ModelSettings) -> list[str]:
    """The reserved pieces the target tokenizer needs: the language tags of a model that puts them on
    the decoder (`tags_on_decoder`), else none."""
    return [language_tag(lang) for lang in model_languages(config)] if tags_on_decoder(config) else []


def reserved_pieces(config: ModelSettings) -> list[str]:
    """Every reserved source piece the model's tokenizer needs: the language tags (multilingual
    models with the tag on the source), then the corpus tags in the order the corpora first name
    them, then `data.reserved` (e.g. "<BLANK>", the filler of noised back-translation), then <term> for a
    model whose sources carry terms (`data.terminology`)."""
    data = _data(config)
    tagged = not tags_on_decoder(data) or tags_source_language(data)
    pieces = [language_tag(lang) for lang in model_languages(data)] if tagged else []
    terms = [TERM] if data.terminology.on else []
    for piece in [c.tag for c in data.corpora] + list(data.reserved) + terms:
        if piece is not None and piece not in pieces:
            pieces.append(piece)
    return pieces


def corpus_prefix(config: ModelSettings, corpus: CorpusConfig) -> list[str]:
    """The pieces put before every source of a training corpus: its target language's tag
    (multilingual models with the tag on the source), then its own tag."""
    return source_tag(config, corpus.tgt_lang, corpus.src_lang) + ([corpus.tag] if corpus.tag is not None else [])


def valid_prefix(config: ModelSettings, valid: ValidSetConfig) -> list[str]:
    """The pieces put before every source of a validation set: its target language's tag
    (multilingual models with the tag on the source; corpus tags are for training data only)."""
    return source_tag(config, valid.tgt_lang, valid.src_lang)


def source_tag(config: ModelSettings, tgt_lang: str | None, src_lang: str | None = None) -> list[str]:
    """The language tag a source into `tgt_lang` starts with: [<2xx>] for a multilingual model that puts
    it on the source, else [] (a bilingual model, no language, or the tag on the decoder); for a model
    that tags sources with their own language (`tags_source_language`), [<2src_lang>] ([] without one)."""
    if tags_source_language(config):
        return [language_tag(src_lang)] if src_lang is not None else []
    if tgt_lang is None or not _data(config).multilingual or tags_on_decoder(config):
        return []
    return [language_tag(tgt_lang)]


def decoder_prefix(config: ModelSettings, tgt_lang: str | None) -> list[str]:
    """The pieces every target into `tgt_lang` starts with: its language tag when the model puts it on
    the decoder (`tags_on_decoder`; training targets start with it, decoding forces it), else []."""
    return [language_tag(tgt_lang)] if tgt_lang is not None and tags_on_decoder(config) else []


def source_prefix(config: ModelSettings, tgt_lang: str | None, tags: Sequence[str] = (),
                  src_lang: str | None = None) -> list[str]:
    """The pieces a source to translate into `tgt_lang` starts with: its language tag (unless the
    model puts it on the decoder, `decoder_prefix`), or, for a model that tags sources with their own
    language (`data.language_tag: both`), the tag of `src_lang`; then `tags` (e.g. ["<BT>"]).

    LanguageError: a multilingual model without `tgt_lang`, or with one it was not trained for
    (the message lists its languages); a bilingual model given `tgt_lang`; a tag it was not trained with.
    """
    languages = model_languages(config)
    if languages and tgt_lang is None:
        raise LanguageError(f"this model is multilingual: choose a target language, one of {', '.join(languages)}")
    if not languages and tgt_lang is not None:
        raise LanguageError(f"this model translates into one language only (it was not trained with language tags); "
                            f"leave out the target language ({tgt_lang!r})")
    if tgt_lang is not None and tgt_lang not in languages:
        raise LanguageError(f"unknown target language {tgt_lang!r}; this model's languages: {', '.join(languages)}")
    if tags_source_language(config):
        if src_lang is None:
            raise LanguageError("this model's sources start with their language's tag: give the source language "
                                f"(--src-lang), one of {', '.join(languages)}")
        if src_lang not in languages:
            raise LanguageError(f"unknown source language {src_lang!r}; this model's languages: {', '.join(languages)}")
    known = [c.tag for c in _data(config).corpora if c.tag is not None]
    for tag in tags:
        if tag not in known:
            raise LanguageError(f"unknown corpus tag {tag!r}; this model's tags: {', '.join(known) or 'none'}")
    return source_tag(config, tgt_lang, src_lang) + list(tags)


def tag_source(text: str, tgt_lang: str | None, tags: Iterable[str] = ()) -> str:
    """The text form of a tagged source: "<2de> <BT> text" (tgt_lang None: the tags alone)."""
    pieces = ([language_tag(tgt_lang)] if tgt_lang is not None else []) + list(tags)
    for tag in pieces:
        if not CORPUS_TAG.fullmatch(tag):
            raise LanguageError(f"{tag!r} is not a tag (<NAME>, no spaces)")
    return " ".join([*pieces, text.strip()]) if pieces else text.strip()


def split_tags(text: str) -> tuple[list[str], str]:
    """The leading tags of a tagged source and the text after them: the inverse of `tag_source`."""
    tags: list[str] = []
    rest = text.strip()
    while True:
        match = CORPUS_TAG.match(rest)
        if match is None or (match.end() < len(rest) and not rest[match.end()].isspace()):
            return tags, rest
        tags.append(match.group())
        rest = rest[match.end():].lstrip()


def tag_language(piece: str) -> str | None:
    """"<2de>" -> "de"; None for a piece that is not a language tag."""
    match = LANGUAGE_TAG.fullmatch(piece)
    return match.group(1) if match and LANGUAGE_CODE.fullmatch(match.group(1)) else None
