"""Lines as people write them through any engine, one n-best list per line: the one text pipeline of
`seq2seq translate`, `seq2seq test`, the server's /translate and the Python API. Its entry point is
`translate_line_inputs(engine, inputs, call)` (one `SourceInput` a line and the engine's `Call`, as the
command line and the server build them); `translate_lines` is the Python API's form of it, texts with
per-line steering lists and the call's keywords.

    from seq2seq import Translator, translate_lines
    t = Translator.load("runs/quickstart/model")
    translate_lines(t, ["A MAN RIDES A BIKE. A dog runs!"])[0][0].text
      -> "EIN MANN FÄHRT FAHRRAD. Ein Hund rennt!"

Each line is split into its sentences (`seq2seq.documents.sentences`), each sentence case-normalised
(`seq2seq.documents.casing`), and ALL the sentences of the call are translated in ONE
`engine.translate_nbest` call (so the engine batches them by length as it batches lines). Outputs that
loop where their source does not (`seq2seq.documents.loops`) are searched again, alone, with a
repetition guard (`no_repeat_ngram` = `LOOP_GUARD`; `loop_guard`); every other output is the engine's
as it came.
Each output is re-cased, and a line's sentences are joined back with the line's own spacing between
them (its leading and trailing whitespace dropped, as a one-sentence line's always was).

With `spans` (on by default), each sentence's non-translatables (and, with `markup`, its inline tags)
are taken out before casing (`seq2seq.documents.spans.mask`); the sentences that had some are
translated with the last decoder layer's attention (in a second engine call) and get their spans back
after re-casing, through `seq2seq.documents.alignment.word_alignment` (the attention with the word
lexicon of the engine's model directory, where it has one: `engine_lexicon`; `unmask`; a span it cannot
place is warned about, naming the line). Their attention is dropped again unless the call asked for it.

A line's `Translation` of rank r joins rank r of each of its sentences (a sentence with fewer
hypotheses gives its last): text joined with the line's spacing; score and logprob summed;
token_ids, pieces, token_logprobs and src_pieces concatenated, sentence by sentence (each sentence's
pieces are the model's, before re-casing; token_logprobs and src_pieces keep each sentence's EOS, so a
line of k sentences has len(pieces) + k token_logprobs); attention, where asked, block-diagonal [its
token_logprobs, its src_pieces]. A one-sentence line gets the engine's `Translation` itself (its
text re-cased where its source was UPPER CASE): with the three steps off, or on a line of one
sentence written as usual whose output does not loop, the output is the engine's, bit for bit.

Steering: each steering field of a line's input goes to its sentences by the field's declared rule
(`seq2seq.inference.inputs.FieldRule.parts`; which field has which rule: docs/decoding-controls.md):
to the first sentence, to every sentence, or to the whole line, which is then translated unsplit, with
a note saying why when it holds several sentences. A glossary is looked up in each sentence (the engine finds the terms of
each text it gets). Every other argument goes to the engine as it is. Warnings and errors name the input line, never a sentence's position in the engine call.

An empty or blank line goes to the engine as it is and gives [] (an empty output line, and the
engine's warning where it carried steering); no sentence is dropped: a sentence whose
output is empty draws a warning naming its line.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from typing_extensions import Unpack

from seq2seq.config.diagnostics import Diagnostic, Seq2SeqError, Warn
from seq2seq.documents import casing as casing_rules
from seq2seq.documents import spans as span_rules
from seq2seq.documents.alignment import word_alignment
from seq2seq.documents.loops import output_loops
from seq2seq.documents.sentences import Sentence, split
from seq2seq.inference.engine import Engine
from seq2seq.inference.inputs import FIELD_RULES, Call, CallOptions, SourceInput, SteeringLists, inputs_and_call
from seq2seq.inference.results import Translation
from seq2seq.storage.model_dir import ModelDir
from seq2seq.text.lexicon import Lexicon
from seq2seq.text.languages import source_language

log = logging.getLogger(__name__)

LOOP_GUARD = 3  # the `no_repeat_ngram` a looped output is searched again with
SENTENCE_LEVEL = "sentence_level"  # metadata.json: the model was trained on single sentences


@dataclass(frozen=True)
class Unit:
    """One sentence of one line, as the engine translates it: the line's index, the sentence (its
    text as written and the spacing after it), and how it was cased (`cased.text` goes to the engine)."""

    line: int
    sentence: Sentence
    cased: casing_rules.Cased


PIPELINE_STEPS = ("split_sentences", "casing", "loop_guard", "spans", "markup")  # `translate_lines`' switches


def pipeline_defaults(engine: object) -> dict[str, bool]:
    """The steps of `translate_lines` a model gets by default: "split_sentences" and "casing" for a model
    trained on single sentences (what its model directory's metadata.json says, `sentence_level`; a
    directory that does not say, an older model or a CTranslate2 export, counts as one); "loop_guard"
    and "spans" (URLs, numbers, {variables}... kept verbatim) always; "markup" (inline tags) only when
    asked, since a plain text may hold a "<" of its own."""
    path = getattr(engine, "path", None)
    meta: dict[str, object] = {}
    if path is not None and (Path(path) / "metadata.json").is_file():
        import json

        meta = json.loads((Path(path) / "metadata.json").read_text(encoding="utf-8"))
    on = bool(meta.get(SENTENCE_LEVEL, True))
    return {"split_sentences": on, "casing": on, "loop_guard": True, "spans": True, "markup": False}


def engine_source_language(engine: object) -> str | None:
    """The language the engine's model translates from (`seq2seq.text.languages.source_language`)."""
    config = getattr(engine, "config", None)
    return source_language(config) if config is not None else None


