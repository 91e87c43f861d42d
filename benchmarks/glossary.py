#!/usr/bin/env python
"""Glossary matching at termbase scale: the folded-term lookup of seq2seq.inference.glossary against the
regular expression per term it replaced (issue 59).

    python benchmarks/glossary.py                       # 100,000 entries, 1,000 sentences

Generates (seeded) a glossary of --entries source terms of 1-3 pseudo-words (some capitalised, some
with a hyphen or an apostrophe, a few with letters such as ß, é, İ) and --sentences sentences of 8-20
words in which about a quarter of the words start a glossary term (in a random case), then times
building each matcher and matching every sentence (`constraints_for`). The old matcher runs one
expression per entry on every sentence, so it is timed on the first --old-sentences sentences only and
its time scaled to all of them (printed as such); on those sentences the two must agree, else the
benchmark fails. Single-threaded pure Python: the figures depend on the CPU and its load.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from seq2seq.inference.glossary import Glossary, fold  # noqa: E402

LETTERS = "abcdefghijklmnopqrstuvwxyz"
RARE = "ßéİüø"  # letters whose case rules differ (ß has no simple upper case, İ lower-cases to i plus a dot)


class RegexGlossary:
    """The matcher the lookup replaced: one `(?<!\\w)TERM(?!\\w)` expression (re.IGNORECASE) per entry,
    run longest term first on every text; a match is kept unless it overlaps one kept before."""

    def __init__(self, entries: list[tuple[str, str]]) -> None:
        by_length = sorted(range(len(entries)), key=lambda i: -len(entries[i][0]))
        self.patterns = [(re.compile(rf"(?<!\w){re.escape(entries[i][0])}(?!\w)", re.IGNORECASE), entries[i][1])
                         for i in by_length]

    def constraints_for(self, text: str) -> list[str]:
        taken: list[tuple[int, int]] = []
        found: list[tuple[int, str]] = []
        for pattern, target in self.patterns:
            for m in pattern.finditer(text):
                if all(m.end() <= a or m.start() >= b for a, b in taken):
                    taken.append(m.span())
                    found.append((m.start(), target))
        return list(dict.fromkeys(t for _, t in sorted(found)))


def pseudo_word(rng: random.Random) -> str:
    """A lower-case pseudo-word of 3-10 letters; one in 50 holds a letter of RARE."""
    word = "".join(rng.choice(LETTERS) for _ in range(rng.randint(3, 10)))
    if rng.random() < 0.02:
        i = rng.randrange(len(word))
        word = word[:i] + rng.choice(RARE) + word[i + 1:]
    return word


def generated_glossary(entries: int, seed: int = 0) -> list[tuple[str, str]]:
    """`entries` (source term, target term) pairs: source terms of 1-3 pseudo-words from a vocabulary
    of max(2,000, entries / 5) words (one in 10 capitalised, one in 40 joined by a hyphen, one in 80
    ending in "'s"), no two equal as the glossary compares them; target terms "T<n> <word>"."""
    rng = random.Random(seed)
    vocabulary = sorted({pseudo_word(rng) for _ in range(max(2000, entries // 5))})
    out, seen = [], set()
    while len(out) < entries:
        words = [rng.choice(vocabulary) for _ in range(rng.choice((1, 1, 2, 2, 2, 3)))]
        words = [w.capitalize() if rng.random() < 0.1 else w for w in words]
        source = ("-" if rng.random() < 0.025 else " ").join(words) + ("'s" if rng.random() < 0.0125 else "")
        if fold(source) not in seen:
            seen.add(fold(source))
            out.append((source, f"T{len(out)} {rng.choice(vocabulary).capitalize()}"))
    return out


def generated_sentences(glossary: list[tuple[str, str]], sentences: int, seed: int = 0) -> list[str]:
    """`sentences` sentences of 8-20 items, each a glossary source term (one in 4; lower-, upper- or
    title-cased, or as written) or a pseudo-word, ending in a full stop; a comma after one item in 8."""
    rng = random.Random(seed + 1)
    words = sorted({w for source, _ in glossary for w in re.split(r"[\s-]", source)})
    out = []
    for _ in range(sentences):
        items = []
        for _ in range(rng.randint(8, 20)):
            if rng.random() < 0.25:
                item = rng.choice(glossary)[0]
                item = rng.choice((item, item.lower(), item.upper(), item.title()))
            else:
                item = rng.choice(words)
            items.append(item + ("," if rng.random() < 0.125 else ""))
        text = " ".join(items)
        out.append(text[0].upper() + text[1:] + ".")
    return out


def timed(fn, *args):
    t = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--entries", type=int, default=100_000)
    p.add_argument("--sentences", type=int, default=1000)
    p.add_argument("--old-sentences", type=int, default=50,
                   help="sentences the old matcher is timed on (its time is scaled to --sentences)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    from benchmarks.common import machine_info

    print(machine_info(1))
    entries = generated_glossary(args.entries, args.seed)
    sentences = generated_sentences(entries, args.sentences, args.seed)
    print(f"{len(entries):,} entries, {len(sentences):,} sentences "
          f"({sum(map(len, sentences)) / len(sentences):.0f} characters on average)")
    new, new_build = timed(Glossary, entries, "generated")
    new_out, new_match = timed(lambda: [new.constraints_for(s) for s in sentences])
    old, old_build = timed(RegexGlossary, entries)
    sample = sentences[: min(args.old_sentences, len(sentences))]
    old_out, old_sample = timed(lambda: [old.constraints_for(s) for s in sample])
    if old_out != new_out[: len(sample)]:
        bad = next(i for i, (a, b) in enumerate(zip(old_out, new_out)) if a != b)
        sys.exit(f"the matchers disagree on sentence {bad + 1}: {sample[bad]!r}: old {old_out[bad]}, "
                 f"new {new_out[bad]}")
    old_match = old_sample * len(sentences) / len(sample)
    terms = sum(map(len, new_out))
    print(f"the matchers agree on the {len(sample)} sentences both ran; {terms:,} terms found in all "
          f"{len(sentences):,} ({terms / len(sentences):.2f} a sentence)")
    print(f"build:  new {new_build:.2f} s, old {old_build:.2f} s (compiling {len(entries):,} expressions)")
    scaled = "" if len(sample) == len(sentences) else \
        f" (measured on {len(sample)} sentences, {old_sample:.2f} s, scaled to {len(sentences):,})"
    print(f"match {len(sentences):,} sentences:  new {new_match:.3f} s ({1e3 * new_match / len(sentences):.3f} "
          f"ms a sentence), old {old_match:.2f} s{scaled}")
    print(f"ratio (old / new), matching: {old_match / max(new_match, 1e-9):,.0f}x; "
          f"build and match: {(old_build + old_match) / max(new_build + new_match, 1e-9):,.1f}x")


if __name__ == "__main__":
    main()
