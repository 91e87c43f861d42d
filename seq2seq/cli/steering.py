"""The command line's steering options (target prefix, constraints, banned phrases, glossary), read
line by line beside the input (docs/decoding-controls.md).

    --prefix-file FILE       one target prefix per input line (an empty line: none)
    --constraints-file FILE  per input line, the words or phrases that must appear, TAB-separated
    --avoid PHRASE           a phrase that must not appear in any output (repeatable)
    --avoid-file FILE        per input line, phrases that must not appear, TAB-separated
    --glossary FILE          TSV of source term, target term (seq2seq.inference.glossary)
    --terms MODE             annotate, constrain or both: how the terms reach the model (docs/terminology.md)
    --term-forms inflected   a term given as a lemma is met by any of its inflected forms
    --json-input             each input line is one input's JSON form (seq2seq.inference.inputs):
                             {"text": ..., "prefix": ..., "constraints": [...], "avoid": [...]}

The files are read in step with the input, chunk by chunk, so they stream as the input does; one
that ends before or after the input is an error naming it (the output file is then not written).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from typing import TYPE_CHECKING, Callable, Iterator, TypedDict

import click

from seq2seq.config import json_reader
from seq2seq.inference.inputs import (
    PHRASE_FIELDS, STEERING_FIELDS, SourceInput, read_input, read_phrases, read_steering_fields,
)
from seq2seq.inference.steering import TERM_FORMS, TERM_MODES, SteeringError
from seq2seq.text.lines import check_input_file, decoded_lines, open_binary, warn

if TYPE_CHECKING:
    from seq2seq.cli.common import Options
    from seq2seq.inference.glossary import Glossary

def steering_options(glossary: bool = True, json_input: bool = True) -> Callable[[Callable], Callable]:
    """The steering options of a command; glossary / json_input: whether it has --glossary / --json-input
    (a command whose sources are files has neither)."""
    options = [
        click.option("--prefix-file", type=click.Path(dir_okay=False), default=None,
                     help="Target prefixes, one per input line: each output starts with its line's prefix."),
        click.option("--constraints-file", type=click.Path(dir_okay=False), default=None,
                     help="Per input line, TAB-separated words or phrases that must appear (beam search)."),
        click.option("--avoid", multiple=True, metavar="PHRASE",
                     help="A word or phrase that must not appear in any output (repeatable)."),
        click.option("--avoid-file", type=click.Path(dir_okay=False), default=None,
                     help="Per input line, TAB-separated words or phrases that must not appear."),
    ]
    if glossary:
        options.append(click.option("--glossary", type=click.Path(dir_okay=False), default=None,
                                    help="TSV 'source term<TAB>target term': a term found in a line must be "
                                         "translated as given (a constraint)."))
        options.append(click.option("--terms", type=click.Choice(TERM_MODES), default=None,
                                    help="How constraints and glossary terms reach a model trained with terms "
                                         "on its sources (docs/terminology.md): annotate (the model places them), "
                                         "constrain (the constrained beam guarantees them), both. Default: both "
                                         "for such a model, else constrain."))
        options.append(click.option("--term-forms", type=click.Choice(TERM_FORMS), default=None,
                                    help="inflected: a constraint or glossary term given as a lemma is met by "
                                         "any of its inflected forms (schlank: schlanke, schlanker, ...); "
                                         "exact (the default): only as written."))
    if json_input:
        options.append(click.option("--json-input", is_flag=True,
                                    help='Each input line is a JSON object: {"text": ..., and optionally "prefix", '
                                         '"constraints", "avoid"}.'))

    def decorate(fn: Callable) -> Callable:
        for option in reversed(options):
            fn = option(fn)
        return fn

    return decorate


class CallSteering(TypedDict, total=False):
    """The steering options that belong to the call rather than to a line (`Steerer.call_options`), those given."""

    glossary: Glossary
    terms: str
    term_forms: str


class SharedSteering(CallSteering, total=False):
    """The steering arguments that apply to a whole document (`Steerer.shared`), those given."""

    avoid: list[str]


class Steerer:
    """Turns each chunk of input lines into one `SourceInput` a line (its text and steering: the
    line-aligned files' entries, or the --json-input line's fields, with --avoid merged in by the rule
    of every front-end, `SourceInput.with_shared`); `call_options()` gives the options of the call
    (glossary, terms); `close()` checks that the line-aligned files ended with the input."""

    def __init__(self, prefix_file: str | None = None, constraints_file: str | None = None,
                 avoid: tuple[str, ...] = (), avoid_file: str | None = None, glossary: str | None = None,
                 json_input: bool = False, terms: str | None = None, term_forms: str | None = None) -> None:
        from seq2seq.inference.glossary import Glossary

        self.json_input, self.terms, self.term_forms = json_input, terms, term_forms
        self.avoid = list(avoid)
        # what every line gets: --avoid (None where not given, so that a line without steering has none)
        self.every_line = SourceInput("", avoid=self.avoid or None)
        # the files read: what the command's output must not replace (`check_output_paths`)
        self.paths = [p for p in (prefix_file, constraints_file, avoid_file, glossary) if p is not None]
        self.glossary = Glossary.load(glossary) if glossary else None
        self.files: dict[str, tuple[str, Iterator[str]]] = {}
        self._handles = []
        for name, path in (("prefix", prefix_file), ("constraints", constraints_file), ("avoid", avoid_file)):
            if path is not None:
                check_input_file(path)
                self._handles.append(open_binary(path, "rb"))
                self.files[name] = (path, decoded_lines(self._handles[-1], path, warn))
        self.lines = 0

    @classmethod
    def from_options(cls, kw: Options) -> Steerer | None:
        """The steerer of a command's options (popped from kw), None when none is given."""
        from seq2seq.cli.common import pop_option, pop_strings

        prefix_file, constraints_file = pop_option(kw, "prefix_file", str), pop_option(kw, "constraints_file", str)
        avoid, avoid_file = pop_strings(kw, "avoid"), pop_option(kw, "avoid_file", str)
        glossary, json_input = pop_option(kw, "glossary", str), bool(pop_option(kw, "json_input", bool))
        terms, term_forms = pop_option(kw, "terms", str), pop_option(kw, "term_forms", str)
        if not any((prefix_file, constraints_file, avoid, avoid_file, glossary, json_input, terms, term_forms)):
            return None
        return cls(prefix_file, constraints_file, avoid, avoid_file, glossary, json_input, terms, term_forms)

    def call_options(self) -> CallSteering:
        """The steering options of the call (a `Call`'s glossary, terms, term_forms), those given."""
        options: CallSteering = {}
        if self.glossary is not None:
            options["glossary"] = self.glossary
        if self.terms is not None:
            options["terms"] = self.terms
        if self.term_forms is not None:
            options["term_forms"] = self.term_forms
        return options

    def __call__(self, lines: list[str]) -> list[SourceInput]:
        """The inputs of the next chunk of input lines, one a line."""
        first = self.lines + 1
        self.lines += len(lines)
        own: dict[str, list[str]] = {}  # each line-aligned file's lines for this chunk
        for name, (path, stream) in self.files.items():
            values = list(itertools.islice(stream, len(lines)))
            if len(values) < len(lines):
                raise SteeringError(f"{path} has {first - 1 + len(values)} lines, but the input has more; "
                                    "give one line per input line")
            own[name] = values
        if self.json_input:
            inputs = _json_lines(lines, first)
            for name in STEERING_FIELDS:
                if name in own:
                    raise SteeringError(f"--json-input lines hold {name!r}, and --{name}-file is given too; use one")
        else:
            inputs = [dataclasses.replace(_file_fields(own, i, f"line {first + i}: "), text=line) for i, line in enumerate(lines)]
        inputs = [x.with_shared(self.every_line) for x in inputs]
        if self.avoid:  # --avoid's phrases checked in each line's list, as the line's own phrases are
            for i, x in enumerate(inputs):
                read_phrases(x.avoid, f"line {first + i}: avoid")
        return inputs

    def shared(self, what: str) -> SharedSteering:
        """The steering arguments that apply to a whole document (`what` says which: "--format html"):
        banned phrases, glossary, terms; a line-aligned file or --json-input is refused with it."""
        if self.files or self.json_input:
            given = next(iter(self.files.values()))[0] if self.files else "--json-input"
            raise SteeringError(f"{given} steers line by line; {what} translates a document whole (give "
                                "--avoid, --glossary or --terms, which apply to the whole document)")
        steering: SharedSteering = {"avoid": self.avoid} if self.avoid else {}
        steering.update(self.call_options())
        return steering

    def close(self) -> None:
        """SteeringError naming a line-aligned file that has more lines than the input."""
        try:
            for path, stream in self.files.values():
                if next(stream, None) is not None:
                    raise SteeringError(f"{path} has more lines than the input ({self.lines}); "
                                        "give one line per input line")
        finally:
            for handle in self._handles:
                handle.close()


