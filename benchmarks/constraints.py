#!/usr/bin/env python
"""Steering on a trained Multi30K model: reference constraints, target prefixes and a glossary.

    python benchmarks/constraints.py --model-dir runs/multi30k_en_de        # test_2016_flickr, beam 5

On test_2016_flickr (en->de by default), with the model directory's decoding defaults and beam 5:

1. Reference constraints. For each sentence, 1-2 words of the reference that the unconstrained
   output misses (seeded; a word is a reference token of letters, at least 3 of them; with
   probability 1/2 a chosen word is extended by its right neighbour into a two-word phrase, when
   that phrase is missed too; words the target vocabulary cannot write are skipped). Reported: coverage (constraints that appear in the output as whole
   words, of all; and of the satisfiable ones, i.e. those the search did not give up on at the length
   limit), BLEU and chrF unconstrained vs constrained, and decoding time as a ratio to the
   unconstrained search, both timed in this run.
2. Prefixes: the first k reference words (k = 1, 2, 4) as the prefix; BLEU of the continuation (the
   output after the prefix against the reference after it), against the unconstrained output's
   continuation scored the same way (its first k words dropped).
3. A glossary built from the *training* data: for frequent source words, the target word with the
   highest Dice coefficient of co-occurrence in training pairs (kept if Dice >= 0.6; for German, only
   capitalised target words: nouns, the terms a termbase holds). Term
   accuracy on the test sentences where a glossary source term occurs and the reference holds its
   target term: the share of those terms the output holds, without and with the glossary.

The data directory holds {split}.{lang}.gz (../shared/data/multi30k by default).
"""

from __future__ import annotations

import argparse
import logging
import random
import re
import time
from collections import Counter

from common import read_gz, read_split, split_arguments

from seq2seq.inference.glossary import Glossary
from seq2seq.inference.translator import Translator
from seq2seq.text.metrics import score

WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    return WORD.findall(text)


