"""One input's JSON form, read by one parser for the command line, the server and the Python API."""

from __future__ import annotations

import json

import pytest

from seq2seq.cli.steering import Steerer
from seq2seq.inference.inputs import Call, SourceInput, call_of, read_input, source_inputs
from seq2seq.inference.steering import SteeringError
from seq2seq.inference.inputs import FieldError
from seq2seq.inference.translator import Translator
from seq2seq.serve.requests import Limits, RequestError, parse_texts

GOOD = [
    "A dog.",
    {"text": "A dog."},
    {"text": "A dog.", "prefix": "Ein"},
    {"text": "A dog.", "constraints": ["Hund", "rennt"], "avoid": []},
    {"text": "", "avoid": ["Katze"], "prefix": None},
]

BAD = [  # (an input, what the message says after its name)
    (3, ' must be a string (or an object {"text": ...}), got 3'),
    (["A dog."], ' must be a string (or an object {"text": ...}), got ["A dog."]'),
    ({"prefix": "Ein"}, "text must be a string, got null"),
    ({"text": 5}, "text must be a string, got 5"),
    ({"text": "a", "colour": "red"}, " has unknown field(s) 'colour'; an input may hold 'text', 'prefix'"),
    ({"text": "a", "avoid": "Hund"}, 'avoid must be a list of strings, got "Hund"'),
    ({"text": "a", "constraints": {"Hund": 1}}, 'constraints must be a list of strings, got {"Hund": 1}'),
    ({"text": "a", "constraints": True}, "constraints must be a list of strings, got true"),
    ({"text": "a", "prefix": ["Ein"]}, 'prefix must be a string, got ["Ein"]'),
    ({"text": "a \ud800"}, "text is not valid Unicode: character 2 is a lone surrogate"),
    ({"text": "a", "avoid": ["ok", "\udfff"]}, "avoid[1] is not valid Unicode"),
]


@pytest.mark.parametrize("value", GOOD)
def test_an_input_reads_back_from_its_json_form(value):
    read = read_input(value, "inputs[0]")
    assert read_input(read.as_json(), "inputs[0]") == read
    if isinstance(value, str):
        assert read == SourceInput(value) and not read.steered
    else:
        assert read.text == value["text"]
        assert read.prefix == value.get("prefix") and read.constraints == value.get("constraints")


def test_the_steering_of_an_input():
    assert not SourceInput("a").steered and not SourceInput("a", "", [], []).steered  # given, if empty
    assert SourceInput("a", "Ein").steered and SourceInput("a", avoid=["Hund"]).steered


def _server_message(value) -> str:
    with pytest.raises(RequestError) as e:
        parse_texts({"texts": [value]}, Limits())
    assert e.value.status == 422 and e.value.details["code"] == "bad_field"
    return e.value.message


def _command_line_message(value) -> str:
    with pytest.raises(FieldError) as e:
        Steerer(json_input=True)([json.dumps(value)])
    return str(e.value)


@pytest.mark.parametrize("value,message", BAD)
def test_a_bad_input_gets_the_same_message_from_every_front_end(value, message):
    separators = {"inputs[0]": ".", "texts[0]": ".", "input line 1": ": "}
    said = {"inputs[0]": None, "texts[0]": _server_message(value), "input line 1": _command_line_message(value)}
    with pytest.raises(FieldError) as e:
        read_input(value, "inputs[0]")
    said["inputs[0]"] = str(e.value)
    bodies = set()
    for name, text in said.items():
        assert text.startswith(name), text
        body = text[len(name):]
        bodies.add(body[len(separators[name]):] if body.startswith(separators[name]) else body)
    assert len(bodies) == 1, said  # the same words after the input's name
    assert message in bodies.pop()


def test_a_server_item_and_a_command_line_line_give_the_same_steering():
    items = [{"text": "A dog.", "prefix": "Ein", "avoid": ["Katze"]}, "A cat.", {"text": "A man.", "constraints": ["Mann"]}]
    inputs, single, _ = parse_texts({"texts": items}, Limits())
    cli = Steerer(json_input=True)([json.dumps(x) for x in items])
    assert inputs == cli == [SourceInput("A dog.", "Ein", avoid=["Katze"]), SourceInput("A cat."),
                             SourceInput("A man.", constraints=["Mann"])] and not single


