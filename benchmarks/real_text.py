"""Text as people write it (issue 71): a model's translations of cases built from a held-out split, with
the text pipeline off (each line straight to the engine) and on (`seq2seq.translate_lines`: sentences
split and cased, looped outputs searched again), side by side.

    python benchmarks/real_text.py runs/multi30k_en_de --data-dir ../shared/data/multi30k --split val
    python benchmarks/real_text.py runs/quickstart/model --data-dir runs/quickstart/data --split valid

Rows (each one function of `ROWS`: `row(case) -> [Figure]`; a new row is one more function):
  paragraphs    3 consecutive sentences on one line: BLEU against the 3 references joined, as a % of
                the sentence-by-sentence BLEU, and the sentences dropped (an output line that holds
                fewer sentences than its source)
  upper         the sentences in UPPER CASE: case-insensitive BLEU as a % of the sentences as written
  title         the sentences in Title Case: the same, and BLEU with case against the references as
                written, for the output as the model writes it and title-cased
  typos         each sentence with a typo in 1-2 of its words (`seq2seq.data.modifiers.typos`, the
                training modifier's edits, seeded by the sentence's index): BLEU as a % of as written
  loops         outputs that repeat themselves where their source does not (`output_loops`), over every
                output of the rows above
  time          the seconds every row's translation took
Never the test set: the split is a held-out one (val). The machine is shared: compare the columns.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import sacrebleu  # noqa: E402
import torch  # noqa: E402

from benchmarks.common import machine_info  # noqa: E402
from seq2seq.data.modifiers import typos as misspelt  # noqa: E402
from seq2seq.documents.line_translation import translate_lines  # noqa: E402
from seq2seq.documents.loops import output_loops  # noqa: E402
from seq2seq.documents.sentences import split  # noqa: E402
from seq2seq.inference.translator import Translator  # noqa: E402

MODES = ("off", "on")


@dataclass
class Case:
    """What every row reads: the held-out sentences and references, and `translate(lines, mode)` (the best
    output of each line, with the pipeline off or on), which also keeps each output for the loop count
    and times every call."""

    sources: list[str]
    references: list[str]
    tgt_lang: str
    translator: Translator
    beam: int
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(MODES, 0.0))
    outputs: dict[str, list[tuple[str, str]]] = field(default_factory=lambda: {m: [] for m in MODES})
    _plain: list[str] | None = None

    def translate(self, lines: list[str], mode: str) -> list[str]:
        start = time.perf_counter()
        on = mode == "on"
        nbest = translate_lines(self.translator, lines, split_sentences=on, casing=on, loop_guard=on, beam=self.beam)
        self.seconds[mode] += time.perf_counter() - start
        out = [n[0].text if n else "" for n in nbest]
        self.outputs[mode].extend(zip(lines, out))
        return out

    @property
    def plain(self) -> list[str]:
        """The sentences one per line, straight to the engine: the figure every row is a % of."""
        if self._plain is None:
            start = time.perf_counter()
            self._plain = self.translator.translate(self.sources, beam=self.beam)
            self.seconds["plain"] = time.perf_counter() - start
        return self._plain


@dataclass(frozen=True)
class Figure:
    """One line of the table: what it measures and its value with the pipeline off and on."""

    name: str
    off: str
    on: str


def bleu(hyps: list[str], refs: list[str], lowercase: bool = False) -> float:
    return sacrebleu.corpus_bleu(hyps, [refs], lowercase=lowercase).score


def title_case(text: str) -> str:
    """Each whitespace word's first letter in capitals ("woman's" stays "Woman's", unlike str.title)."""
    return " ".join(w[:1].upper() + w[1:] for w in text.split(" "))


def paragraphs(case: Case) -> list[Figure]:
    groups = [(case.sources[i:i + 3], case.references[i:i + 3]) for i in range(0, len(case.sources) - 2, 3)]
    lines, refs = [" ".join(s) for s, _ in groups], [" ".join(r) for _, r in groups]
    base = bleu([" ".join(case.plain[i:i + 3]) for i in range(0, len(case.sources) - 2, 3)], refs)
    figures = {}
    for mode in MODES:
        out = case.translate(lines, mode)
        held = [len([s for s in split(o, case.tgt_lang) if s.text]) for o in out]
        want = [len([s for s in split(line, "en") if s.text]) for line in lines]
        dropped = sum(max(0, w - h) for w, h in zip(want, held))
        figures[mode] = (f"{100 * bleu(out, refs) / base:.1f}%", f"{dropped} of {3 * len(lines)}")
    return [Figure(f"paragraphs of 3 ({len(lines)} lines): BLEU, % of sentence by sentence ({base:.2f})",
                   figures["off"][0], figures["on"][0]),
            Figure("paragraphs of 3: sentences dropped", figures["off"][1], figures["on"][1])]


