"""Steering a translation: the one place where an input's steering becomes its controls.

What a user asks of one input is its `SourceInput` (`seq2seq.inference.inputs`: its prefix,
constraints and banned phrases) and, with a glossary, the target terms its text holds (`Engine.prepare`
finds them). `check_steering` checks them against the search, and `encode_steering` turns them into the
target token ids the search works with (`seq2seq.inference.controls.SourceControls`), refusing what
cannot be honoured with one line that names the input line.

How text becomes tokens. A constraint or banned phrase is tokenized as the target tokenizer
tokenizes it inside a sentence, after a space: SentencePiece segments each word on its own, so
"Kundenkonto" is "▁Kunden konto" wherever the word stands. A prefix is tokenized as the start of the
output. Matching is on tokens: a constraint is met, and a banned phrase produced, only as exactly
those tokens (see docs/decoding-controls.md for what this means for case and word forms).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Sequence

import torch

from seq2seq.config.diagnostics import Diagnostic, Warn
from seq2seq.config.search import SearchConfig
from seq2seq.inference.controls import SourceControls, SteeringError
from seq2seq.inference.inputs import SourceInput
from seq2seq.inference.memory import constraints_problem
from seq2seq.text.terminology import annotate, forms_of
from seq2seq.text.tokenizer import unwritable

if TYPE_CHECKING:  # pragma: no cover
    from seq2seq.text.tokenizer import Tokenizer


# the steering field each kind of phrase comes from (a diagnostic's `field`)
FIELD_OF = {"prefix": "prefix", "constraint": "constraints", "glossary term": "glossary", "banned phrase": "avoid"}


TERM_MODES = ("annotate", "constrain", "both")


def term_mode(asked: str | None, annotates: bool, model: object) -> str:
    """How a call's terms (its constraints and glossary terms) reach the model: "annotate" (appended to the
    source, for a model trained with `data.terminology`: it places them itself, nothing guaranteed),
    "constrain" (the constrained beam: guaranteed), or "both" (annotated, and the beam guarantees them).
    None: "both" for a model that takes annotations, else "constrain". SteeringError for another value, or
    for annotations asked of a model not trained with them."""
    if asked is None:
        return "both" if annotates else "constrain"
    if asked not in TERM_MODES:
        raise SteeringError(f"terms must be one of {', '.join(TERM_MODES)}, got {asked!r}", field="terms",
                            code="unknown_choice")
    if asked != "constrain" and not annotates:
        raise SteeringError(f"terms {asked}: {model} was not trained with terms on its sources (data.terminology); "
                            f"it takes terms as constraints only (terms constrain)")
    return asked


def with_terms(given: SourceInput, terms: Sequence[str], mode: str) -> str:
    """The source text the model reads: the input's text, with its terms (its constraints, then its
    glossary terms `terms`) appended where `mode` annotates."""
    phrases = [*(given.constraints or []), *terms]
    if mode == "constrain" or not phrases or not given.text.strip():
        return given.text
    return annotate(given.text, phrases)


TERM_FORMS = ("exact", "inflected")


def encode_steering(given: SourceInput, tokenizer: Tokenizer, line: int, mode: str = "constrain",
                    source: str | None = None, forms: str = "exact",
                    warn: Warn | None = None, prefer: bool = False, terms: Sequence[str] = ()) -> SourceControls:
    """The token ids of one input's controls (see the module docstring): its prefix, its banned phrases,
    and its terms (its constraints, then the glossary terms `terms`) as constraints unless `mode` only
    annotates, where `prefer` makes them the terms the search gives a bonus (`SourceControls.preferred`, `decoding.term_bias`); with the sentence-end rule of `source`
    (`sentence_ends`). forms "inflected": a term is met by any of its inflected forms (its last word with
    each ending of `seq2seq.text.terminology.forms_of`; the term as given is a lemma), "exact" only as
    written. SteeringError naming the line for an empty constraint or banned phrase, text the target
    vocabulary cannot represent, or a term that holds a banned phrase; `warn` is told of a prefix that
    holds one (`_check_contradictions`)."""
    if forms not in TERM_FORMS:
        raise SteeringError(f"term_forms must be one of {', '.join(TERM_FORMS)}, got {forms!r}", field="term_forms",
                            code="unknown_choice")

    def phrase(kind: str, text: str) -> list[int]:
        if not text.strip():
            raise SteeringError(f"an empty {kind}; give a word or phrase", line=line, field=FIELD_OF[kind],
                                code="empty_phrase")
        ids = tokenizer.encode([text.strip()])[0]
        _check_representable(kind, text, ids, tokenizer, line)
        return ids

    prefix: list[int] = []
    if given.prefix and given.prefix.strip():
        prefix = tokenizer.encode([given.prefix.strip()])[0]
        _check_representable("prefix", given.prefix, prefix, tokenizer, line)
    constraints, of = [], []
    for i, text in enumerate([*(given.constraints or []), *terms]):
        first = phrase("constraint", text)
        written = [first]
        if forms == "inflected":
            head, _, last = text.strip().rpartition(" ")
            for form in forms_of(last)[1:]:
                ids = tokenizer.encode([f"{head} {form}".strip()])[0]
                if tokenizer.unk_id not in ids and ids not in written:
                    written.append(ids)
        constraints += written
        of += [i] * len(written)
    avoided = [phrase("banned phrase", a) for a in given.avoid or []]
    _check_contradictions(given, terms, prefix, constraints, of, avoided, line, warn)
    enforced = mode != "annotate" and bool(constraints)
    preferred = mode == "annotate" and prefer and bool(constraints)
    return SourceControls(
        prefix=prefix,
        constraints=constraints if enforced else [],
        avoid=avoided,
        sentence_ends=sentence_ends(source) if source is not None and enforced else None,
        forms=of if enforced and forms == "inflected" else None,
        preferred=constraints if preferred else [],
        preferred_forms=of if preferred and forms == "inflected" else None,
    )


WORD_JOINERS = frozenset("-'’")  # inside a word: "Equinox-Stand", "Männer's" (`seq2seq.text.terminology.words`)


def continuation_pieces(tokenizer: Tokenizer, vocab_size: int) -> torch.Tensor:
    """[vocab_size] bool: the target pieces that continue a word (no leading "▁", starting with a letter, a
    digit or a hyphen or apostrophe, which joins the word to the next: "Equinox-Stand" is one word): a
    constraint followed by one is not met as a word (`seq2seq.inference.controls.ConstraintTracker`)."""
    from seq2seq.text.tokenizer import SPECIAL_IDS

    special = set(SPECIAL_IDS.values())
    out = torch.zeros(vocab_size, dtype=torch.bool)
    for i in range(min(vocab_size, tokenizer.vocab_size)):
        piece = tokenizer.id_to_piece(i)
        out[i] = i not in special and not piece.startswith("\u2581") and (piece[:1].isalnum() or
                                                                          piece[:1] in WORD_JOINERS)
    return out


SENTENCE_END = frozenset(".!?…。！？")


def sentence_end_pieces(tokenizer: Tokenizer, vocab_size: int) -> torch.Tensor:
    """[vocab_size] bool: the target pieces that end a sentence (full stop, question or exclamation mark, with
    or without the word-start mark), for the constraints' sentence-end rule (`ConstraintTracker`)."""
    out = torch.zeros(vocab_size, dtype=torch.bool)
    for i in range(min(vocab_size, tokenizer.vocab_size)):
        text = tokenizer.id_to_piece(i).lstrip("\u2581")
        out[i] = bool(text) and set(text) <= SENTENCE_END
    return out