def test_shared_steering_merges_into_an_input_by_one_rule():
    shared = SourceInput("", constraints=["Hund"], avoid=["Katze", "Maus"])
    own = SourceInput("A dog.", "Ein", ["Mann", "Hund"], ["Maus", "Pferd"])
    assert own.with_shared(shared) == SourceInput("A dog.", "Ein", ["Hund", "Mann"], ["Katze", "Maus", "Pferd"])
    assert SourceInput("A.").with_shared(SourceInput("")) == SourceInput("A.")  # nothing given stays None
    assert SourceInput("A.", prefix="").with_shared(SourceInput("", "Ein")).prefix == "Ein"
    assert SourceInput("A.").with_shared(SourceInput("", avoid=["x"])) == SourceInput("A.", avoid=["x"])
    with pytest.raises(FieldError, match=r"^texts\[2\]\.prefix and the request's prefix are both given; give one$"):
        SourceInput("A.", "Ein").with_shared(SourceInput("", "Zwei"), "texts[2].", "the request's")


def test_translate_inputs_equals_translate_nbest_with_the_same_steering(tiny_model_dir):
    t = Translator.load(tiny_model_dir)
    inputs = ["A dog runs.", {"text": "A man.", "avoid": ["Mann"]}, SourceInput("Two cats.", prefix="Zwei")]
    got = t.translate_inputs(inputs, beam=2)
    want = t.translate_nbest(["A dog runs.", "A man.", "Two cats."], beam=2, prefix=[None, None, "Zwei"],
                             avoid=[None, ["Mann"], None])
    assert [[(h.text, h.score) for h in n] for n in got] == [[(h.text, h.score) for h in n] for n in want]
    assert got[2][0].text.startswith("Zwei")
    with pytest.raises(SteeringError, match="avoid belong"):
        t.translate_inputs(["A dog."], avoid=["Hund"])
    with pytest.raises(FieldError, match=r"inputs\[1\]\.avoid must be a list of strings"):
        t.translate_inputs(["A dog.", {"text": "A man.", "avoid": "Mann"}])


def test_one_call_with_its_inputs_decodes_as_the_keyword_api_and_checks_its_fields_where_made(tiny_model_dir):
    t = Translator.load(tiny_model_dir, device="cpu")
    inputs = [SourceInput("A dog runs.", avoid=["Hund"]), SourceInput("A man.", prefix="Ein"), SourceInput("")]
    got = t.run(inputs, Call({"beam": 3, "nbest": 2}, batch_tokens=40))
    want = t.translate_nbest(["A dog runs.", "A man.", ""], batch_tokens=40, beam=3, nbest=2,
                             avoid=[["Hund"], None, None], prefix=[None, "Ein", None])
    assert got == want and got[2] == [] and got[1][0].text.startswith("Ein")
    assert call_of({"beam": 3, "tgt_lang": None, "batch_tokens": 40}) == Call({"beam": 3}, batch_tokens=40)
    with pytest.raises(ValueError, match="^batch_tokens must be >= 1, got 0$"):
        Call(batch_tokens=0)
    with pytest.raises(SteeringError, match="^prefix has 1 entries for 2 inputs; give one per input$"):
        source_inputs(["A.", "B."], prefix=["Ein"])


def test_the_command_line_gives_one_input_a_line_with_every_lines_avoid_merged_in(tmp_path):
    (tmp_path / "prefix.txt").write_text("Ein\n\n", encoding="utf-8")
    (tmp_path / "avoid.txt").write_text("Hund\tMann\n\n", encoding="utf-8")
    steer = Steerer(prefix_file=str(tmp_path / "prefix.txt"), avoid=("Mann", "Katze"),
                    avoid_file=str(tmp_path / "avoid.txt"), terms="constrain")
    assert steer(["A man.", "A cat."]) == [SourceInput("A man.", "Ein", avoid=["Mann", "Katze", "Hund"]),
                                           SourceInput("A cat.", "", avoid=["Mann", "Katze"])]
    steer.close()
    assert steer.call_options() == {"terms": "constrain"}
    plain = Steerer(avoid=("Mann",))
    assert plain(["A.", "B."]) == [SourceInput("A.", avoid=["Mann"]), SourceInput("B.", avoid=["Mann"])]
    assert Steerer(json_input=True)(['{"text": "A."}', ""]) == [SourceInput("A."), SourceInput("")]
