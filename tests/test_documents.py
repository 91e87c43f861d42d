"""The text pipeline (seq2seq.documents): sentences split and joined with the line's own spacing,
casing, looped outputs searched again, and `translate_lines` as every front-end uses it (a fake
engine that answers one marker per sentence proves what reaches the engine; the real CLI and server
on the session's tiny model)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from seq2seq.cli import cli
from seq2seq.config.diagnostics import Diagnostic
from seq2seq.documents.casing import Case, Cased, detect, normalise, recase
from seq2seq.documents.line_translation import LOOP_GUARD, pipeline_defaults, translate_lines
from seq2seq.documents.loops import looped, output_loops
from seq2seq.documents.sentences import Sentence, join, split
from seq2seq.inference.controls import SteeringError
from seq2seq.inference.results import Translation
from conftest import FakeEngine

# ---- sentences ----------------------------------------------------------------------------------------

LINE_TEXT = st.lists(st.sampled_from(list("aZé9 .!?…\"'()-,\t\u00a0\u3000") + ["Dr.", "U.S.", "...", " A", "www.a.b"]),
                     max_size=40).map("".join)


@settings(max_examples=150, deadline=None)
@given(LINE_TEXT)
def test_join_of_split_is_the_line_exactly(line):
    sentences = split(line, "en")
    assert join(sentences) == line
    for k, s in enumerate(sentences):
        assert s.text == s.text.strip() and not s.space.strip()
        assert s.text or (k == 0 and s.space)  # only a line's leading whitespace has no text


@pytest.mark.parametrize("line, lang, want", [
    ("Dr. Smith arrived at 5 p.m. on Monday. He was late.", "en",
     ["Dr. Smith arrived at 5 p.m. on Monday.", "He was late."]),
    ("Mr. and Mrs. Jones live in the U.S. They have two dogs.", "en",
     ["Mr. and Mrs. Jones live in the U.S.", "They have two dogs."]),
    ("The ticket costs 3.50 dollars. Visit www.example.com today.", "en",
     ["The ticket costs 3.50 dollars.", "Visit www.example.com today."]),
    ('He said "Stop!" Then he left.', "en", ['He said "Stop!"', "Then he left."]),
    ("Das kostet z. B. 3,50 Euro. Es ist billig.", "de", ["Das kostet z. B. 3,50 Euro.", "Es ist billig."]),
    ("M. Dupont arrive à 9 h. Il est en retard.", "fr", ["M. Dupont arrive à 9 h.", "Il est en retard."]),
    ("A dog runs.", "xx", ["A dog runs."]),  # a language without rules of its own: English's
])
def test_abbreviations_numbers_and_quotes_do_not_end_a_sentence(line, lang, want):
    assert [s.text for s in split(line, lang)] == want


@pytest.mark.parametrize("line, lang, want", [
    ("A man rides a horse A dog runs.", "en", ["A man rides a horse", "A dog runs."]),
    ("Two men talk  The dog sleeps! A cat sits", "en", ["Two men talk", "The dog sleeps!", "A cat sits"]),
    ("Ein Mann fährt Ein Hund rennt.", "de", ["Ein Mann fährt", "Ein Hund rennt."]),
    ("Un homme court Un chien dort.", "fr", ["Un homme court", "Un chien dort."]),
    # no run-on: a capitalised word inside a sentence, a title, the German formal "Sie", an acronym
    ("A man reads The Da Vinci Code.", "en", ["A man reads The Da Vinci Code."]),  # mostly capitalised: a title
    ("A man has fallen asleep while reading The Da Vinci Code.", "en",  # the kind of line it splits wrongly
     ["A man has fallen asleep while reading", "The Da Vinci Code."]),
    ("Reading The Da Vinci Code Is Fun", "en", ["Reading The Da Vinci Code Is Fun"]),
    ("Ich weiß, dass Sie kommen.", "de", ["Ich weiß, dass Sie kommen."]),
    ("A man rides to New York with A.J. and I", "en", ["A man rides to New York with A.J. and I"]),
    ("a man rides a horse a dog runs", "en", ["a man rides a horse a dog runs"]),  # nothing marks the start
    ("A man rides a horse A dog runs.", "xx", ["A man rides a horse", "A dog runs."]),  # English's rules
])
def test_a_sentence_run_on_without_its_stop_is_split_before_a_word_that_starts_one(line, lang, want):
    assert [s.text for s in split(line, lang)] == want
    assert join(split(line, lang)) == line


def test_the_spacing_between_sentences_is_kept():
    assert split("  A man rides.  A dog runs!\tIs it raining? ", "en") == [
        Sentence("", "  "), Sentence("A man rides.", "  "), Sentence("A dog runs!", "\t"),
        Sentence("Is it raining?", " ")]
    assert split("", "en") == [] and split("   ", "en") == [Sentence("", "   ")]


# ---- casing -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("written", ["A man in a blue shirt is standing on a ladder.",
                                     "I think the dog is hungry, so I feed it.",
                                     "Two children play with a ball near the water."])
def test_an_upper_case_sentence_is_translated_as_written_and_its_output_upper_cased(written):
    cased = normalise(written.upper(), "en")
    assert cased == Cased(written, Case.UPPER)
    assert recase(cased, "Ein Mann auf einer Straße.") == "EIN MANN AUF EINER STRAẞE."  # lower-cased: the same words
    assert normalise(written, "en") == Cased(written, Case.AS_WRITTEN)  # as usually written: untouched


def test_title_case_keeps_acronyms_and_its_output_is_left_as_written():
    cased = normalise("A Visit To The NASA Museum With My Dog.", "en")
    assert cased == Cased("A visit to the NASA museum with my dog.", Case.TITLE)
    assert recase(cased, "Ein Besuch im NASA-Museum.") == "Ein Besuch im NASA-Museum."


@pytest.mark.parametrize("text, case", [
    ("NASA", Case.AS_WRITTEN), ("New York", Case.AS_WRITTEN),  # too short to tell
    ("The NASA and ESA missions were launched today.", Case.AS_WRITTEN),  # acronyms in a plain sentence
    ("Ein Mann mit einem Hut steht vor dem Haus.", Case.AS_WRITTEN),  # German capitalises its nouns
    ("I CANNOT SEE WHERE THE GREEN ARROW IS POINTING.", Case.UPPER),
    ("A Woman's Hat Is Red.", Case.TITLE),
])
def test_how_a_sentence_is_written(text, case):
    assert detect(text) is case


# ---- loops --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, loops", [
    ("Ein Mann Mann Mann.", True),
    ("man man man man", True),
    ("von einem großen schwarz-weißen Bild von einem großen schwarz-weißen Bild", True),
    ("Ein INEEEEEEEEEEEEENEEENEEEEAAAAAGGGGGGGGG", True),
    ("Konnnnnnsamachaaaachachacha-", True),
    ("Ein Mann fährt Fahrrad.", False),
    ("Die Schifffahrt ist sehr sehr schön.", False),
    ("Er zahlt 10000 Euro für ein Haus und ein Auto.", False),
    ("Ein Mann und ein Mann und eine Frau.", False),
])
def test_looped_outputs_are_told(text, loops):
    assert looped(text) is loops


def test_an_output_repeating_its_source_is_no_loop():
    assert not output_loops("ha ha ha ha", "ha ha ha ha")
    assert output_loops("A man.", "Ein Mann Mann Mann Mann")


# ---- translate_lines through a fake engine --------------------------------------------------------------

def hyp(text: str, score: float = -1.0) -> Translation:
    words = text.split()
    return Translation(text=text, score=score, logprob=2 * score, token_ids=list(range(len(words))),
                       pieces=words, token_logprobs=[score] * (len(words) + 1), src_pieces=["s", "</s>"],
                       attention=[[0.5, 0.5]] * (len(words) + 1))


class MarkerEngine(FakeEngine):
    """Answers each text with "<text>" (or what `answers` says for it), and records every call."""

    def __init__(self, answers: dict[str, str] | None = None, guarded: dict[str, str] | None = None) -> None:
        self.calls: list[tuple[list[str], dict]] = []
        self.answers, self.guarded = answers or {}, guarded or {}

    def translate_nbest(self, texts, batch_tokens=4000, first_line=1, warn=None, **kw):
        self.calls.append((list(texts), kw))
        out = []
        for i, t in enumerate(texts):
            if "WARN" in t:
                warn(Diagnostic("about this one", first_line + i, "text", "test"))
            if "BAD" in t:
                raise SteeringError("cannot steer this one", line=first_line + i, field="prefix")
            answers = self.guarded if kw.get("no_repeat_ngram") else self.answers
            out.append([hyp(answers.get(t, f"<{t}>"))] if t.strip() else [])
        return out


def test_every_sentence_reaches_the_engine_once_in_one_call_and_comes_back_in_order():
    engine = MarkerEngine()
    lines = ["A man rides.  A dog runs!\tIs it raining?", "", "   ", "One sentence.", " Two. Three. "]
    out = translate_lines(engine, lines, beam=3)
    assert len(engine.calls) == 1
    texts, kw = engine.calls[0]
    assert texts == ["A man rides.", "A dog runs!", "Is it raining?", "", "   ", "One sentence.", "Two.", "Three."]
    assert kw == {"beam": 3}
    assert [n[0].text if n else "" for n in out] == [
        "<A man rides.>  <A dog runs!>\t<Is it raining?>", "", "", "<One sentence.>", "<Two.> <Three.>"]
    joined = out[0][0]
    assert joined.score == -3.0 and joined.logprob == -6.0
    assert joined.pieces == ["<A", "man", "rides.>", "<A", "dog", "runs!>", "<Is", "it", "raining?>"]
    assert len(joined.token_logprobs) == len(joined.pieces) + 3 and len(joined.src_pieces) == 6
    assert len(joined.attention) == len(joined.token_logprobs)  # block-diagonal: each sentence its own columns
    assert joined.attention[0] == [0.5, 0.5, 0.0, 0.0, 0.0, 0.0] and joined.attention[-1][-2:] == [0.5, 0.5]


def test_with_the_steps_off_a_line_goes_to_the_engine_as_it_is():
    engine = MarkerEngine()
    out = translate_lines(engine, ["A MAN RIDES A BIKE. A DOG RUNS."], split_sentences=False, casing=False)
    assert engine.calls[0][0] == ["A MAN RIDES A BIKE. A DOG RUNS."]
    assert out[0][0].text == "<A MAN RIDES A BIKE. A DOG RUNS.>"


def test_upper_case_sentences_are_translated_normal_case_and_upper_cased_back():
    engine = MarkerEngine({"A man rides a red bike.": "Ein Mann fährt ein rotes Fahrrad."})
    out = translate_lines(engine, ["A MAN RIDES A RED BIKE. A dog runs."], source_lang="en")
    assert engine.calls[0][0] == ["A man rides a red bike.", "A dog runs."]
    assert out[0][0].text == "EIN MANN FÄHRT EIN ROTES FAHRRAD. <A dog runs.>"


def test_steering_per_sentence_prefix_first_avoid_each_constraints_unsplit():
    engine, notes = MarkerEngine(), []
    translate_lines(engine, ["A b c. D e f.", "G h i. J k l."], first_line=7, warn=notes.append,
                    prefix=["Ein", None], avoid=[["x"], ["y"]], constraints=[[], ["Hund"]])
    texts, kw = engine.calls[0]
    assert texts == ["A b c.", "D e f.", "G h i. J k l."]
    assert kw["prefix"] == ["Ein", None, None]
    assert kw["avoid"] == [["x"], ["x"], ["y"]] and kw["constraints"] == [[], [], ["Hund"]]
    assert [(d.line, d.code) for d in notes] == [(8, "unsplit_constraints")]


def test_warnings_and_errors_name_the_input_line():
    notes = []
    translate_lines(MarkerEngine(), ["A b. C WARN.", "D e."], first_line=11, warn=notes.append)
    assert [(d.line, d.message) for d in notes] == [(11, "about this one")]
    with pytest.raises(SteeringError, match="^line 13: cannot steer this one"):
        translate_lines(MarkerEngine(), ["A b. C d.", "E f.", "G h. BAD."], first_line=11)


def test_a_sentence_with_an_empty_output_is_kept_and_warned_about():
    notes = []
    out = translate_lines(MarkerEngine({"The cat sleeps.": ""}), ["A dog runs. The cat sleeps."], first_line=3,
                          warn=notes.append)
    assert out[0][0].text == "<A dog runs.> "
    assert [(d.line, d.code) for d in notes] == [(3, "empty_sentence")]


@pytest.mark.parametrize("line, want", [
    ("**Done.** Next one. Last.", ["**Done.**", "Next one.", "Last."]),  # a closing marker after the stop
    ("A <i>dog.</i>  A cat.", ["A <i>dog.</i>", "A cat."]),
    ("<b>One. Two.</b> Three.", ["<b>One. Two.</b>", "Three."]),  # a pair around two sentences: one
    ("See www.x.org. Then go.", ["See www.x.org.", "Then go."]),
])
def test_no_sentence_boundary_cuts_a_tag_pair_or_a_span(line, want):
    from seq2seq.documents.spans import unbroken

    got = split(line, "en", unbroken(line, markup=True))
    assert [s.text for s in got] == want and join(got) == line


def test_a_looped_sentence_with_spans_is_searched_again_with_the_attention_its_spans_need():
    from test_spans import CopyEngine

    class Looping(CopyEngine):
        def translate_nbest(self, texts, **kw):
            out = super().translate_nbest(texts, **kw)
            if not kw.get("no_repeat_ngram"):  # the first search loops; the guarded one copies
                out = [[dataclasses.replace(h[0], text="man man man man")] for h in out]
            return out

    engine = Looping()
    out = translate_lines(engine, ["A man sees https://x.org today."], casing=False)
    assert out[0][0].text == "A man sees https://x.org today."  # put back where it was, not at the end
    assert engine.calls[-1][1] == {"attention_layer": -1, "no_repeat_ngram": LOOP_GUARD}


def test_only_looped_outputs_are_searched_again_with_the_guard():
    engine = MarkerEngine({"A man.": "Mann Mann Mann Mann"}, guarded={"A man.": "Ein Mann."})
    out = translate_lines(engine, ["A dog. A man.", "A cat."])
    assert [n[0].text for n in out] == ["<A dog.> Ein Mann.", "<A cat.>"]
    assert len(engine.calls) == 2
    assert engine.calls[1] == (["A man."], {"no_repeat_ngram": LOOP_GUARD})
    plain = MarkerEngine({"A man.": "Mann Mann Mann Mann"})
    assert translate_lines(plain, ["A man."], loop_guard=False)[0][0].text == "Mann Mann Mann Mann"
    assert len(plain.calls) == 1


def test_a_model_directory_says_whether_the_pipeline_is_on(tmp_path):
    class Engine:
        path = tmp_path

    always = {"loop_guard": True, "spans": True, "markup": False}
    assert pipeline_defaults(Engine()) == {"split_sentences": True, "casing": True, **always}  # says nothing
    (tmp_path / "metadata.json").write_text(json.dumps({"sentence_level": False}))
    assert pipeline_defaults(Engine()) == {"split_sentences": False, "casing": False, **always}


# ---- the real model: the CLI, the Python API, the server ------------------------------------------------

@pytest.fixture(scope="module")
def translator(tiny_model_dir):
    from seq2seq.inference.translator import Translator

    return Translator.load(tiny_model_dir, device="cpu")


@pytest.fixture(scope="module")
def sentences(multi30k_small) -> list[str]:
    """Six held-out sentences that end in a full stop (a sentence without one runs into the next)."""
    return [s for s in multi30k_small["val.en"].read_text(encoding="utf-8").splitlines() if s.endswith(".")][:6]


def test_the_trainer_says_its_model_splits_sentences(tiny_model_dir):
    meta = json.loads((tiny_model_dir / "metadata.json").read_text(encoding="utf-8"))
    assert meta["sentence_level"] is True


def test_a_three_sentence_line_gives_one_output_line_joining_its_sentences(tiny_model_dir, translator, sentences):
    lines = [" ".join(sentences[:3]), "", sentences[3]]
    result = CliRunner().invoke(cli, ["translate", str(tiny_model_dir), "--beam", "2"], input="\n".join(lines) + "\n")
    assert result.exit_code == 0, result.output
    out = result.stdout_bytes.decode("utf-8").split("\n")[:-1]
    alone = [n[0].text for n in translate_lines(translator, sentences[:4], beam=2)]
    assert out == [" ".join(alone[:3]), "", alone[3]]


def test_a_one_sentence_line_gives_the_engines_own_translation(translator, sentences):
    raw = translator.translate_nbest(sentences, beam=2)
    assert translate_lines(translator, sentences, beam=2, loop_guard=False) == raw


def test_the_server_answers_as_translate_json_with_sentences_split(tiny_model_dir, translator, sentences):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from test_serve import call, cli_json, serving

    from seq2seq.serve.app import create_app

    texts = [" ".join(sentences[:3]), sentences[3].upper(), ""]
    with serving(create_app(translator)) as (port, _):
        status, body = call(port, "POST", "/translate", {"texts": texts, "beam": 2})
        assert status == 200, body
        assert body["translations"] == cli_json(tiny_model_dir, texts, "--beam", "2")
        status, body = call(port, "POST", "/translate", {"text": texts[0], "beam": 2, "split_sentences": False})
        assert status == 200 and body == cli_json(tiny_model_dir, texts[:1], "--beam", "2", "--no-split-sentences")[0]
        status, body = call(port, "POST", "/translate", {"text": "A dog.", "casing": "yes"})
        assert status == 422 and body["error"] == 'casing must be true or false, got "yes"'