def _file_fields(own: dict[str, list[str]], i: int, where: str) -> SourceInput:
    """Line i's steering fields from the line-aligned files' lines `own` (by field: a prefix is the
    line, a phrase field's line its TAB-separated phrases, blank ones dropped), read as every input's
    fields are (`read_steering_fields`: an input without text; `where` names the line)."""
    fields: dict[str, object] = {
        name: [p for p in lines[i].split("\t") if p.strip()] if name in PHRASE_FIELDS else lines[i]
        for name, lines in own.items()}
    return read_steering_fields(fields, where)


def _json_lines(lines: list[str], first: int) -> list[SourceInput]:
    """The inputs of a chunk of --json-input lines, each line one input in its JSON form
    (`seq2seq.inference.inputs.read_input`, as the server reads an item of "texts"; a blank line is an
    empty text)."""
    inputs = []
    for number, line in enumerate(lines, first):
        if not line.strip():
            inputs.append(SourceInput(""))
            continue
        try:
            obj = json_reader.loads(line)
        except json.JSONDecodeError as e:
            raise SteeringError(f"input line {number} is not JSON ({e.msg}); --json-input reads one object "
                                'per line, e.g. {"text": "...", "constraints": ["..."]}') from None
        inputs.append(read_input(obj, f"input line {number}", ": "))
    return inputs
