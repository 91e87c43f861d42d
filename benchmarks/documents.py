"""Documents (issue 71): an HTML page and a Markdown file built from a held-out split (~100 sentences each,
with headings, paragraphs of 3 sentences, inline tags, links, lists, a table, images and code), translated
whole (`translate_documents`) and as their text alone (the same segments without their markup, through
`translate_lines`), side by side.

    python benchmarks/documents.py runs/quickstart/model --data-dir runs/quickstart/data --split valid
    python benchmarks/documents.py runs/multi30k_en_de/model --data-dir ../shared/data/multi30k --split val

Figures per format: whether the output parses to the same tree as the input (the format's `tree`), the
inline tags of the input found in the output, the warnings the call drew, and the seconds each way
(the best of --repeats, alternating, one thread) with their ratio (target: <= 1.2). Never the test set.
"""

from __future__ import annotations

import argparse
import gzip
import re
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks.common import machine_info  # noqa: E402
from seq2seq.config.diagnostics import Diagnostic  # noqa: E402
from seq2seq.documents import spans  # noqa: E402
from seq2seq.documents.formats import get_format, translate_documents  # noqa: E402
from seq2seq.documents.line_translation import translate_lines  # noqa: E402
from seq2seq.inference.translator import Translator  # noqa: E402


TAG_NAME = re.compile(r'^(<a href="[^"]*")[^>]*(>)$')  # a link tag without its (translated) title
TAG_ANY = re.compile(r"<a [^>]*>|</?(?:b|em|a)>|\*\*|(?<![\w_])_|_(?![\w_])|\[|\]\([^)]*\)")


def wrapped(sentence: str, k: int, html: bool) -> str:
    """The sentence with an inline tag around its 2nd-3rd words (bold, emphasis or a link, by k)."""
    words = sentence.split()
    if len(words) < 4:
        return sentence
    inner = " ".join(words[1:3])
    if html:
        tag = ("<b>{}</b>", "<em>{}</em>", '<a href="https://example.org/p/{k}" title="page {k}">{}</a>')[k % 3]
    else:
        tag = ("**{}**", "_{}_", "[{}](https://example.org/p/{k})")[k % 3]
    return " ".join([words[0], tag.format(inner, k=k), *words[3:]])


def groups(sentences: list[str]) -> list[tuple[int, list[str]]]:
    """The sentences 3 at a time, numbered from 1 (what a block of the document is built from)."""
    return [(k // 3 + 1, sentences[k:k + 3]) for k in range(0, len(sentences) - 2, 3)]


def html_page(sentences: list[str]) -> str:
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{sentences[0]}</title>",
           "<style>p { margin: 0 }</style></head>", "<body>", f"<h1>{sentences[1]}</h1>"]
    for k, group in groups(sentences[2:]):
        if k % 5 == 0:
            out.append("<ul>\n" + "".join(f"  <li>{wrapped(x, k + j, True)}</li>\n" for j, x in enumerate(group)) + "</ul>")
        elif k % 7 == 0:
            out.append(f'<h2>{group[0]}</h2>\n<img src="img/{k}.png" alt="{group[1]}">\n<p>{group[2]}</p>')
        else:
            out.append(f"<p>{wrapped(group[0], k, True)} {group[1]} {group[2]}</p>")
        if k % 6 == 0:
            out.append("<pre><code>seq2seq translate model -i page.html</code></pre>")
    out += ["<!-- the end -->", "</body></html>", ""]
    return "\n".join(out)


def markdown_file(sentences: list[str]) -> str:
    out = [f"# {sentences[0]}", ""]
    for k, group in groups(sentences[1:]):
        if k % 5 == 0:
            out += [f"- {wrapped(x, k + j, False)}" for j, x in enumerate(group)] + [""]
        elif k % 7 == 0:
            out += [f"## {group[0]}", "", "| | |", "|---|---|", f"| {group[1]} | {group[2]} |", ""]
        else:
            out += [f"{wrapped(group[0], k, False)} {group[1]}", group[2], ""]
        if k % 6 == 0:
            out += ["```sh", "seq2seq translate model -i README.md", "```", ""]
    return "\n".join(out)


def text_alone(document: str, fmt: str) -> list[str]:
    """The document's segments without their markup: what translating "its text alone" translates."""
    form = get_format(fmt)
    return [spans.mask(seg.text, markup=True).text for stage in form.stages
            for seg in form.segments(document, fmt, stage)]


def read(data_dir: Path, split_name: str, lang: str, limit: int) -> list[str]:
    path = next(p for p in (data_dir / f"{split_name}.{lang}.gz", data_dir / f"{split_name}.{lang}") if p.exists())
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip().endswith(".")]
    return lines[:limit]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dir")
    p.add_argument("--data-dir", type=Path, required=True)
    p.add_argument("--split", default="val")
    p.add_argument("--src-lang", default="en")
    p.add_argument("--sentences", type=int, default=100)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(1)
    print(machine_info(1))
    translator = Translator.load(args.model_dir, device="cpu")
    sentences = read(args.data_dir, args.split, args.src_lang, args.sentences)
    print(f"model {args.model_dir}; {len(sentences)} sentences of {args.data_dir}/{args.split}; beam {args.beam}")
    print(f"{'format':<10} {'same tree':>9} {'tags kept':>11} {'warnings':>8} {'document s':>10} {'text s':>8} {'ratio':>6}")
    for fmt, document in (("html", html_page(sentences)), ("markdown", markdown_file(sentences))):
        plain = text_alone(document, fmt)
        notes: list[Diagnostic] = []
        best = {"document": float("inf"), "text": float("inf")}
        out = document
        for _ in range(args.repeats):
            start = time.perf_counter()
            notes.clear()
            out = translate_documents(translator, [document], fmt, warn=notes.append, beam=args.beam)[0]
            best["document"] = min(best["document"], time.perf_counter() - start)
            start = time.perf_counter()
            translate_lines(translator, plain, beam=args.beam, warn=lambda d: None)
            best["text"] = min(best["text"], time.perf_counter() - start)
        form = get_format(fmt)
        tags = [s.text for seg in form.segments(document, fmt, "text") for s in spans.mask(seg.text, markup=True).spans
                if s.kind == "tag"]
        names = Counter(TAG_NAME.sub(r"\1\2", tag) for tag in tags)  # <a href=".." title=".."> -> <a href="..">
        found = Counter(TAG_NAME.sub(r"\1\2", tag) for tag in TAG_ANY.findall(out))
        kept = sum(min(n, found[name]) for name, n in names.items())
        same = form.tree(out) == form.tree(document)
        print(f"{fmt:<10} {str(same):>9} {kept:>5} of {len(tags):<3} {len(notes):>8} {best['document']:>10.2f} "
              f"{best['text']:>8.2f} {best['document'] / best['text']:>6.2f}")


if __name__ == "__main__":
    main()
