"""seq2seq.documents.formats: HTML, XML and Markdown documents in, the same documents out with their text
translated (`translate --format`, the server's `format`, `translate_documents`)."""

from __future__ import annotations

import gzip
import json
import re

import pytest
from click.testing import CliRunner

from seq2seq.config.diagnostics import Diagnostic
from seq2seq.documents.formats import DocumentError, format_of_path, get_format, read_document, translate_documents
from seq2seq.documents.formats.html import html_segments, html_tree, xml_segments, xml_tree
from seq2seq.documents.formats.markdown import markdown_segments, markdown_tree
from seq2seq.inference.results import Translation
from conftest import FakeEngine


class WordEngine(FakeEngine):
    """Translates each text word by word with `word` (identity by default), with "▁" pieces and a
    diagonal attention (what the word alignment reads); records every call."""

    def __init__(self, word=lambda w: w) -> None:
        self.word = word
        self.calls: list[list[str]] = []

    def translate_nbest(self, texts, batch_tokens=4000, first_line=1, warn=None, **kw):
        self.calls.append(list(texts))
        out = []
        for text in texts:
            words = [self.word(w) for w in text.split()]
            n = len(words)
            # the step that predicts word i attends to source word i (what the alignment reads without a lexicon)
            attention = [[1.0 if j == i else 0.0 for j in range(n + 1)] for i in range(n + 1)]
            out.append([Translation(text=" ".join(words), score=-1.0, logprob=-2.0, token_ids=list(range(n)),
                                    pieces=["▁" + w for w in words], token_logprobs=[0.0] * (n + 1),
                                    src_pieces=["▁" + w for w in text.split()] + ["</s>"],
                                    attention=attention if kw.get("attention_layer") is not None else None)])
        return out


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>A small town</title>
<style>p { color: red; } /* a dog */</style>
<script>var greeting = "hello world";</script></head>
<body>
<!-- a comment between blocks -->
<h1 class='top'>Welcome to the <em>old</em> town!</h1>
<p>A man in a <b>red shirt</b> sits on a <a href="https://example.org/a?b=1&amp;c=2" title="A park bench">bench</a>. Two dogs play &amp; run.</p>
<p>Line one<br>line two <img src="dog.png" alt='A brown dog'> and <img src=cat.png alt=Cats> here.</p>
<ul>
  <li>One small cat</li>
  <li>Run <code>pip install seq2seq</code> first</li>
</ul>
<pre>  keep   this   text  </pre>
<div translate="no">Do not translate this</div>
<p>Keep <span translate="no">Brand Name</span> as it is.</p>
<table><tr><th>Name</th><td>A tall tree</td></tr></table>
</body></html>
"""

MARKDOWN = """# A small town