class LineKeywords(CallOptions, SteeringLists, total=False):
    """`translate_lines`' keywords besides its lines, batch size, first line, warnings and steps: the
    per-line steering lists (`SteeringLists`) and a `Call`'s fields."""


class LineOptions(LineKeywords, total=False):
    """`translate_lines`' keywords besides its lines, batch size, first line and warnings: its steps,
    source_lang, the per-line steering lists and a `Call`'s fields (what `document_translations` passes on)."""

    split_sentences: bool
    casing: bool
    loop_guard: bool
    spans: bool
    markup: bool
    source_lang: str | None


def translate_lines(
    engine: Engine,
    lines: Sequence[str],
    batch_tokens: int = 4000,
    first_line: int = 1,
    warn: Warn | None = None,
    *,
    split_sentences: bool = True,
    casing: bool = True,
    loop_guard: bool = True,
    spans: bool = True,
    markup: bool = False,
    source_lang: str | None = None,
    **options: Unpack[LineKeywords],
) -> list[list[Translation]]:
    """One n-best list per line of `lines`, in order ([] for an empty or blank line); see the module
    docstring. split_sentences / casing / loop_guard: the steps (`pipeline_defaults` says a model's defaults).
    source_lang: the rules sentences are split and cased by (default: the model's source language,
    `engine_source_language`; English where it does not say). options: the per-line steering lists
    (`SteeringLists`, as `Engine.translate_nbest` takes them), made the
    lines' inputs at once (`inputs_and_call`), and the rest of the engine's `Call` (search options,
    glossary, terms, tgt_lang, ...)."""
    given, call = inputs_and_call(lines, {**options, "batch_tokens": batch_tokens}, first_line)
    return translate_line_inputs(engine, given, call, first_line, warn,
                                 split_sentences=split_sentences, casing=casing, loop_guard=loop_guard, spans=spans,
                                 markup=markup, source_lang=source_lang)


def translate_line_inputs(engine: Engine, given: Sequence[SourceInput], call: Call, first_line: int = 1,
                          warn: Warn | None = None, *, split_sentences: bool = True, casing: bool = True,
                          loop_guard: bool = True, spans: bool = True, markup: bool = False,
                          source_lang: str | None = None) -> list[list[Translation]]:
    """One n-best list per input of `given` (a line's text and its own steering), in order, decoded with
    the engine's `call` (see the module docstring); first_line, warn and the steps as `translate_lines`
    takes them."""
    warn = warn or log.warning
    lang = source_lang or engine_source_language(engine)
    lines = [x.text for x in given]
    units = _units(lines, split_sentences, casing, lang, given, first_line, warn, spans, markup)

    # spans (seq2seq.documents.spans): each sentence masked before it is cased; the engine asked for the
    # last layer's attention only for the sentences with spans; unmasked after re-casing
    masks = [span_rules.mask(u.sentence.text, markup=markup) for u in units] if spans else None
    if masks is not None:
        units = [u if not m.spans else dataclasses.replace(
            u, cased=casing_rules.normalise(m.text, lang) if casing else casing_rules.Cased(m.text, casing_rules.Case.AS_WRITTEN))
            for u, m in zip(units, masks)]

    def remapped(d: Diagnostic) -> None:
        warn(d if d.line is None else dataclasses.replace(d, line=first_line + units[d.line - 1].line))

    inputs = _unit_inputs(units, given)
    attention_asked = call.search.get("attention_layer") is not None
    if masks is not None and any(m.spans for m in masks) and not attention_asked:
        results = _spans_call(engine, inputs, units, masks, first_line, remapped, call)
    else:
        results = _engine_call(engine, inputs, units, first_line, remapped, call)
    if loop_guard:
        attended = {k for k, m in enumerate(masks) if m.spans} if masks is not None and not attention_asked else set()
        _guard_loops(engine, inputs, units, results, call, attended)
    per_line: list[list[tuple[Unit, list[Translation]]]] = [[] for _ in lines]
    lexicon = engine_lexicon(engine) if masks is not None and any(m.spans for m in masks) else None
    for k, (unit, hyps) in enumerate(zip(units, results)):
        hyps = [h if unit.cased.case is casing_rules.Case.AS_WRITTEN else
                dataclasses.replace(h, text=casing_rules.recase(unit.cased, h.text)) for h in hyps]
        if masks is not None and masks[k].spans:
            hyps = _unmasked(masks[k], unit, hyps, first_line + unit.line, warn, not attention_asked, lexicon)
        if unit.sentence.text and (not hyps or not hyps[0].text.strip()):
            warn(Diagnostic(f"the sentence {unit.sentence.text[:60]!r} got an empty translation",
                            first_line + unit.line, "text", "empty_sentence"))
        per_line[unit.line].append((unit, hyps))
    return [_joined(parts) for parts in per_line]


