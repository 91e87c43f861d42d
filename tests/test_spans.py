"""Protected spans (seq2seq.documents.spans) and the word alignment they are put back by."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seq2seq.documents.alignment import piece_words, word_alignment
from seq2seq.documents.spans import Role, mask, unmask
from seq2seq.inference.results import Translation
from conftest import FakeEngine


def identity(text: str) -> list[tuple[int, int]]:
    return [(i, i) for i in range(len(text.split()))]


@pytest.mark.parametrize("span, kind", [
    ("https://example.org/a?b=1", "url"), ("www.example.com", "url"), ("anna.b@example.de", "email"),
    ("@anna_b", "handle"), ("{name}", "variable"), ("{{count}}", "variable"), ("%s", "format"), ("%d", "format"),
    ("%(name)s", "format"), ("`rm -rf`", "code"), ("42", "number"), ("3.14", "number"), ("1,000", "number"),
])
def test_every_non_translatable_is_found_and_restored_verbatim(span: str, kind: str) -> None:
    text = f"A man sends {span} to the dog ."
    m = mask(text)
    assert [(s.kind, s.text) for s in m.spans] == [(kind, span)]
    assert m.text == "A man sends to the dog ."
    restored, notes = unmask(m, "Ein Mann schickt an den Hund .", [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (6, 6)])
    assert span in restored and notes == []


def test_golden_mask_and_unmask_with_a_hand_made_alignment() -> None:
    m = mask("Visit <b>the old town</b> at https://x.org now.", markup=True)
    assert m.text == "Visit the old town at now."
    # Besuchen(0) Sie(1) die(2) Altstadt(3) um(4) jetzt.(5); source: Visit the old town at now.
    alignment = [(0, 0), (0, 1), (1, 2), (2, 3), (3, 3), (4, 4), (5, 5)]
    assert unmask(m, "Besuchen Sie die Altstadt um jetzt.", alignment) == \
        ("Besuchen Sie <b>die Altstadt</b> um https://x.org jetzt.", [])


def test_a_url_inside_a_tag_stays_in_the_tag_attributes_unchanged() -> None:
    text = 'A <a href="https://x.org/p?q=1" title="t">dog</a> runs.'
    m = mask(text, markup=True)
    assert m.text == "A dog runs." and [s.text for s in m.spans] == ['<a href="https://x.org/p?q=1" title="t">', "</a>"]
    assert unmask(m, "Ein Hund rennt.", identity("Ein Hund rennt."))[0] == \
        'Ein <a href="https://x.org/p?q=1" title="t">Hund</a> rennt.'


def test_a_line_break_between_two_words_stays_glued() -> None:
    m = mask("one<br/>two", markup=True)
    assert m.text == "one two"
    assert unmask(m, "eins zwei", identity("eins zwei"))[0] == "eins<br/>zwei"


def test_a_number_goes_before_the_translation_of_the_word_it_counts() -> None:
    m = mask("The man runs 42 km today.")
    assert m.text == "The man runs km today."
    # Der(0) Mann(1) läuft(2) heute(3) km.(4)
    out, _ = unmask(m, "Der Mann läuft heute km.", [(0, 0), (1, 1), (2, 2), (3, 4), (4, 3)])
    assert out == "Der Mann läuft heute 42 km."


def test_a_span_before_final_punctuation_stays_inside_it() -> None:
    m = mask("Write to anna@example.org.")
    assert m.text == "Write to."
    assert unmask(m, "Schreib an.", [(0, 0), (1, 1)])[0] == "Schreib an anna@example.org."


def test_markdown_and_html_markup_only_with_markup() -> None:
    text = "A **big** dog <i>runs</i> [home](http://x.org)."
    assert mask(text).text == "A **big** dog <i>runs</i> [home]()." and mask(text).spans[0].text == "http://x.org"
    m = mask(text, markup=True)
    assert m.text == "A big dog runs home."
    assert unmask(m, m.text, identity(m.text))[0] == text


def test_code_comments_entities_and_translate_no_are_held_verbatim() -> None:
    text = 'Run <code>make all</code> <!-- x --> &copy; <span translate="no">Firefox Nightly</span> now.'
    m = mask(text, markup=True)
    assert m.text == "Run now."
    assert unmask(m, m.text, identity(m.text))[0] == text


def test_crossing_tags_become_points_and_unplaced_spans_are_warned_never_dropped() -> None:
    m = mask("<b>a <i>b</b> c</i> d", markup=True)  # </b> closes <i> as an HTML parser does
    assert [s.role for s in m.spans] == [Role.OPEN, Role.POINT, Role.CLOSE, Role.POINT]
    out, notes = unmask(mask("the <b>dog</b> runs", markup=True), "der Hund läuft", [(0, 0)])
    assert "<b>" in out and "</b>" in out and "Hund" in out and "läuft" in out
    assert notes and notes[0].code == "span_unplaced"


TAGGED = st.lists(st.sampled_from(["w", "x", "<b>", "</b>", "<i>", "</i>", '<a href="u">', "</a>", "<br/>", "{v}"]),
                  min_size=1, max_size=14)


def well_nested(text: str) -> bool:
    stack = []
    for m in re.finditer(r"<(/?)(\w+)[^>]*?(/?)>", text):
        if m.group(3):
            continue
        if m.group(1):
            if not stack or stack.pop() != m.group(2):
                return False
        else:
            stack.append(m.group(2))
    return not stack


@settings(max_examples=150, deadline=None)
@given(TAGGED, st.lists(st.integers(0, 20), max_size=30), st.integers(0, 8))
def test_tags_come_out_well_nested_and_complete_on_any_alignment(tokens: list[str], links: list[int],
                                                                 target_words: int) -> None:
    source = " ".join(tokens)
    m = mask(source, markup=True)
    if not well_nested(source):
        return
    target = " ".join(f"t{k}" for k in range(target_words))
    alignment = list(zip(links[::2], links[1::2]))
    out, _ = unmask(m, target, alignment)
    assert well_nested(out)
    assert sorted(re.findall(r"<[^>]+>|\{v\}", out)) == sorted(re.findall(r"<[^>]+>|\{v\}", source))
    assert re.findall(r"<[^>]+>", out) == re.findall(r"<[^>]+>", source)  # in source order: the same tree
    assert re.findall(r"t\d+", out) == target.split()


def test_tags_keep_their_source_order_when_the_translation_reorders_their_words() -> None:
    m = mask("<b>red</b> and <i>blue</i>", markup=True)
    reversed_alignment = [(0, 2), (1, 1), (2, 0)]  # "blau und rot"
    out, _ = unmask(m, "blau und rot", reversed_alignment)
    assert re.findall(r"</?\w>", out) == ["<b>", "</b>", "<i>", "</i>"] and well_nested(out)
    assert re.sub(r"<[^>]+>", "", out) == "blau und rot"
    follows, _ = unmask(m, "rot und blau", [(0, 0), (1, 1), (2, 2)])
    assert follows == "<b>rot</b> und <i>blau</i>"  # an alignment in order is followed as it is


def test_word_alignment_from_attention() -> None:
    assert piece_words(["▁Ein", "▁Mann", "es", "▁geht", "."]) == [0, 1, 1, 2, 2]
    t = Translation(text="Ein Hund", score=0.0, logprob=0.0, token_ids=[1, 2], pieces=["▁Ein", "▁Hund"],
                    token_logprobs=[0.0, 0.0, 0.0], src_pieces=["▁A", "▁do", "g", "▁runs", "</s>"],
                    attention=[[0.9, 0.0, 0.0, 0.0, 0.1], [0.0, 0.3, 0.4, 0.1, 0.2], [0.0, 0.0, 0.0, 0.0, 1.0]])
    assert word_alignment(t) == [(0, 0), (1, 1), (2, 1)]


class CopyEngine(FakeEngine):
    """Translates each text as itself, with "▁" pieces and a diagonal attention; records every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], dict]] = []

    def translate_nbest(self, texts, batch_tokens=4000, first_line=1, warn=None, **kw):
        self.calls.append((list(texts), kw))
        out = []
        for text in texts:
            words = text.split()
            n = len(words)
            # the step that predicts word i attends to source word i (what the alignment reads without a lexicon)
            attention = [[1.0 if j == i else 0.0 for j in range(n + 1)] for i in range(n + 1)]
            out.append([Translation(text=text, score=-1.0, logprob=-1.0, token_ids=list(range(n)),
                                    pieces=["▁" + w for w in words], token_logprobs=[0.0] * (n + 1),
                                    src_pieces=["▁" + w for w in words] + ["</s>"],
                                    attention=attention if kw.get("attention_layer") is not None else None)])
        return out