A man in a **red shirt** sits on a [park bench](https://example.org/a "A title").
Two dogs play _in the snow_.<HARD BREAK>
A hard break comes before this.

- One small cat
- Run `pip install seq2seq` first

> A quoted line
> goes on here.

| Name | Place |
|------|-------|
| A tall tree | A green field |

```python
print("hello world")
```

    indented code stays

<div>
<p>Some <b>inline html</b> text</p>
</div>
""".replace("<HARD BREAK>", "  ")  # (two spaces at the end of a line)


def upper(word: str) -> str:
    return word.upper()


def test_with_a_copying_engine_a_page_comes_back_byte_for_byte() -> None:
    engine = WordEngine()
    assert translate_documents(engine, [PAGE], "html", casing=False) == [PAGE]
    assert engine.calls  # (its text did go through the engine)


def test_every_text_is_translated_and_markup_code_and_untranslated_parts_are_kept() -> None:
    out = translate_documents(WordEngine(upper), [PAGE], "html", casing=False)[0]
    for translated in ("A SMALL TOWN", "WELCOME TO THE <em>OLD</em> TOWN!", "<b>RED SHIRT</b>", 'title="A PARK BENCH"',
                       "LINE ONE<br>LINE TWO", "alt='A BROWN DOG'", "alt=CATS>", "ONE SMALL CAT",
                       "RUN <code>pip install seq2seq</code> FIRST", "A TALL TREE", "TWO DOGS PLAY &amp; RUN."):
        assert translated in out, translated
    for kept in ('<html lang="en">', "<style>p { color: red; } /* a dog */</style>", 'var greeting = "hello world";',
                 "<!-- a comment between blocks -->", "<h1 class='top'>", 'href="https://example.org/a?b=1&amp;c=2"',
                 "<pre>  keep   this   text  </pre>", '<div translate="no">Do not translate this</div>',
                 '<span translate="no">Brand Name</span>', "\n  <li>"):
        assert kept in out, kept
    assert html_tree(out) == html_tree(PAGE)
    assert out.count("\n") == PAGE.count("\n")


def test_one_engine_call_carries_every_segment_of_every_document_of_a_stage() -> None:
    engine = WordEngine()
    translate_documents(engine, [PAGE, PAGE], "html", casing=False, split_sentences=False)
    # attributes: one call with the attention; text: the sentences without spans, then those with them
    assert len(engine.calls) == 3
    texts = [t for call in engine.calls for t in call]
    assert texts.count("A park bench") == 2 and texts.count("Name") == 2


def test_the_segments_of_a_page() -> None:
    doc = '<p>Visit <b>the old\n   town</b>.</p><img alt="A church"><p>  </p><p>42</p><pre>no</pre><img alt=Cats>'
    text = html_segments(doc, "x.html", "text")
    assert [(s.text, doc[s.start:s.end]) for s in text] == [
        ("Visit <b>the old town</b>.", "Visit <b>the old\n   town</b>.")]
    attributes = html_segments(doc, "x.html", "attributes")
    assert [(s.text, s.quote) for s in attributes] == [("A church", '"'), ("Cats", None)]
    assert attributes[0].written('A "big" church') == "A &quot;big&quot; church"
    assert attributes[1].written("Katzen") == "Katzen" and attributes[1].written("Zwei Katzen") == '"Zwei Katzen"'


def test_markdown_keeps_its_block_markup_code_and_hard_breaks() -> None:
    out = translate_documents(WordEngine(upper), [MARKDOWN], "markdown", casing=False)[0]
    for translated in ("# A SMALL TOWN", "A MAN IN A **RED SHIRT** SITS ON A [PARK BENCH](https://example.org/a \"A title\").",
                       "TWO DOGS PLAY _IN THE SNOW_.  \nA HARD BREAK", "- ONE SMALL CAT", "- RUN `pip install seq2seq` FIRST",
                       "> A QUOTED LINE GOES ON HERE.", "| A TALL TREE | A GREEN FIELD |", "<b>INLINE HTML</b> TEXT"):
        assert translated in out, translated
    for kept in ('```python\nprint("hello world")\n```', "    indented code stays", "|------|-------|"):
        assert kept in out, kept
    assert markdown_tree(out) == markdown_tree(MARKDOWN)
    assert translate_documents(WordEngine(), [MARKDOWN], "markdown", casing=False)[0] == MARKDOWN.replace(
        "bench](https://example.org/a \"A title\").\nTwo", "bench](https://example.org/a \"A title\"). Two").replace(
        "line\n> goes", "line goes")  # a block of lines becomes one line; nothing else changes


def test_markdown_segments_are_found_where_they_are_written() -> None:
    doc = "| a b | a b |\n|---|---|\n\n* item\n  goes on\n"
    segments = markdown_segments(doc, "x.md", "text")
    assert [(s.text, doc[s.start:s.end]) for s in segments] == [
        ("a b", "a b"), ("a b", "a b"), ("item goes on", "item\n  goes on")]
    assert segments[0].start < segments[1].start  # the same text twice: two places


def test_xml_translates_the_elements_that_hold_text() -> None:
    doc = ('<?xml version="1.0" encoding="UTF-8"?>\n<doc><title>A title</title><para>Click <b>here</b> now.</para>'
           '<list><item>one item</item></list><note translate="no">keep me</note><![CDATA[raw <text>]]></doc>\n')
    assert [s.text for s in xml_segments(doc, "x.xml", "text")] == ["A title", "Click <b>here</b> now.", "one item"]
    out = translate_documents(WordEngine(upper), [doc], "xml", casing=False)[0]
    assert "<para>CLICK <b>HERE</b> NOW.</para>" in out and '<note translate="no">keep me</note>' in out
    assert "<![CDATA[raw <text>]]>" in out and out.startswith('<?xml version="1.0" encoding="UTF-8"?>')
    assert xml_tree(out) == xml_tree(doc)


def test_xml_that_is_not_well_formed_is_refused_naming_line_and_column() -> None:
    with pytest.raises(DocumentError, match=r"^f\.xml:2:\d+: not well-formed XML: .*mismatch"):
        xml_segments("<a>\n<b></a>", "f.xml", "text")


def test_a_changed_structure_is_warned_about_and_the_document_still_written() -> None:
    notes: list[Diagnostic] = []
    out = translate_documents(WordEngine(lambda w: w + "<i>" if w == "dog" else w), ["<p>A dog runs.</p>"], "html",
                              warn=notes.append, casing=False)
    assert out == ["<p>A dog<i> runs.</p>"]
    assert [d.code for d in notes] == ["tree_changed"] and notes[0].line == 1


def test_plain_text_keeps_its_lines_blank_lines_and_line_ends() -> None:
    doc = "A dog runs.\r\n\n  Two cats.  \nend"
    assert translate_documents(WordEngine(upper), [doc], "text", casing=False) == ["A DOG RUNS.\r\n\n  TWO CATS.  \nEND"]


def test_formats_by_name_and_file_name() -> None:
    assert [format_of_path(p) for p in ("a.html", "b.HTM", "c.md", "d.markdown", "e.xml", "f.txt", "-", "g.en")] == [
        "html", "html", "markdown", "markdown", "xml", "text", "text", "text"]
    with pytest.raises(DocumentError, match="unknown document format 'pdf'; choose one of text, html, xml, markdown"):
        get_format("pdf")


def test_read_document_refuses_bytes_that_are_not_utf8_naming_the_line(tmp_path) -> None:
    path = tmp_path / "page.html"
    path.write_bytes(b"<p>one</p>\n<p>caf\xe9</p>\n")
    with pytest.raises(DocumentError, match=r"page\.html:2: not UTF-8 \(byte 0xe9\)"):
        read_document(str(path), "page.html", "html")
    zipped = tmp_path / "page.md.gz"
    zipped.write_bytes(gzip.compress("# Título\n".encode()))
    assert read_document(str(zipped), "page.md.gz", "markdown") == "# Título\n"


# ---- the real model: the CLI and the server ---------------------------------------------------------------

def test_translate_format_html_through_the_cli(tiny_model_dir, tmp_path) -> None:
    from seq2seq.cli import cli

    page = tmp_path / "page.html"
    page.write_text(PAGE, encoding="utf-8")
    out = tmp_path / "out.html"
    result = CliRunner().invoke(cli, ["translate", str(tiny_model_dir), "-i", str(page), "-o", str(out), "--beam", "2"])
    assert result.exit_code == 0, result.output
    translated = out.read_text(encoding="utf-8")
    assert translated != PAGE and html_tree(translated) == html_tree(PAGE)
    assert "<pre>  keep   this   text  </pre>" in translated


def test_a_document_on_stdin_comes_back_whole_on_stdout(tiny_model_dir) -> None:
    from seq2seq.cli import cli

    doc = "# A dog\n\nA man **runs**.\n\n```\nkeep\n```\n"
    result = CliRunner().invoke(cli, ["translate", str(tiny_model_dir), "--format", "markdown", "--beam", "1"],
                                input=doc)
    assert result.exit_code == 0, result.output
    assert markdown_tree(result.stdout) == markdown_tree(doc) and "```\nkeep\n```" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["--format", "html", "--json"], "--format html writes the translated document; --json is an option of"),
    (["--format", "markdown", "--nbest", "2"], "--nbest is an option of line-by-line output"),
    (["--format", "pdf"], "'pdf' is not one of"),
])
def test_options_of_line_output_are_refused_with_a_document(tiny_model_dir, tmp_path, args, message) -> None:
    from seq2seq.cli import cli

    result = CliRunner().invoke(cli, ["translate", str(tiny_model_dir), *args], input="<p>A dog.</p>\n")
    assert result.exit_code != 0 and message in result.output


def test_a_bad_document_fails_in_one_line_before_the_model_loads(tmp_path) -> None:
    from seq2seq.cli import cli

    bad = tmp_path / "bad.xml"
    bad.write_text("<a><b></a>\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["translate", str(tmp_path / "no-model"), "-i", str(bad)])
    assert result.exit_code == 1
    assert re.search(r"bad\.xml:1:\d+: not well-formed XML", result.output) and "Traceback" not in result.output


def test_the_server_takes_a_format(tiny_model_dir) -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from test_serve import call, serving

    from seq2seq.inference.translator import Translator
    from seq2seq.serve.app import create_app

    docs = ["# A dog\n\nA man **runs**.\n", "- one cat\n- two dogs\n"]
    with serving(create_app(Translator.load(tiny_model_dir, device="cpu"))) as (port, _):
        status, body = call(port, "POST", "/translate", {"texts": docs, "format": "markdown", "beam": 2})
        assert status == 200, body
        texts = [t["text"] for t in body["translations"]]
        assert [markdown_tree(t) for t in texts] == [markdown_tree(d) for d in docs]
        status, body = call(port, "POST", "/translate", {"texts": docs, "format": "pdf"})
        assert status == 422 and "format must be one of text, html, xml, markdown" in json.dumps(body)
        status, body = call(port, "POST", "/translate", {"texts": docs, "format": "html", "prefix": "Ein"})
        assert status == 422 and "whole document" in json.dumps(body)


def test_the_documents_benchmark_runs_at_its_smallest(tiny_model_dir, multi30k_small) -> None:
    from conftest import run_benchmark

    out = run_benchmark("documents.py", tiny_model_dir, "--data-dir", multi30k_small["val.en"].parent,
                        "--split", "val", "--sentences", 24, "--beam", 1, "--repeats", 1).stdout
    rows = re.findall(r"^(html|markdown) +(True|False) +(\d+) of (\d+) +\d+ +[\d.]+ +[\d.]+ +[\d.]+$", out, re.M)
    assert [r[0] for r in rows] == ["html", "markdown"], out
    assert all(same == "True" and kept == total for _, same, kept, total in rows), out
