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
  tags on words   tags around a reference word: the tagged source is one word whose output word (unmasked)
                  is found in the reference, and the tag wraps a word of the reference
Never the test set. The machine is shared: compare the columns of one run.
"""

from __future__ import annotations

import argparse
import gzip
import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sacrebleu  # noqa: E402

from seq2seq.documents.alignment import word_alignment  # noqa: E402
from seq2seq.documents.spans import mask, unmask  # noqa: E402
from seq2seq.inference.translator import Translator  # noqa: E402

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
                  shift: bool = False) -> list[str]:
    masked = [mask(s, markup=markup) for s in sources]
    hyps = translate(t, [m.text for m in masked], layer, beam)
    return [unmask(m, h.text if h else "", word_alignment(h, m.text, shift) if h else [])[0]
            for m, h in zip(masked, hyps)]


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
    ap.add_argument("--layers", default="-1", help="decoder layers to align with, comma-separated; a layer written "
                                                   "with 's' (-1s) aligns each piece by the step that reads it (shift-att)")
    args = ap.parse_args()
    rng = random.Random(71)
    sources = read(Path(args.data_dir), args.split, args.src, args.limit)
    refs = read(Path(args.data_dir), args.split, args.tgt, args.limit)
    t = Translator.load(args.model_dir)
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
        tag_words.append((opened, closed, " ".join(inner)) if b == a + 1 else None)

    def strip_span(out: str, span: str) -> str:
        return re.sub(r"\s+", " ", out.replace(span, " ")).strip()

    raw_nt = [h.text if h else "" for h in translate(t, nt_sources, None, args.beam)]
    raw_tags = [h.text if h else "" for h in translate(t, tag_sources, None, args.beam)]
    rows = {"engine alone": (raw_nt, raw_tags)}
    for given in args.layers.split(","):
        layer, shift = int(given.rstrip("s")), given.endswith("s")
        rows[f"spans, layer {given}"] = (through_spans(t, nt_sources, layer, args.beam, False, shift),
                                         through_spans(t, tag_sources, layer, args.beam, True, shift))
    print(f"{'':18} {'nt verbatim':>12} {'nt rest %':>10} {'tags nested':>12} {'tags BLEU %':>12} {'tags on word':>13}")
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
        print(f"{name:18} {kept:12.1%} {share(rest):10.1%} {nested:12.1%} {share(stripped):12.1%} "
              f"{on_word / max(judged, 1):13.1%}")


if __name__ == "__main__":
    main()
