"""Sentence splitters compared (issue 71): which one `seq2seq.documents.sentences` uses, by measurement.

    python benchmarks/sentence_splitting.py --data-dir ../shared/data/multi30k --split val

For each language (en, de, fr) and each splitter (pysbd, sentence-splitter: Moses' non-breaking
prefixes, and a plain regex baseline), the held-out split's sentences are joined 3 at a time with one
space and split back: a line counts when it comes back exactly as its 3 sentences; "over-split" counts
the split's single sentences that a splitter cuts in two or more (a sentence run on without its stop is
found only by splitting inside what looks like one sentence, which must stay rare). Then hand-made
cases a sentence per line cannot show (abbreviations, decimals, URLs, quotes, "..."), and the speed
(sentences/s, the faster of --repeats runs; the machine is shared, so compare the rows, not the
absolute figures).
"""

from __future__ import annotations

import argparse
import gzip
import re
import time
import sys
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import machine_info  # noqa: E402
from seq2seq.documents import sentences  # noqa: E402

# (line, its sentences), per language: what a sentence-per-line corpus never holds
HARD_CASES: dict[str, list[tuple[str, list[str]]]] = {
    "en": [
        ("Dr. Smith arrived at 5 p.m. on Monday. He was late.", ["Dr. Smith arrived at 5 p.m. on Monday.", "He was late."]),
        ("Mr. and Mrs. Jones live in the U.S. They have two dogs.",
         ["Mr. and Mrs. Jones live in the U.S.", "They have two dogs."]),
        ("The ticket costs 3.50 dollars. It is cheap.", ["The ticket costs 3.50 dollars.", "It is cheap."]),
        ("Visit www.example.com for details. It opens at 9.", ["Visit www.example.com for details.", "It opens at 9."]),
        ("Write to anna.berg@example.org today. She answers fast.",
         ["Write to anna.berg@example.org today.", "She answers fast."]),
        ('He said "Stop!" Then he left.', ['He said "Stop!"', "Then he left."]),
        ('"Where are you?" she asked. Nobody answered.', ['"Where are you?" she asked.', "Nobody answered."]),
        ("Wait... What happened here?", ["Wait...", "What happened here?"]),
        ("A man rides a bike. A dog runs! Is it raining?", ["A man rides a bike.", "A dog runs!", "Is it raining?"]),
        ("See e.g. the map on p. 4 for the route. Then turn left.",
         ["See e.g. the map on p. 4 for the route.", "Then turn left."]),
        ("The score was 2.5 vs. 3.1 in round no. 2. We lost.", ["The score was 2.5 vs. 3.1 in round no. 2.", "We lost."]),
        ("It is 10 a.m. The shop is open.", ["It is 10 a.m.", "The shop is open."]),
    ],
    "de": [
        ("Das kostet z. B. 3,50 Euro. Es ist billig.", ["Das kostet z. B. 3,50 Euro.", "Es ist billig."]),
        ("Dr. Müller kommt um 9 Uhr. Er ist pünktlich.", ["Dr. Müller kommt um 9 Uhr.", "Er ist pünktlich."]),
        ("Am 3. Mai fahren wir los. Wir freuen uns.", ["Am 3. Mai fahren wir los.", "Wir freuen uns."]),
        ('Er sagte: "Halt!" Dann ging er.', ['Er sagte: "Halt!"', "Dann ging er."]),
        ("Siehe www.beispiel.de für mehr. Danke.", ["Siehe www.beispiel.de für mehr.", "Danke."]),
        ("Ein Mann fährt Rad. Ein Hund rennt! Regnet es?", ["Ein Mann fährt Rad.", "Ein Hund rennt!", "Regnet es?"]),
    ],
    "fr": [
        ("M. Dupont arrive à 9 h. Il est en retard.", ["M. Dupont arrive à 9 h.", "Il est en retard."]),
        ("Le billet coûte 3,50 euros. C'est bon marché.", ["Le billet coûte 3,50 euros.", "C'est bon marché."]),
        ("Voir www.exemple.fr pour plus. Merci.", ["Voir www.exemple.fr pour plus.", "Merci."]),
        ("Un homme fait du vélo. Un chien court ! Pleut-il ?", ["Un homme fait du vélo.", "Un chien court !", "Pleut-il ?"]),
        ("Mme Martin habite au n° 4. Elle a un chat.", ["Mme Martin habite au n° 4.", "Elle a un chat."]),
    ],
}