def _spans_call(engine: Engine, inputs: list[SourceInput], units: list[Unit], masks: list[span_rules.Masked],
                first_line: int, warn: Warn, call: Call) -> list[list[Translation]]:
    """The engine call in two: the sentences with spans with the last decoder layer's attention (what
    `word_alignment` reads), the others as asked; results in the units' order."""
    results: list[list[Translation]] = [[] for _ in units]
    for with_spans in (False, True):
        ks = [k for k, m in enumerate(masks) if bool(m.spans) == with_spans]
        if not ks:
            continue

        def numbered(d: Diagnostic, ks: list[int] = ks) -> None:
            warn(d if d.line is None else dataclasses.replace(d, line=ks[d.line - 1] + 1))
        got = _engine_call(engine, [inputs[k] for k in ks], [units[k] for k in ks], first_line, numbered,
                           call.searching(attention_layer=-1) if with_spans else call)
        for k, hyps in zip(ks, got):
            results[k] = hyps
    return results


def _unmasked(masked: span_rules.Masked, unit: Unit, hyps: list[Translation], line: int, warn: Warn,
              drop_attention: bool, lexicon: Lexicon | None) -> list[Translation]:
    """Each hypothesis with the sentence's spans put back through its word alignment (with the engine's
    word lexicon, where its model directory has one)."""
    out = []
    for h in hyps:
        text, notes = span_rules.unmask(masked, h.text, word_alignment(h, unit.cased.text, lexicon), line)
        for d in notes[:1] if h is hyps[0] else []:
            warn(d)
        out.append(dataclasses.replace(h, text=text, attention=None if drop_attention else h.attention))
    return out


def engine_lexicon(engine: Engine) -> Lexicon | None:
    """The word lexicon of the engine's (first) model directory, None where it has none; read once per
    version of the file."""
    path = ModelDir(engine.path).lexicon_path
    try:
        return _read_lexicon(str(path), path.stat().st_mtime_ns)
    except FileNotFoundError:
        return None


@functools.lru_cache(maxsize=8)
def _read_lexicon(path: str, mtime_ns: int) -> Lexicon:
    """`Lexicon.load`, cached by the file's path and modification time."""
    return Lexicon.load(path)


def _units(lines: Sequence[str], split_sentences: bool, casing: bool, lang: str | None,
           given: Sequence[SourceInput], first_line: int, warn: Warn, spans: bool = False, markup: bool = False) -> list[Unit]:
    """The sentences of every line, in order, each cased as the engine will translate it; with `spans`, no
    sentence boundary falls inside a protected span or (with markup) between a tag and its partner. A
    line whose input (`given`) holds a field that holds for the whole line only (`SourceInput.whole_field`)
    is one sentence."""
    units = []
    for i, line in enumerate(lines):
        keep = span_rules.unbroken(line, markup) if spans and split_sentences else ()
        sentences = [s for s in split(line, lang, keep) if s.text] if split_sentences else \
            ([Sentence(line.strip())] if line.strip() else [])
        whole = given[i].whole_field() if len(sentences) > 1 else None
        if whole is not None:
            warn(Diagnostic(f"a line of {len(sentences)} sentences with {whole} is translated as one "
                            f"sentence ({FIELD_RULES[whole].unsplit_because})", first_line + i, whole,
                            f"unsplit_{whole}"))
            sentences = [Sentence(line.strip())]
        if not sentences:  # an empty line goes to the engine as it is: [] back, and its warnings as ever
            units.append(Unit(i, Sentence("", line), casing_rules.Cased(line, casing_rules.Case.AS_WRITTEN)))
        for s in sentences:
            cased = casing_rules.normalise(s.text, lang) if casing else \
                casing_rules.Cased(s.text, casing_rules.Case.AS_WRITTEN)
            units.append(Unit(i, s, cased))
    return units