def sentence_ends(text: str) -> int:
    """How many sentences `text` ends: its runs of sentence-end punctuation before a space or the end."""
    return len(re.findall(r"[.!?…。！？]+(?=[\s\"'”’)\]]*(?:\s|$))", text.strip()))


def _check_representable(kind: str, text: str, ids: list[int], tokenizer: Tokenizer, line: int) -> None:
    shown = unwritable(tokenizer, text, ids)
    if shown is not None:
        raise SteeringError(f"the {kind} {text!r} cannot be written with the model's target vocabulary "
                            f"({shown!r} would become <unk>)", line=line, field=FIELD_OF[kind], code="unwritable")


def _holds(ids: list[int], part: list[int]) -> bool:
    """Does the token sequence `ids` hold `part` as a contiguous run?"""
    return any(ids[i: i + len(part)] == part for i in range(len(ids) - len(part) + 1))


def _check_contradictions(given: SourceInput, glossary_terms: Sequence[str], prefix: list[int],
                          constraints: list[list[int]], of: list[int], avoided: list[list[int]], line: int,
                          warn: Warn | None) -> None:
    """Where an input asks for what it also bans, one line naming the two fields: SteeringError for a
    constraint or glossary term (every form of it, `of` mapping forms to terms) that holds an avoided
    phrase (as tokens: the banned phrase can never be produced, so neither can the term); a warning
    (`warn`) for a prefix that holds one, which is kept as given (a prefix wins over a banned phrase)."""
    if not avoided:
        return
    wanted = given.constraints or []
    terms = [*wanted, *glossary_terms]
    for text, banned in zip(given.avoid or [], avoided):
        if prefix and _holds(prefix, banned) and warn is not None:
            warn(Diagnostic(f"the prefix {given.prefix!r} holds the avoided phrase {text!r}; the prefix is "
                            "kept as given (a prefix wins over a banned phrase)", line, "prefix", "prefix_avoided"))
        for i, term in enumerate(terms):
            if all(_holds(ids, banned) for ids, t in zip(constraints, of) if t == i):
                kind = "constraint" if i < len(wanted) else "glossary term"
                raise SteeringError(f"the {kind} {term!r} holds the avoided phrase {text!r}; an output cannot "
                                    "contain it and avoid it: drop one of the two", line=line, field=FIELD_OF[kind],
                                    code="term_avoided")