def upper(case: Case) -> list[Figure]:
    base = bleu(case.plain, case.references, lowercase=True)
    got = {m: bleu(case.translate([s.upper() for s in case.sources], m), case.references, lowercase=True)
           for m in MODES}
    return [Figure(f"UPPER CASE: case-insensitive BLEU, % of as written ({base:.2f})",
                   f"{100 * got['off'] / base:.1f}%", f"{100 * got['on'] / base:.1f}%")]


def title(case: Case) -> list[Figure]:
    base, cased_base = bleu(case.plain, case.references, lowercase=True), bleu(case.plain, case.references)
    out = {m: case.translate([title_case(s) for s in case.sources], m) for m in MODES}
    lower = {m: bleu(out[m], case.references, lowercase=True) for m in MODES}
    cased = {m: bleu(out[m], case.references) for m in MODES}
    titled = {m: bleu([title_case(o) for o in out[m]], case.references) for m in MODES}
    return [Figure(f"Title Case: case-insensitive BLEU, % of as written ({base:.2f})",
                   f"{100 * lower['off'] / base:.1f}%", f"{100 * lower['on'] / base:.1f}%"),
            Figure(f"Title Case: BLEU with case, output as the model writes it (as written: {cased_base:.2f})",
                   f"{cased['off']:.2f}", f"{cased['on']:.2f}"),
            Figure("Title Case: BLEU with case, output title-cased", f"{titled['off']:.2f}", f"{titled['on']:.2f}")]


def typos(case: Case) -> list[Figure]:
    base = bleu(case.plain, case.references)
    noisy = [misspelt(s, "", np.random.default_rng(i))[0] for i, s in enumerate(case.sources)]
    got = {m: bleu(case.translate(noisy, m), case.references) for m in MODES}
    return [Figure(f"typos in 1-2 words: BLEU, % of as written ({base:.2f})",
                   f"{100 * got['off'] / base:.1f}%", f"{100 * got['on'] / base:.1f}%")]


def loops(case: Case) -> list[Figure]:
    counts = {m: sum(output_loops(src, out) for src, out in case.outputs[m]) for m in MODES}
    total = len(case.outputs["off"])
    return [Figure(f"looped outputs (of {total}; plain sentences: "
                   f"{sum(output_loops(s, o) for s, o in zip(case.sources, case.plain))})",
                   str(counts["off"]), str(counts["on"]))]


def timing(case: Case) -> list[Figure]:
    return [Figure(f"time of the rows above, s (plain sentences: {case.seconds.get('plain', 0):.1f})",
                   f"{case.seconds['off']:.1f}", f"{case.seconds['on']:.1f}")]


ROWS: list[Callable[[Case], list[Figure]]] = [paragraphs, upper, title, typos, loops, timing]


def read(data_dir: Path, split_name: str, lang: str, limit: int | None) -> list[str]:
    """The split's lines, from SPLIT.LANG.gz or SPLIT.LANG."""
    path = data_dir / f"{split_name}.{lang}.gz"
    if path.is_file():
        with gzip.open(path, "rt", encoding="utf-8") as f:
            lines = [line.rstrip("\n") for line in f]
    else:
        lines = (data_dir / f"{split_name}.{lang}").read_text(encoding="utf-8").splitlines()
    return lines[:limit] if limit else lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dir", type=Path)
    p.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data" / "multi30k")
    p.add_argument("--split", default="val", help="a held-out split, never the test set the targets are on")
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--limit", type=int, default=None, help="only the first N sentences")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(machine_info(args.threads))
    sources = read(args.data_dir, args.split, args.src, args.limit)
    refs = read(args.data_dir, args.split, args.tgt, args.limit)
    case = Case(sources, refs, args.tgt, Translator.load(args.model_dir, device="cpu"), args.beam)
    print(f"{args.model_dir}, {args.split} ({len(sources)} sentences), beam {args.beam}")
    figures = [f for row in ROWS for f in row(case)]
    width = max(len(f.name) for f in figures)
    print(f"{'case':{width}}  {'pipeline off':>14}  {'pipeline on':>14}")
    for f in figures:
        print(f"{f.name:{width}}  {f.off:>14}  {f.on:>14}")


if __name__ == "__main__":
    main()