def test_translate_lines_masks_sentences_with_spans_and_asks_attention_only_for_them() -> None:
    from seq2seq.documents.line_translation import translate_lines

    engine = CopyEngine()
    lines = ["Mail anna@example.org now. A <b>big</b> dog runs.", "Two dogs play."]
    out = translate_lines(engine, lines, spans=True, markup=True, casing=False)
    assert [n[0].text for n in out] == lines
    assert engine.calls == [(["Two dogs play."], {}), (["Mail now.", "A big dog runs."], {"attention_layer": -1})]
    assert out[0][0].attention is None  # asked by the spans step, not by the caller
    plain = CopyEngine()
    assert [n[0].text for n in translate_lines(plain, lines, spans=False, casing=False)] == lines
    assert all("attention_layer" not in kw for _, kw in plain.calls)  # the step is off when not wanted


def test_spans_through_the_real_cli_keep_the_url_and_the_tags(tiny_model_dir, tmp_path) -> None:
    from click.testing import CliRunner

    from seq2seq.cli import cli

    source = tmp_path / "in.txt"
    source.write_text("A man sees https://example.org/x today.\nA <b>dog</b> runs.\nTwo dogs.\n", encoding="utf-8")
    target = tmp_path / "out.txt"
    result = CliRunner().invoke(cli, ["translate", str(tiny_model_dir), "-i", str(source), "-o", str(target),
                                      "--spans", "--markup"])
    assert result.exit_code == 0, result.output
    lines = target.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3
    assert "https://example.org/x" in lines[0]
    assert well_nested(lines[1]) and re.findall(r"</?b>", lines[1]) == ["<b>", "</b>"]


def test_the_server_takes_spans_and_markup_and_answers_as_translate_json(tiny_model_dir, tmp_path) -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from click.testing import CliRunner
    from test_serve import call, serving

    from seq2seq.cli import cli

    from seq2seq.inference.translator import Translator
    from seq2seq.serve.app import create_app

    texts = ["A man sees https://example.org/x today.", "A <b>dog</b> runs."]
    with serving(create_app(Translator.load(tiny_model_dir, device="cpu"))) as (port, _):
        status, body = call(port, "POST", "/translate", {"texts": texts, "beam": 2, "spans": True, "markup": True})
        assert status == 200, body
        out = tmp_path / "out.jsonl"
        CliRunner().invoke(cli, ["translate", str(tiny_model_dir), "--json", "-o", str(out), "--beam", "2", "--spans",
                                 "--markup"], input="\n".join(texts) + "\n")
        assert body["translations"] == [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        assert "https://example.org/x" in body["translations"][0]["text"]