# The regex baseline: a sentence ends at . ! ? or ... (closing quotes and brackets included), before
# whitespace and a capital letter, a digit or an opening quote.
_REGEX_END = re.compile(r"(?<=[.!?…])[\"'”’»)\]]*\s+(?=[\"'“‘«(\[]?[A-ZÀ-ÖØ-Þ0-9])")


PUNCTUATED = re.compile(r"[.!?…][\"'”’»)\]]*$")


def regex_split(text: str) -> list[str]:
    return [s for s in _REGEX_END.split(text) if s]


def splitters(lang: str) -> dict[str, Callable[[str], list[str]]]:
    """The splitters compared; sentence-splitter only where it is installed (`pip install -e ".[bench]"`)."""
    import pysbd

    seg = pysbd.Segmenter(language=lang, clean=False)
    found: dict[str, Callable[[str], list[str]]] = {"pysbd": lambda t: [s.strip() for s in seg.segment(t) if s.strip()]}
    try:
        from sentence_splitter import SentenceSplitter

        found["sentence-splitter"] = SentenceSplitter(language=lang).split
    except ImportError:
        print("sentence-splitter is not installed (pip install -e \".[bench]\"): left out")
    found["regex"] = regex_split
    found["documents.split"] = lambda t: [s.text for s in sentences.split(t, lang) if s.text]
    return found


def read(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=Path("../shared/data/multi30k"))
    parser.add_argument("--split", default="val")
    parser.add_argument("--langs", default="en,de,fr")
    parser.add_argument("--limit", type=int, default=None, help="at most this many sentences per language")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(machine_info(1))
    print("exact: the lines split back into their 3 sentences; punctuated: of the lines whose 3 sentences end in "
          ". ! or ? (in the others a sentence runs on without its stop); over-split: single sentences cut")
    print(f"{'lang':4} {'splitter':18} {'exact':>16} {'punctuated':>16} {'over-split':>14} {'hard cases':>11} "
          f"{'sentences/s':>12}")
    for lang in args.langs.split(","):
        sentences = read(args.data_dir / f"{args.split}.{lang}.gz")[: args.limit]
        groups = [sentences[i:i + 3] for i in range(0, len(sentences) - 2, 3)]
        lines = [" ".join(g) for g in groups]
        punctuated = [i for i, g in enumerate(groups) if all(PUNCTUATED.search(s) for s in g)]
        for name, split in splitters(lang).items():
            right = [split(line) == group for line, group in zip(lines, groups)]
            exact, fine = sum(right), sum(right[i] for i in punctuated)
            hard = sum(split(line) == want for line, want in HARD_CASES[lang])
            over = sum(len(split(one)) > 1 for one in sentences)
            best = float("inf")
            for _ in range(args.repeats):
                start = time.perf_counter()
                for line in lines:
                    split(line)
                best = min(best, time.perf_counter() - start)
            print(f"{lang:4} {name:18} {exact:>4} of {len(lines):<4} {100 * exact / max(1, len(lines)):5.1f}%"
                  f" {fine:>4} of {len(punctuated):<4} {100 * fine / max(1, len(punctuated)):5.1f}%"
                  f" {over:>4} of {len(sentences):<6}"
                  f" {hard:>4} of {len(HARD_CASES[lang]):<3} {3 * len(lines) / best:12,.0f}")


if __name__ == "__main__":
    main()