def check_steering(given: SourceInput, terms: Sequence[str], cfg: SearchConfig, line: int, mode: str = "constrain",
                   device: torch.device | str | None = None) -> tuple[list[str], list[str]]:
    """(the glossary terms the search gets, those it drops) of an input with the glossary terms `terms`;
    SteeringError naming the line where the search `cfg` cannot honour the input's constraints: they
    need beam search, a beam of k holds at most k - 1 constraints (one bank each, and one for hypotheses that met none yet), and tracking them
    must fit in the memory a search on `device` may take (`seq2seq.inference.memory.constraints_problem`).
    Glossary terms beyond what the beam holds are dropped (the first ones found stay) and returned, for a
    warning. Terms that are only annotated (`mode` "annotate") ask nothing of the search."""
    n = len(given.constraints or [])
    if mode == "annotate" or (not n and not terms):
        return list(terms), []
    what = "glossary terms" if not n else "constraints"
    if cfg.strategy != "beam":
        raise SteeringError(f"{what} need beam search (--beam 2 or more), not {cfg.strategy} search", line=line,
                            field="beam", code="needs_beam")
    room = cfg.beam - 1
    if n > room:
        raise SteeringError(f"{n} constraints, but a beam of {cfg.beam} holds at most {room}; "
                            f"pass --beam {n + 1} or more", line=line, field="beam", code="beam_too_small")
    kept = list(terms[: room - n])
    tracked = n + len(kept)
    too_many = constraints_problem(cfg.beam, tracked, device)
    if too_many is not None:
        raise SteeringError(too_many, line=line, field="constraints", code="too_many_constraints")
    return kept, list(terms[room - n:])
