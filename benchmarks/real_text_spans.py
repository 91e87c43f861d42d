"""Non-translatables and inline tags (issue 71, parts 3 and 4): held-out sentences with one span inserted,
translated as they are (the engine sees the span) and through `seq2seq.documents.spans` (masked, the
engine's cross-attention of `--layer` aligned by `word_alignment`, unmasked), side by side.

    python benchmarks/real_text_spans.py runs/multi30k_en_de --data-dir ../shared/data/multi30k --split val

Rows:
  nt verbatim     one URL / e-mail / @handle / {variable} / %s / `code` / number inserted at a random word
                  boundary: outputs holding it verbatim
  nt rest BLEU    BLEU of those outputs with the span removed, as a % of the plain sentences' BLEU
  tags nested     <b>/<i>/<em>/<a href>/**/_ around 1-3 words (and <br/>): outputs with the same tags, well nested
  tags BLEU       BLEU with the tags stripped, as a % of the plain sentences' BLEU
  tags on words   a one-word tag wraps some word of the reference (lenient: a tag one word off often
                  still wraps a word the reference holds)
  tags on its word  a one-word tag wraps the reference's translation of its word: the reference words that
                  eflomal aligns to the tagged source word (source and references aligned with the training
                  pairs, grow-diag-final-and), judged where the output holds one of them (`pip install
                  eflomal`; "n/a" without it)
Layers: "-1" the attention of the step that predicts each piece, "-1s" of the step that reads it
(shift-att), "-1L" the attention with the model directory's word lexicon (what `translate_lines` does;
built from --data-dir's train split where the model has none).
Never the test set. The machine is shared: compare the columns of one run.
"""

from __future__ import annotations

import argparse
import gzip
import random
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sacrebleu  # noqa: E402

from seq2seq.documents.alignment import word_alignment  # noqa: E402
from seq2seq.documents.spans import mask, unmask  # noqa: E402
from seq2seq.inference.translator import Translator  # noqa: E402
from seq2seq.storage.model_dir import ModelDir  # noqa: E402
from seq2seq.text.lexicon import Lexicon  # noqa: E402

NON_TRANSLATABLES = ["https://example.org/info", "anna.berg@example.com", "@anna_b", "{name}", "%s", "`make all`",
                     "42", "%(count)d", "www.example.de"]
TAGS = [("<b>", "</b>"), ("<i>", "</i>"), ("<em>", "</em>"), ('<a href="https://x.org/p?q=1">', "</a>"),
        ("**", "**"), ("_", "_")]
TAG_RE = re.compile(r"</?\w+[^>]*>|\*\*|(?<!\w)_|_(?!\w)")


