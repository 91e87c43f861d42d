"""Property-based tests (hypothesis): what must hold for any input, not only the examples we thought of.

* The server's request parsing (seq2seq/serve/requests.py): any JSON value is either refused with a
  4xx `RequestError` or gives texts that are strings within the limits and options the search accepts.
* The server as a whole: any JSON body, any bytes, gets a JSON answer with a 2xx or 4xx status, never a
  500, and a 200 carries one translation per text.
* `translate`: any lines in, the same number of lines out, in order (empty in, empty out).
"""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seq2seq.cli import cli
from seq2seq.config.search import SearchConfig
from seq2seq.config.search import resolve_search
from seq2seq.serve.requests import Limits, RequestError, parse_options, parse_texts

if os.environ.get("SEQ2SEQ_REQUIRE_DATA"):  # CI: the serve extra is installed, these tests must run
    import fastapi  # noqa: F401
else:
    pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")

LIMITS = Limits(max_texts=8, max_chars=200)
SEARCH_KEYS = ["beam", "nbest", "lenpen", "max_len_a", "max_len_b", "greedy", "sample", "topk", "topp",
               "temperature", "seed", "min_len", "no_repeat_ngram", "strategy", "bogus"]

texts = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=40)  # surrogates included
scalars = st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.floats(allow_nan=True) | texts
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
                           max_leaves=12)
bodies = st.one_of(
    json_values,
    st.fixed_dictionaries({"text": st.one_of(texts, json_values)},
                          optional={k: st.one_of(scalars, st.integers(-5, 12)) for k in SEARCH_KEYS}),
    st.fixed_dictionaries({"texts": st.one_of(st.lists(texts, max_size=10), json_values)},
                          optional={k: st.one_of(scalars, st.integers(-5, 12)) for k in SEARCH_KEYS}),
)


@settings(max_examples=400, deadline=None)
@given(body=bodies)
def test_request_parsing_refuses_with_a_4xx_or_gives_valid_texts_and_options(body):
    try:
        inputs, single, fields = parse_texts(body, LIMITS)
        texts_out = [x.text for x in inputs]
        options = parse_options(fields, LIMITS)
    except RequestError as e:
        assert 400 <= e.status < 500 and e.message, (e.status, e.message)
        return
    assert isinstance(texts_out, list) and all(isinstance(t, str) for t in texts_out)
    assert len(texts_out) <= LIMITS.max_texts and all(len(t) <= LIMITS.max_chars for t in texts_out)
    for t in texts_out:
        t.encode("utf-8")  # no lone surrogate got through
    assert single == ("text" in body)
    assert all(isinstance(x.prefix, (str, type(None))) and
               all(isinstance(p, str) for p in (x.constraints or []) + (x.avoid or [])) for x in inputs)
    try:  # what the app then does with the options: a SearchConfig or a ValueError (its 422)
        cfg = resolve_search(SearchConfig(), options)
    except ValueError as e:
        assert str(e)
    else:
        assert cfg.beam >= 1 and cfg.nbest >= 1


@pytest.fixture(scope="module")
def client(tiny_model_dir):
    from fastapi.testclient import TestClient

    from seq2seq.inference.translator import Translator
    from seq2seq.serve.app import create_app

    translator = Translator.load(tiny_model_dir, device="cpu")
    app = create_app(translator, Limits(max_texts=4, max_chars=100, max_beam=3))
    with TestClient(app) as client:  # starts and stops the batching worker
        yield client


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies)
def test_any_json_body_gets_a_4xx_or_one_translation_per_text_never_a_500(client, body):
    data = json.dumps(body, ensure_ascii=True, allow_nan=True)
    if isinstance(body, dict) and isinstance(body.get("text"), str):
        body.setdefault("max_len_b", 3)  # keep the tiny model's answers short
        data = json.dumps(body, ensure_ascii=True, allow_nan=True)
    response = client.post("/translate", content=data.encode("utf-8"), headers={"Content-Type": "application/json"})
    assert response.status_code < 500, (response.status_code, response.text, body)
    answer = response.json()
    if response.status_code == 200:
        if isinstance(body.get("texts"), list):
            assert len(answer["translations"]) == len(body["texts"])
        else:
            assert isinstance(answer["text"], str)
    else:
        assert isinstance(answer["error"], str) and answer["error"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=200))
def test_any_bytes_get_a_4xx_never_a_500(client, data):
    response = client.post("/translate", content=data, headers={"Content-Type": "application/json"})
    assert response.status_code < 500, (response.status_code, response.text)


line_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"), max_size=30)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(line_text, min_size=1, max_size=8), final_newline=st.booleans())
def test_translate_writes_one_line_per_input_line(tiny_model_dir, lines, final_newline):
    data = "\n".join(lines) + ("\n" if final_newline else "")
    result = CliRunner().invoke(cli, ["translate", str(tiny_model_dir), "--greedy", "--max-len-a", "0",
                                      "--max-len-b", "3"], input=data.encode("utf-8"))
    assert result.exit_code == 0, result.output
    expected = data.split("\n")[:-1] if data.endswith("\n") or not data else data.split("\n")  # no input: no line
    out = result.stdout.split("\n")
    assert out[-1] == "" and len(out) - 1 == len(expected), (lines, result.stdout)
    for line, translation in zip(expected, out):
        if not line.strip():  # a blank line gives an empty line
            assert translation == ""