def _unit_inputs(units: list[Unit], given: Sequence[SourceInput]) -> list[SourceInput]:
    """The engine's input of each unit (its cased text): the line's input as one part of it
    (`SourceInput.part`: its steering by each field's rule, the first sentence's or each's)."""
    first: dict[int, int] = {}  # line -> its first unit
    for k, u in enumerate(units):
        first.setdefault(u.line, k)
    return [given[u.line].part(u.cased.text, first[u.line] == k) for k, u in enumerate(units)]


def _engine_call(engine: Engine, inputs: list[SourceInput], units: list[Unit], first_line: int, warn: Warn,
                 call: Call) -> list[list[Translation]]:
    """The engine's call on the units' inputs, numbered from 1; an error naming a unit is raised again
    naming its line."""
    if not inputs:
        return []
    try:
        return engine.run(inputs, call, 1, warn)
    except Seq2SeqError as e:
        d = e.diagnostic
        if d.line is None or not 1 <= d.line <= len(units):
            raise
        try:
            again = type(e)(d.message, line=first_line + units[d.line - 1].line, field=d.field, code=d.code)
        except TypeError:
            raise e from None
        raise again from None


def _guard_loops(engine: Engine, inputs: list[SourceInput], units: list[Unit], results: list[list[Translation]],
                 call: Call, attended: set[int]) -> None:
    """Search again, with `no_repeat_ngram` = LOOP_GUARD, the units whose best output loops where their
    source does not (`output_loops`); their results are replaced in `results`. The `attended` units (those
    with spans) are searched with the last layer's attention, as the first time (their spans need it)."""
    given = call.search.get("no_repeat_ngram") or 0
    if given and given <= LOOP_GUARD:
        return  # the call's own guard is as strict already
    looped = [k for k, (u, hyps) in enumerate(zip(units, results))
              if hyps and output_loops(u.cased.text, hyps[0].text)]
    if not looped:
        return
    log.info("%d output(s) looped; searched again with no_repeat_ngram %d", len(looped), LOOP_GUARD)
    guarded = call.searching(no_repeat_ngram=LOOP_GUARD)
    for group in ([k for k in looped if k not in attended], [k for k in looped if k in attended]):
        if not group:
            continue
        again = engine.run([inputs[k] for k in group],
                           guarded.searching(attention_layer=-1) if group[0] in attended else guarded,
                           1, lambda d: None)  # the first search told its warnings already
        for k, hyps in zip(group, again):
            results[k] = hyps


def _joined(parts: list[tuple[Unit, list[Translation]]]) -> list[Translation]:
    """A line's n-best list from its sentences' (see the module docstring)."""
    if not parts:
        return []
    if len(parts) == 1:
        return parts[0][1]
    ranks = max(len(hyps) for _, hyps in parts)
    return [_join_rank([(u, hyps[min(r, len(hyps) - 1)] if hyps else None) for u, hyps in parts])
            for r in range(ranks)]


def _join_rank(parts: list[tuple[Unit, Translation | None]]) -> Translation:
    text = ""
    for k, (unit, h) in enumerate(parts):
        text += (h.text if h is not None else "") + (unit.sentence.space if k < len(parts) - 1 else "")
    hyps = [h for _, h in parts if h is not None]
    attention = None
    if hyps and all(h.attention is not None for h in hyps):
        width = sum(len(h.src_pieces) for h in hyps)
        attention, before = [], 0
        for h in hyps:
            assert h.attention is not None
            for row in h.attention:
                attention.append([0.0] * before + list(row) + [0.0] * (width - before - len(row)))
            before += len(h.src_pieces)
    return Translation(text=text, score=sum(h.score for h in hyps), logprob=sum(h.logprob for h in hyps),
                       token_ids=[t for h in hyps for t in h.token_ids], pieces=[p for h in hyps for p in h.pieces],
                       token_logprobs=[x for h in hyps for x in h.token_logprobs],
                       src_pieces=[p for h in hyps for p in h.src_pieces], attention=attention)