def read(data_dir: Path, split: str, lang: str, limit: int) -> list[str]:
    with gzip.open(data_dir / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
        return [line.strip() for line in f][:limit]


def translate(t: Translator, texts: list[str], layer: int | None, beam: int) -> list:
    options = {"beam": beam} if layer is None else {"beam": beam, "attention_layer": layer}
    return [h[0] if h else None for h in t.translate_nbest(texts, **options)]


def through_spans(t: Translator, sources: list[str], layer: int, beam: int, markup: bool,
                  shift: bool | None = False, lexicon: Lexicon | None = None) -> list[str]:
    masked = [mask(s, markup=markup) for s in sources]
    hyps = translate(t, [m.text for m in masked], layer, beam)
    return [unmask(m, h.text if h else "", word_alignment(h, m.text, lexicon, shift) if h else [])[0]
            for m, h in zip(masked, hyps)]


def reference_alignment(data_dir: Path, src: str, tgt: str, sources: list[str], refs: list[str],
                        train_pairs: int) -> list[set[tuple[int, int]]] | None:
    """Each (source, reference) pair's word alignment by eflomal, trained together with the first
    `train_pairs` training pairs (grow-diag-final-and of both directions); None without eflomal."""
    try:
        import eflomal
    except ImportError:
        return None
    train_src, train_tgt = read(data_dir, "train", src, train_pairs), read(data_dir, "train", tgt, train_pairs)
    with tempfile.TemporaryDirectory() as tmp:
        eflomal.Aligner().align([x.lower() for x in train_src + sources], [x.lower() for x in train_tgt + refs],
                                links_filename_fwd=f"{tmp}/fwd", links_filename_rev=f"{tmp}/rev", quiet=True)
        links = [[{tuple(map(int, x.split("-"))) for x in line.split()} for line in open(f"{tmp}/{d}")][len(train_src):]
                 for d in ("fwd", "rev")]
    return [grow_diag_final_and(f, r) for f, r in zip(*links)]


def grow_diag_final_and(fwd: set[tuple[int, int]], rev: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """The symmetrised alignment of two directions (Koehn et al. 2003)."""
    union, links = fwd | rev, fwd & rev
    def unaligned(p: tuple[int, int]) -> bool:
        return all(i != p[0] for i, _ in links) or all(j != p[1] for _, j in links)
    grown = True
    while grown:
        grown = False
        for i, j in sorted(links):
            for di, dj in ((-1, 0), (1, 0), (0, -1), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1)):
                p = (i + di, j + dj)
                if p in union and p not in links and unaligned(p):
                    links.add(p)
                    grown = True
    for p in sorted(fwd | rev):
        if p not in links and unaligned(p):
            links.add(p)
    return links


def bare(word: str) -> str:
    return word.lower().strip(".,;:!?\"'()")


def well_nested(text: str, tags: list[str]) -> bool:
    found = TAG_RE.findall(text)
    return found == tags


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data" / "multi30k"))
    ap.add_argument("--split", default="val")
    ap.add_argument("--src", default="en")
    ap.add_argument("--tgt", default="de")
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--beam", type=int, default=4)
    ap.add_argument("--layers", default="-1,-1L", help="decoder layers to align with, comma-separated; a layer written "
                                                   "with 's' (-1s) aligns each piece by the step that reads it (shift-att), "
                                                   "with 'L' (-1L) adds the word lexicon (the pipeline's way)")
    ap.add_argument("--align-pairs", type=int, default=10**9,
                    help="training pairs eflomal aligns the references with (default: all)")
    args = ap.parse_args()
    rng = random.Random(71)
    sources = read(Path(args.data_dir), args.split, args.src, args.limit)
    refs = read(Path(args.data_dir), args.split, args.tgt, args.limit)
    t = Translator.load(args.model_dir)
    lexicon = ModelDir(args.model_dir).lexicon()
    if lexicon is None and "L" in args.layers:
        print(f"{args.model_dir} has no word lexicon: built from {args.data_dir}'s train split")
        lexicon = Lexicon.build(zip(read(Path(args.data_dir), "train", args.src, 10**9),
                                    read(Path(args.data_dir), "train", args.tgt, 10**9)))
    ref_links = reference_alignment(Path(args.data_dir), args.src, args.tgt, sources, refs, args.align_pairs)
    plain = [h.text if h else "" for h in translate(t, sources, None, args.beam)]
    base = sacrebleu.corpus_bleu(plain, [refs]).score
    print(f"plain BLEU {base:.2f} ({len(sources)} sentences of {args.split})")

    nt_sources, nt_spans = [], []
    for s in sources:
        words = s.split()
        span = rng.choice(NON_TRANSLATABLES)
        k = rng.randrange(len(words) + 1)
        nt_sources.append(" ".join(words[:k] + [span] + words[k:]))
        nt_spans.append(span)
    tag_sources, tag_lists, tag_words = [], [], []
    for s in sources:
        words = s.split()
        a = rng.randrange(len(words))
        b = min(len(words), a + rng.randint(1, 3))
        opened, closed = rng.choice(TAGS)
        inner = words[a:b]
        trail = re.search(r"[.,;:!?]+$", inner[-1])
        if trail:
            inner[-1] = inner[-1][:trail.start()]
        tagged = words[:a] + [opened + " ".join(inner) + closed + (trail.group(0) if trail else "")] + words[b:]
        if rng.random() < 0.2:
            tagged.insert(rng.randrange(1, len(tagged) + 1), "<br/>")
        tag_sources.append(" ".join(tagged))
        tag_lists.append(TAG_RE.findall(" ".join(tagged)))
        tag_words.append((opened, closed, " ".join(inner), a) if b == a + 1 else None)

    def strip_span(out: str, span: str) -> str:
        return re.sub(r"\s+", " ", out.replace(span, " ")).strip()

    raw_nt = [h.text if h else "" for h in translate(t, nt_sources, None, args.beam)]
    raw_tags = [h.text if h else "" for h in translate(t, tag_sources, None, args.beam)]
    rows = {"engine alone": (raw_nt, raw_tags)}
    for given in args.layers.split(","):
        layer, shift, lex = int(given.rstrip("sL")), given.endswith("s"), lexicon if given.endswith("L") else None
        shift_arg = None if lex is not None else shift
        rows[f"spans, layer {given}"] = (through_spans(t, nt_sources, layer, args.beam, False, shift_arg, lex),
                                         through_spans(t, tag_sources, layer, args.beam, True, shift_arg, lex))
    print(f"{'':18} {'nt verbatim':>12} {'nt rest %':>10} {'tags nested':>12} {'tags BLEU %':>12} {'tags on word':>13} "
          f"{'tags on its word':>17}")
    def share(bleu: float) -> float:  # a % of the plain BLEU (nan where the plain BLEU is 0: a tiny model)
        return bleu / base if base else float("nan")

    for name, (nt_out, tag_out) in rows.items():
        kept = sum(span in out for span, out in zip(nt_spans, nt_out)) / len(sources)
        rest = sacrebleu.corpus_bleu([strip_span(o, s) for o, s in zip(nt_out, nt_spans)], [refs]).score
        nested = sum(well_nested(o, tl) for o, tl in zip(tag_out, tag_lists)) / len(sources)
        stripped = sacrebleu.corpus_bleu([re.sub(r"\s+", " ", TAG_RE.sub("", o)).strip() for o in tag_out], [refs]).score
        on_word, judged = 0, 0
        for o, ref, tw in zip(tag_out, refs, tag_words):
            if tw is None:
                continue
            m = re.search(re.escape(tw[0]) + r"(.*?)" + re.escape(tw[1]), o)
            plain_words = set(re.findall(r"\w+", ref.lower()))
            if m is None:
                judged += 1
                continue
            inside = re.findall(r"\w+", m.group(1).lower())
            judged += 1
            on_word += bool(inside) and any(w in plain_words for w in inside)
        on_its, its_judged = 0, 0
        for k, (o, tw) in enumerate(zip(tag_out, tag_words)):
            m = re.search(re.escape(tw[0]) + r"(.*?)" + re.escape(tw[1]), o) if tw and ref_links else None
            if tw is None or ref_links is None:
                continue
            ref_words = refs[k].split()
            wanted = {bare(ref_words[j]) for i, j in ref_links[k] if i == tw[3]} - {""}
            if not wanted or not wanted & {bare(w) for w in TAG_RE.sub(" ", o).split()}:
                continue  # the output does not hold the reference's translation of the word: not judged
            its_judged += 1
            on_its += m is not None and bool(wanted & {bare(w) for w in m.group(1).split()})
        its = f"{on_its / its_judged:.1%} of {its_judged}" if ref_links is not None and its_judged else "n/a"
        print(f"{name:18} {kept:12.1%} {share(rest):10.1%} {nested:12.1%} {share(stripped):12.1%} "
              f"{on_word / max(judged, 1):13.1%} {its:>17}")


if __name__ == "__main__":
    main()