def has_phrase(text: str, phrase: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", text) is not None


def reference_constraints(hyps: list[str], refs: list[str], rng: random.Random,
                          writable=lambda phrase: True) -> list[list[str]]:
    """1-2 reference words or two-word phrases per sentence that the hypothesis misses (see the docstring);
    writable(phrase): can the target vocabulary write it (others are skipped)."""
    out = []
    for hyp, ref in zip(hyps, refs):
        tokens = words(ref)
        missed = [i for i, w in enumerate(tokens) if len(w) >= 3 and w.isalpha() and not has_phrase(hyp, w)]
        chosen = []
        for i in rng.sample(missed, min(len(missed), rng.randint(1, 2))):
            phrase = tokens[i]
            if rng.random() < 0.5 and i + 1 < len(tokens) and not has_phrase(hyp, f"{tokens[i]} {tokens[i + 1]}"):
                phrase = f"{tokens[i]} {tokens[i + 1]}"
            if phrase in ref and phrase not in chosen and writable(phrase):
                chosen.append(phrase)
        out.append(chosen)
    return out


def bleu_chrf(hyps: list[str], refs: list[str]) -> tuple[float, float]:
    s = score(hyps, [refs], metrics=("bleu", "chrf"))
    return s["bleu"]["score"], s["chrf"]["score"]


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def build_glossary(src: list[str], tgt: list[str], min_count: int = 20, min_dice: float = 0.6,
                   capitalised: bool = True, tokenizer=None) -> Glossary:
    """Source word -> its best co-occurring target word by Dice, from the training pairs; capitalised:
    only capitalised target words (German nouns: the terms a termbase holds, not function words or
    inflected adjectives); tokenizer (the model's target tokenizer): only words it can write."""
    src_sets = [set(w.lower() for w in words(s)) for s in src]
    tgt_sets = [set(words(t)) for t in tgt]
    src_count = Counter(w for s in src_sets for w in s)
    tgt_count = Counter(w for t in tgt_sets for w in t)
    frequent = {w for w, c in src_count.items() if c >= min_count and len(w) >= 3 and w.isalpha()}
    pairs: Counter = Counter()
    for s, t in zip(src_sets, tgt_sets):
        for a in s & frequent:
            for b in t:
                if tgt_count[b] >= min_count and len(b) >= 3 and b.isalpha() and (b[0].isupper() or not capitalised):
                    pairs[a, b] += 1
    best: dict[str, tuple[float, str]] = {}
    for (a, b), c in pairs.items():
        dice = 2 * c / (src_count[a] + tgt_count[b])
        if dice >= min_dice and dice > best.get(a, (0.0, ""))[0]:
            best[a] = (dice, b)
    entries = sorted((a, b) for a, (_, b) in best.items())
    if tokenizer is not None:
        entries = [(a, b) for a, b in entries if tokenizer.unk_id not in tokenizer.encode([b])[0]]
    return Glossary(entries, "training-data glossary")


def term_accuracy(glossary: Glossary, sources: list[str], refs: list[str], hyps: list[str]) -> tuple[float, int]:
    hits = total = 0
    for s, r, h in zip(sources, refs, hyps):
        for term in glossary.constraints_for(s):
            if has_phrase(r, term):
                total += 1
                hits += has_phrase(h, term)
    return 100 * hits / max(total, 1), total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", required=True)
    split_arguments(p)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    sources, refs = read_split(args)
    t = Translator.load(args.model_dir, device="cpu")
    opts = dict(beam=args.beam)
    t.translate(sources[:20], **opts)  # warm-up

    plain, plain_s = timed(t.translate, sources, **opts)
    b0, c0 = bleu_chrf(plain, refs)
    print(f"\n{args.split} {args.src}->{args.tgt}, {len(sources)} sentences, beam {args.beam}, "
          f"lenpen {t.search_config(**opts).lenpen:g}")
    print(f"unconstrained: BLEU {b0:.2f} chrF {c0:.2f} in {plain_s:.1f} s")

    tokenizer = t.tokenizers.tgt
    constraints = reference_constraints(plain, refs, random.Random(args.seed),
                                        lambda phrase: tokenizer.unk_id not in tokenizer.encode([phrase])[0])
    gave_up: list[str] = []
    steered, steered_s = timed(t.translate, sources, constraints=constraints, warn=gave_up.append, **opts)
    failed_lines = {int(m.group(1)) for m in (re.match(r"line (\d+):", w) for w in gave_up) if m}
    n_total = sum(len(c) for c in constraints)
    met = sum(has_phrase(h, c) for h, cs in zip(steered, constraints) for c in cs)
    satisfiable = [(h, c) for i, (h, cs) in enumerate(zip(steered, constraints), 1) if i not in failed_lines for c in cs]
    met_satisfiable = sum(has_phrase(h, c) for h, c in satisfiable)
    b1, c1 = bleu_chrf(steered, refs)
    print(f"reference constraints: {n_total} on {sum(bool(c) for c in constraints)} sentences; "
          f"coverage {100 * met / max(n_total, 1):.1f}% of all, {100 * met_satisfiable / max(len(satisfiable), 1):.1f}% "
          f"of the {len(satisfiable)} satisfiable ({len(failed_lines)} sentences gave up at the length limit)")
    print(f"constrained:   BLEU {b1:.2f} chrF {c1:.2f} in {steered_s:.1f} s "
          f"({steered_s / plain_s:.2f}x the unconstrained search's time)")

    for k in (1, 2, 4):
        prefixes = [" ".join(r.split()[:k]) for r in refs]
        cont_refs = [" ".join(r.split()[k:]) for r in refs]
        out, secs = timed(t.translate, sources, prefix=prefixes, **opts)
        cont = [o[len(pre):].strip() if o.startswith(pre) else o for o, pre in zip(out, prefixes)]
        starts = sum(o.startswith(pre) for o, pre in zip(out, prefixes))
        base = [" ".join(h.split()[k:]) for h in plain]
        print(f"prefix of {k} reference word(s): continuation BLEU {bleu_chrf(cont, cont_refs)[0]:.2f} "
              f"(unconstrained, its first {k} words dropped: {bleu_chrf(base, cont_refs)[0]:.2f}); "
              f"{starts}/{len(out)} outputs start with their prefix; {secs / plain_s:.2f}x time")

    train_src = read_gz(args.data_dir / f"train.{args.src}.gz")
    train_tgt = read_gz(args.data_dir / f"train.{args.tgt}.gz")
    glossary = build_glossary(train_src, train_tgt, capitalised=args.tgt == "de", tokenizer=t.tokenizers.tgt)
    with_glossary, secs = timed(t.translate, sources, glossary=glossary, **opts)
    before, n_terms = term_accuracy(glossary, sources, refs, plain)
    after, _ = term_accuracy(glossary, sources, refs, with_glossary)
    print(f"glossary from the training data: {len(glossary.entries)} entries (e.g. "
          f"{', '.join(f'{a}->{b}' for a, b in glossary.entries[:4])}); on {n_terms} term occurrences: "
          f"term accuracy {before:.1f}% -> {after:.1f}%; BLEU {bleu_chrf(with_glossary, refs)[0]:.2f}; "
          f"{secs / plain_s:.2f}x time")


if __name__ == "__main__":
    main()
