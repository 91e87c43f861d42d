#!/usr/bin/env python
"""Terminology measured like the WMT 2021 terminology task: terms drawn from the references, rarest first.

    python benchmarks/terminology.py --model-dir runs/terms --plain-dir runs/multi30k_en_de      # test_2016_flickr
    python benchmarks/terminology.py --model-dir runs/terms_base --base-forms                     # terms as lemmas

Terms: for each sentence, up to `--terms` (2) words of its reference that the plain model's output
(beam 5, no terms) does not hold as whole words, the rarest in the training targets first (words the
training data never has included), none of the 100 most frequent target words, digits or words the
target vocabulary cannot write; with --base-forms each term is given as its base form
(`seq2seq.text.terminology.base_forms` of the training targets; a word the training data lacks is its
own). Sentences without such a word get no terms.

Systems, each decoding the whole split with beam 5 and timed in this run: the plain model without terms
and with the constrained beam (--terms constrain); the model trained with terms (data.terminology)
without terms, annotated (the terms appended to the source: --terms annotate), with each --term-bias B
annotated and pushed (`--terms annotate --term-bias B`), constrained, and both.

With --base-forms the constrained beam takes any inflected form of a lemma (`--term-forms inflected`), a
row forces the lemma as written (for comparison), and a second table gives, for the terms whose lemma
is not the reference's form, the share whose output holds the reference's form: all, nouns
(capitalised) and the other words.

Reported for each: term exact-match accuracy (the term, or with --base-forms the reference's own form, as
a whole word of the output; with --base-forms also any form of the lemma); window overlap (for each term
found in both, the share of the reference's words within 2 words of it that are also within 2 words of it
in the output: placement); BLEU, chrF and the length ratio (output words / reference words) against the
references; the share of outputs with terms that hold a term after a sentence end although their source
is one sentence ("appended"); and the decoding time against the plain model's (with --rounds N, the medians
of N timings taken round by round, every system in each round). The data directory holds
{split}.{lang}.gz and train.{lang}.gz (../shared/data/multi30k by default).
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from common import read_gz, read_split, split_arguments

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from seq2seq.inference.steering import sentence_ends  # noqa: E402
from seq2seq.inference.translator import Translator  # noqa: E402
from seq2seq.text.metrics import score  # noqa: E402
from seq2seq.text.terminology import base_forms, forms_of, word_counts, words  # noqa: E402

WINDOW = 2
END = re.compile(r"[.!?]")


def has_word(text: str, word: str) -> bool:
    return word in words(text)


def choose_terms(hyps: list[str], refs: list[str], counts: Counter[str], per_sentence: int, skip: int,
                 writable) -> list[list[str]]:
    """Up to `per_sentence` reference words each output misses, rarest in training first (see the docstring)."""
    lowered: Counter[str] = Counter()
    for w, n in counts.items():
        lowered[w.lower()] += n
    frequent = {w for w, _ in lowered.most_common(skip)}
    out = []
    for hyp, ref in zip(hyps, refs):
        missed = [w for w in dict.fromkeys(words(ref)) if not w.isdigit() and w.lower() not in frequent
                  and len(w) >= 2 and not has_word(hyp, w) and writable(w)]
        out.append(sorted(missed, key=lambda w: (counts[w], missed.index(w)))[:per_sentence])
    return out


def window(tokens: list[str], i: int) -> set[str]:
    return set(tokens[max(0, i - WINDOW): i] + tokens[i + 1: i + 1 + WINDOW])


def window_overlap(hyps: list[str], refs: list[str], wanted: list[list[str]]) -> float:
    """Mean, over terms in both output and reference, of |output window & reference window| / |reference window|."""
    shares = []
    for hyp, ref, terms in zip(hyps, refs, wanted):
        h, r = words(hyp), words(ref)
        for term in terms:
            if term in h and term in r:
                ref_window = window(r, r.index(term))
                if ref_window:
                    shares.append(len(window(h, h.index(term)) & ref_window) / len(ref_window))
    return 100 * sum(shares) / max(len(shares), 1)


def appended(hyps: list[str], sources: list[str], given: list[list[str]]) -> float:
    """Share of outputs with terms, of one-sentence sources, holding a term after a sentence end."""
    late = total = 0
    for hyp, src, terms in zip(hyps, sources, given):
        if not terms or sentence_ends(src) > 1:
            continue
        total += 1
        first_end = END.search(hyp)
        if first_end is None:
            continue
        tail = hyp[first_end.end():]
        late += any(any(has_word(tail, f) for f in forms_of(t)) for t in terms)
    return 100 * late / max(total, 1)


def evaluate(name: str, hyps: list[str], sources: list[str], refs: list[str], given: list[list[str]],
             exact: list[list[str]], lemmas: bool) -> dict:
    """A table row without its time (`main` adds it, from every timing of the system)."""
    s = score(hyps, [refs], metrics=("bleu", "chrf"))
    n = sum(len(t) for t in exact)
    hits = sum(has_word(h, t) for h, ts in zip(hyps, exact) for t in ts)
    row = {"system": name, "terms": f"{100 * hits / max(n, 1):.1f}%"}
    if lemmas:
        anyform = sum(any(has_word(h, f) for f in forms_of(t)) for h, ts in zip(hyps, given) for t in ts)
        row["any form"] = f"{100 * anyform / max(n, 1):.1f}%"
    row.update({"window": f"{window_overlap(hyps, refs, exact):.1f}", "BLEU": f"{s['bleu']['score']:.2f}",
                "chrF": f"{s['chrf']['score']:.2f}",
                "length": f"{sum(len(words(h)) for h in hyps) / sum(len(words(r)) for r in refs):.3f}",
                "appended": f"{appended(hyps, sources, given):.1f}%"})
    return row


def right_forms(hyps: list[str], exact: list[list[str]], given: list[list[str]]) -> dict:
    """With terms given as lemmas: the share of terms whose output holds the reference's own form, where
    the lemma is not that form, for all of them, nouns (capitalised: German) and the other words."""
    pairs = [(h, w) for h, ws, bs in zip(hyps, exact, given) for w, b in zip(ws, bs) if w != b]
    out = {}
    for name, keep in (("lemma != form", lambda w: True), ("nouns", lambda w: w[:1].isupper()),
                       ("other words", lambda w: not w[:1].isupper())):
        kept = [(h, w) for h, w in pairs if keep(w)]
        out[name] = f"{100 * sum(has_word(h, w) for h, w in kept) / max(len(kept), 1):.1f}% of {len(kept)}"
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", required=True, help="a model trained with data.terminology")
    p.add_argument("--plain-dir", default=None, help="a model trained without it (default: --model-dir's own)")
    split_arguments(p)
    p.add_argument("--terms", type=int, default=2, help="terms per sentence, at most")
    p.add_argument("--base-forms", action="store_true", help="give each term as its base form (a lemma)")
    p.add_argument("--constraint-lenpen", type=float, default=None,
                   help="the length penalty of the sentences with constraints (default: the model's)")
    p.add_argument("--term-bias", type=float, nargs="*", default=[],
                   help="also the annotated terms with each of these bonuses (decoding.term_bias)")
    p.add_argument("--rounds", type=int, default=1,
                   help="time each system this many times, round by round, and report the medians")
    p.add_argument("--json", type=Path, default=None, help="also write the rows to this JSON file")
    args = p.parse_args()
    logging.basicConfig(level=logging.ERROR)
    sources, refs = read_split(args)
    counts = word_counts(read_gz(args.data_dir / f"train.{args.tgt}.gz"))
    model = Translator.load(args.model_dir, device="cpu")
    plain_model = Translator.load(args.plain_dir, device="cpu") if args.plain_dir else model
    opts = {"beam": args.beam}
    if args.constraint_lenpen is not None:  # only the constrained sentences are searched with it
        opts["constraint_lenpen"] = args.constraint_lenpen
    quiet = [].append

    def timed(translator: Translator, **steering) -> tuple[list[str], float]:
        translator.translate(sources[:20], **opts, **steering if not steering.get("constraints") else {})  # warm-up
        start = time.perf_counter()
        out = translator.translate(sources, warn=quiet, **opts, **steering)
        return out, time.perf_counter() - start

    plain, plain_s = timed(plain_model)
    tok = model.tokenizers.tgt
    exact = choose_terms(plain, refs, counts, args.terms, 100, lambda w: tok.unk_id not in tok.encode([w])[0])
    bases = base_forms(counts)
    given = [[bases.get(t, t) for t in ts] for ts in exact] if args.base_forms else exact
    print(f"\n{args.split} {args.src}->{args.tgt}: {len(sources)} sentences, beam {args.beam}; {sum(map(len, given))} "
          f"terms on {sum(bool(t) for t in given)} sentences ({sum(counts[t] == 0 for ts in exact for t in ts)} never "
          f"in the training targets){'; given as base forms' if args.base_forms else ''}")
    rows = [evaluate("plain model", plain, sources, refs, given, exact, args.base_forms)]
    # (name, model, how its terms reach it: None for none, its further options)
    systems: list[tuple[str, Translator, str | None, dict]] = []
    if args.plain_dir:
        systems += [("plain model, constrained beam", plain_model, "constrain", {})]
    if args.base_forms:  # the lemma forced as written, for comparison
        systems += [("plain model, constrained beam, lemma as written", plain_model, "constrain", {})]
    systems += [("terms model, no terms", model, None, {}),
                ("terms model, annotated", model, "annotate", {"term_bias": 0.0})]  # alone, whatever its config
    systems += [(f"terms model, annotated, term bias {b:g}", model, "annotate", {"term_bias": b})
                for b in args.term_bias]
    systems += [("terms model, constrained beam", model, "constrain", {}), ("terms model, both", model, "both", {})]
    forms_rows = []
    runs: dict[str, tuple[Translator, dict]] = {"plain model": (plain_model, {})}  # what each row decodes with
    times = {"plain model": [plain_s]}
    for name, translator, mode, extra in systems:
        steering = {} if mode is None else {"constraints": given, "terms": mode, **extra}
        if mode is not None and args.base_forms and "as written" not in name:  # a lemma met by any of its forms
            steering["term_forms"] = "inflected"
        hyps, secs = timed(translator, **steering)
        runs[name], times[name] = (translator, steering), [secs]
        rows.append(evaluate(name, hyps, sources, refs, given, exact, args.base_forms))
        if args.base_forms and mode is not None:
            forms_rows.append({"system": name, **right_forms(hyps, exact, given)})
    for _ in range(args.rounds - 1):  # more timings, round by round, so that a busy spell slows every row alike
        for name, (translator, steering) in runs.items():
            times[name].append(timed(translator, **steering)[1])
    for row in rows:
        row["time"] = f"{statistics.median(times[row['system']]) / statistics.median(times['plain model']):.2f}x"
    for table in (rows, forms_rows):
        if table:
            keys = list(table[0])
            print("\n| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
            for row in table:
                print("| " + " | ".join(row[k] for k in keys) + " |")
    if args.json is not None:
        args.json.write_text(json.dumps({"split": args.split, "terms": given, "rows": rows, "forms": forms_rows},
                                        indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
