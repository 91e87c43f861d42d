"""`seq2seq serve` (seq2seq/serve/app.py, seq2seq/cli/serve.py): the HTTP API gives what the CLI gives,
concurrent requests share model calls, bad requests get a 4xx with a message, the server stops cleanly.

Servers run on 127.0.0.1 only (uvicorn in a thread, or `seq2seq serve` as a subprocess), on a port the
kernel picks; every request has a timeout. The model is the session's `tiny_model_dir`.
"""

import contextlib
import http.client
import json
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib

import pytest
import yaml
from click.testing import CliRunner

if os.environ.get("SEQ2SEQ_REQUIRE_DATA"):  # CI: the serve extra is installed, these tests must run
    import fastapi  # noqa: F401
    import uvicorn
else:
    pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")
    uvicorn = pytest.importorskip("uvicorn", reason="the serve extra: pip install -e '.[serve]'")

from seq2seq.cli import cli  # noqa: E402
from seq2seq.serve.app import create_app  # noqa: E402
from seq2seq.serve.batcher import Batcher  # noqa: E402
from seq2seq.serve.requests import Limits  # noqa: E402
from seq2seq.documents.line_translation import translate_lines  # noqa: E402
from seq2seq.inference.translator import Translator  # noqa: E402
from conftest import translated  # noqa: E402

TIMEOUT = 60
SENTENCES = ["A dog runs.", "Two men are talking in a park.", "", "A woman with a red hat.",
             "Children play on the beach near the water.", "A man."]


@pytest.fixture(scope="module")
def translator(tiny_model_dir) -> Translator:
    return Translator.load(tiny_model_dir, device="cpu")


@contextlib.contextmanager
def serving(app, config=None):
    """uvicorn serving `app` on 127.0.0.1 in a thread (with `config`, a uvicorn.Config, if given); yields
    (port, server); stops it on exit."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(config or uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + TIMEOUT
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield sock.getsockname()[1], server
    finally:
        server.should_exit = True
        thread.join(TIMEOUT)
        sock.close()
        assert not thread.is_alive(), "the server did not stop"


def call(port: int, method: str, path: str, body=None, headers=None, chunked: bool = False):
    """One request; returns (status, parsed JSON body). A body is sent as application/json unless
    `headers` name another Content-Type (None: no Content-Type header at all)."""
    headers = dict(headers or {})
    if body is not None and not isinstance(body, (bytes, str)) and not chunked:
        body = json.dumps(body).encode("utf-8")
    if body is not None:
        headers.setdefault("Content-Type", "application/json")
    headers = {k: v for k, v in headers.items() if v is not None}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        conn.request(method, path, body=body, headers=headers, encode_chunked=chunked)
        response = conn.getresponse()
        data = response.read()
    finally:
        conn.close()
    return response.status, json.loads(data) if data else None


def cli_json(model_dir, lines, *flags):
    result = CliRunner().invoke(cli, ["translate", str(model_dir), "--json", *flags], input="\n".join(lines) + "\n")
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.output.splitlines()]


def gate(translator: Translator):
    """Make the translator's first call wait until `release` is set; `entered` is set when it starts.
    Returns (entered, release, restore)."""
    entered, release = threading.Event(), threading.Event()
    original = translator.run
    first = [True]

    def gated(*args, **kwargs):
        if first[0]:
            first[0] = False
            entered.set()
            assert release.wait(TIMEOUT)
        return original(*args, **kwargs)

    translator.run = gated
    return entered, release, lambda: vars(translator).pop("run", None)


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def in_threads(port: int, bodies: list) -> list:
    results = [None] * len(bodies)

    def send(i):
        results[i] = call(port, "POST", "/translate", bodies[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    return threads, results


def queued_behind_one(app, translator: Translator, bodies: list, queued=None) -> tuple[list, list]:
    """Serve `app`; while the worker is held inside a first request's model call, send `bodies` so they
    all queue up behind it (or until `queued(results)` holds, for requests answered without the model);
    then let the worker go. Returns the (status, body) results of the first request and of `bodies`."""
    entered, release, restore = gate(translator)
    try:
        with serving(app) as (port, _):
            first, first_result = in_threads(port, [{"text": "A cat sleeps."}])
            assert entered.wait(TIMEOUT)  # the worker is busy with the first request ...
            threads, results = in_threads(port, bodies)  # ... while the others arrive
            ready = (lambda: queued(results)) if queued else (lambda: app.state.batcher.waiting_jobs == len(bodies))
            wait_for(ready, "the requests to queue up")
            release.set()
            for t in first + threads:
                t.join(TIMEOUT)
    finally:
        restore()
    return first_result, results


# ---- what the API answers -------------------------------------------------------------------------


def test_health_and_translations_are_what_the_cli_prints(translator, tiny_model_dir):
    with serving(create_app(translator)) as (port, _):
        status, health = call(port, "GET", "/health")
        assert status == 200 and health["status"] == "ok" and health["kind"] == "text"
        assert health["model"] == str(tiny_model_dir)

        status, body = call(port, "POST", "/translate", {"texts": SENTENCES, "beam": 2, "nbest": 2, "lenpen": 0.6})
        assert status == 200
        flags = ("--beam", "2", "--nbest", "2", "--lenpen", "0.6")
        assert body["translations"] == cli_json(tiny_model_dir, SENTENCES, *flags)
        status, body = call(port, "POST", "/translate", {"text": SENTENCES[1]})  # the model's decoding config
        assert status == 200 and body == cli_json(tiny_model_dir, SENTENCES[1:2])[0]
        status, body = call(port, "POST", "/translate", {"texts": []})
        assert status == 200 and body == {"translations": []}


def test_concurrent_requests_share_model_calls_and_get_their_own_translations(translator):
    requests = [{"texts": SENTENCES[i % 6: i % 6 + 2], "beam": 2} for i in range(6)]
    requests += [{"text": SENTENCES[i], "greedy": True} for i in (0, 3)]
    requests += [{"texts": SENTENCES[:2], "sample": True, "seed": 7, "topk": 5}] * 2  # sampling: never merged
    expected = []
    for r in requests:
        options = {k: v for k, v in r.items() if k not in ("text", "texts")}
        texts = r.get("texts") or [r["text"]]
        expected.append([hyps[0].text if hyps else "" for hyps in translate_lines(translator, texts, **options)])
    expected_greedy = [translated(translator, [SENTENCES[i]], greedy=True)[0] for i in (0, 3)]
    assert [e[0] for e in expected[6:8]] == expected_greedy

    app = create_app(translator, Limits(batch_window_ms=20))
    batcher = app.state.batcher
    first_result, results = queued_behind_one(app, translator, requests)
    assert first_result[0][0] == 200
    for r, (status, body), want in zip(requests, results, expected):
        assert status == 200, body
        got = [t["text"] for t in body["translations"]] if "texts" in r else [body["text"]]
        assert got == want, r
    # the first request alone; then one call for the 6 beam-2 requests, one for the 2 greedy ones,
    # and one for each sampling request
    assert batcher.calls == 5
    assert sorted(batcher.batch_sizes[1:]) == [2, 2, 2, sum(len(r["texts"]) for r in requests[:6])]


def test_a_batch_never_exceeds_max_batch(translator):
    app = create_app(translator, Limits(max_batch=4, max_texts=4, batch_window_ms=20))
    batcher = app.state.batcher
    _, results = queued_behind_one(app, translator, [{"texts": SENTENCES[i: i + 2]} for i in range(5)])
    assert all(status == 200 for status, _ in results)
    assert batcher.batch_sizes[1:] == [4, 4, 2]


def test_the_batcher_gathers_jobs_arriving_within_the_window():
    calls = []

    def run(items, options):
        calls.append(list(items))
        return [f"{options['tag']}:{x}" for x in items]

    batcher = Batcher(run, max_batch=10, window_s=1.0, max_queue=100)
    batcher.start()
    try:
        a = batcher.submit(["a1", "a2"], {"tag": "x"})
        time.sleep(0.05)
        b = batcher.submit(["b1"], {"tag": "x"})
        c = batcher.submit(["c1"], {"tag": "y"})  # other options: same gathering, its own call
        assert a.result(TIMEOUT) == ["x:a1", "x:a2"] and b.result(TIMEOUT) == ["x:b1"] and c.result(TIMEOUT) == ["y:c1"]
        assert calls == [["a1", "a2", "b1"], ["c1"]]
        with pytest.raises(Exception, match="busy"):
            batcher.submit(["z"] * 101, {"tag": "x"})
    finally:
        batcher.close(TIMEOUT)
    with pytest.raises(Exception, match="shutting down"):
        batcher.submit(["late"], {"tag": "x"})


def test_the_batcher_reruns_a_failed_batch_job_by_job_so_only_the_culprit_fails():
    calls = []

    def run(items, options):
        calls.append(list(items))
        if "bad" in items:
            raise ValueError("cannot encode 'bad'")
        return [x.upper() for x in items]

    batcher = Batcher(run, max_batch=10, window_s=1.0, max_queue=100)
    batcher.start()
    try:
        a = batcher.submit(["a1", "a2"], {})
        b = batcher.submit(["b1", "bad"], {})
        c = batcher.submit(["c1"], {})
        assert a.result(TIMEOUT) == ["A1", "A2"] and c.result(TIMEOUT) == ["C1"]
        with pytest.raises(ValueError, match="cannot encode 'bad'"):
            b.result(TIMEOUT)
        assert calls == [["a1", "a2", "b1", "bad", "c1"], ["a1", "a2"], ["b1", "bad"], ["c1"]]
        assert batcher.pending == 0
    finally:
        batcher.close(TIMEOUT)


def test_when_a_merged_model_call_fails_only_the_culprit_request_fails(translator):
    original = translator.run

    def picky(inputs, *args, **kwargs):  # a model that fails on one input, whichever batch holds it
        if any(x.text == "POISON" for x in inputs):
            raise RuntimeError("cannot encode POISON\n  at some deep frame")
        return original(inputs, *args, **kwargs)

    good = [{"text": SENTENCES[i]} for i in (0, 1, 3)] + [{"texts": SENTENCES[4:6]}]
    expected = [translated(translator, [SENTENCES[i]])[0] for i in (0, 1, 3)] + [translated(translator, SENTENCES[4:6])]
    app = create_app(translator, Limits(batch_window_ms=20))
    batcher = app.state.batcher
    translator.run = picky  # gate() wraps it; its restore() removes both
    bodies = good[:2] + [{"texts": ["A dog.", "POISON"]}] + good[2:]
    _, results = queued_behind_one(app, translator, bodies)
    statuses = [status for status, _ in results]
    assert statuses == [200, 200, 500, 200, 200], results
    assert results[2][1] == {"error": "the model failed on this request: RuntimeError: cannot encode POISON"}
    got = [body["text"] for _, body in results[:2]] + [results[3][1]["text"]]
    got.append([t["text"] for t in results[4][1]["translations"]])
    assert got == expected
    # the first request; the merged batch (fails); then each of its 5 requests alone
    assert batcher.calls == 7 and batcher.batch_sizes[1] == 7


def test_a_lone_surrogate_fails_only_its_own_request_with_422(translator):
    with pytest.raises((UnicodeError, TypeError)):  # the model's tokenizer fails: so would a batch holding it
        translator.translate_nbest(["A dog.", "\ud800"])
    expected = [translated(translator, [s])[0] for s in SENTENCES[:3]]
    app = create_app(translator, Limits(batch_window_ms=20))
    batcher = app.state.batcher
    bodies = [{"text": SENTENCES[0]}, b'{"text": "\\ud800"}', {"text": SENTENCES[1]},
              b'{"texts": ["A dog.", "x \\udfff y"]}', {"text": SENTENCES[2]}]
    # the good requests queue up; the bad ones are answered without the model
    _, results = queued_behind_one(app, translator, bodies,
                                   lambda results: batcher.waiting_jobs == 3 and sum(r is not None for r in results) == 2)
    assert [status for status, _ in results] == [200, 422, 200, 422, 200], results
    assert [results[i][1]["text"] for i in (0, 2, 4)] == expected
    assert results[1][1] == {"error": "text is not valid Unicode: character 0 is a lone surrogate (\\ud800); "
                                      "send each character as itself, or a surrogate pair",
                             "code": "bad_field", "field": "text"}
    assert results[3][1]["error"].startswith("texts[1] is not valid Unicode: character 2 is a lone surrogate")
    assert batcher.calls == 2  # the first request, then the three good ones together


# ---- bad requests -----------------------------------------------------------------------------------

BAD = [
    ("not json", 400, "not valid JSON"),
    (b"\xff\xfe{}", 400, "not UTF-8"),
    ([1, 2], 422, "must be a JSON object"),
    ({}, 422, "either \"text\""),
    ({"text": "a", "texts": ["b"]}, 422, "either \"text\""),
    ({"text": 5}, 422, "\"text\" must be a string"),
    ({"texts": "a dog"}, 422, "\"texts\" must be a list"),
    ({"texts": ["a", 3]}, 422, "texts[1] must be a string"),
    ({"text": "a", "beam": 0}, 422, "beam must be >= 1"),
    ({"text": "a", "beam": "5"}, 422, "beam must be an integer"),
    ({"text": "a", "greedy": 1}, 422, "greedy must be true or false"),
    ({"text": "a", "colour": "red"}, 422, "unknown field 'colour'"),
    ({"text": "a", "greedy": True, "beam": 3}, 422, "greedy search conflicts with beam=3"),
    ({"text": "a", "beam": 2, "nbest": 3}, 422, "nbest (3) must be <= beam (2)"),
    ({"text": "a", "topp": 0.9}, 422, "only for sampling"),
    (b'{"text": "a", "lenpen": NaN}', 422, "lenpen must be a finite number"),
    ({"texts": ["a"] * 9}, 413, "9 texts in one request; the limit is 8"),
    ({"texts": ["a", "x" * 201]}, 413, "texts[1] has 201 characters; the limit is 200"),
    ({"text": "a", "beam": 17}, 413, "beam 17 is over this server's limit of 16"),
    ({"text": "a" * 150, "pad": "x" * 70_000}, 413, "the limit is 65536"),
]


def test_bad_requests_get_a_4xx_with_a_message_and_the_server_goes_on(translator):
    limits = Limits(max_texts=8, max_chars=200, max_body_bytes=65536)
    with serving(create_app(translator, limits)) as (port, _):
        for body, status, message in BAD:
            got, answer = call(port, "POST", "/translate", body)
            assert got == status, (body if len(str(body)) < 200 else str(body)[:200], answer)
            assert message in answer["error"] and set(answer) <= {"error", "code", "field", "index"}, answer
        # a body without Content-Length (chunked) is held to the same limit
        got, answer = call(port, "POST", "/translate", iter([b'{"text": "', b"x" * 70_000, b'"}']), chunked=True)
        assert got == 413 and "over the limit of 65536 bytes" in answer["error"]
        assert call(port, "GET", "/translate") == (405, {"error": "GET is not allowed on /translate"})
        assert call(port, "GET", "/nothing")[0] == 404
        got, answer = call(port, "POST", "/generate", b"\x89PNG")
        assert got == 404 and "text model" in answer["error"]
        assert call(port, "POST", "/translate", {"text": "A dog runs."})[0] == 200


def test_deeply_nested_json_gets_400_with_one_line(translator):
    deep = 40
    bodies = [b"[" * 100_000 + b"]" * 100_000,  # deeper than Python's parser goes
              b'{"a": ' * 100_000 + b"1" + b"}" * 100_000,
              json.dumps({"text": "a", "beam": json.loads("[" * deep + "]" * deep)}).encode()]  # parses, too deep
    with serving(create_app(translator)) as (port, _):
        for body in bodies:
            status, answer = call(port, "POST", "/translate", body)
            assert (status, answer) == (400, {"error": "the request body nests JSON arrays/objects more than 32 "
                                                       "levels deep"})
        assert call(port, "POST", "/translate", {"text": "A dog runs."})[0] == 200
    # a /generate option in the query string (?beam=[[[...) stays a string, which the option refuses (422)
    from seq2seq.serve.requests import query_value

    assert query_value("[" * 100_000) == "[" * 100_000 and query_value("[" * 40 + "]" * 40) == "[" * 40 + "]" * 40


def test_post_bodies_must_be_declared_json(translator):
    body = {"text": "A dog runs."}
    with serving(create_app(translator)) as (port, _):
        # what a web page may send anywhere without asking (no CORS preflight), and other non-JSON types
        for content_type in (None, "text/plain", "application/x-www-form-urlencoded",
                             "multipart/form-data; boundary=x", "application/json; charset=latin-1", "text/json"):
            status, answer = call(port, "POST", "/translate", body, {"Content-Type": content_type})
            assert status == 415, (content_type, answer)
            assert answer["error"].startswith("send the body as JSON with the header Content-Type: application/json")
        for content_type in ("application/json", "Application/JSON; charset=UTF-8", "application/json;charset=utf8"):
            assert call(port, "POST", "/translate", body, {"Content-Type": content_type})[0] == 200, content_type


def test_with_an_api_key_requests_need_it_and_health_stays_open(translator):
    for bad in ("", "two words", "tab\tkey"):
        with pytest.raises(ValueError, match="API key"):
            create_app(translator, api_key=bad)
    body = {"text": "A dog runs."}
    with serving(create_app(translator, api_key="s3cret-key")) as (port, _):
        status, answer = call(port, "POST", "/translate", body)
        assert status == 401 and "Authorization: Bearer KEY" in answer["error"]
        for headers in ({"Authorization": "Bearer wrong"}, {"Authorization": "Bearer s3cret-ke"},
                        {"X-API-Key": "s3cret-key2"}, {"Authorization": "Bearer s3cret-kéy"}):
            assert call(port, "POST", "/translate", body, headers) == (401, {"error": "wrong API key"}), headers
        assert call(port, "POST", "/translate", body, {"Authorization": "Basic s3cret-key"})[0] == 401
        for headers in ({"Authorization": "Bearer s3cret-key"}, {"authorization": "bearer  s3cret-key"},
                        {"X-API-Key": "s3cret-key"}):
            assert call(port, "POST", "/translate", body, headers)[0] == 200, headers
        assert call(port, "GET", "/health")[0] == 200  # open: for probes and load balancers
        assert call(port, "GET", "/nothing")[0] == 401  # nothing else is, not even a 404


def test_listening_beyond_localhost_without_a_key_logs_a_warning(translator, monkeypatch, caplog):
    from seq2seq.serve.app import is_loopback, run_server

    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.5", "example.org"))
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: None)  # no socket is opened
    for host, key, warned in [("0.0.0.0", None, True), ("0.0.0.0", "k", False), ("127.0.0.1", None, False)]:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="seq2seq.serve.app"):
            run_server(create_app(translator, api_key=key), host=host, port=8000)
        assert any("without an API key" in r.getMessage() for r in caplog.records) == warned, (host, key)


def test_the_serve_command_checks_the_new_options_before_loading(tiny_model_dir):
    runner = CliRunner()
    for args, env, words in [(["--api-key", ""], {}, "--api-key"), ([], {"SEQ2SEQ_API_KEY": "a b"}, "SEQ2SEQ_API_KEY"),
                             (["--max-pixels", "0"], {}, "--max-pixels"),
                             (["--max-audio-seconds", "0"], {}, "--max-audio-seconds")]:
        result = runner.invoke(cli, ["serve", str(tiny_model_dir), *args], env=env)
        assert result.exit_code == 2 and words in result.output and "Traceback" not in result.output, result.output


def test_a_model_failure_answers_500_with_one_line_and_the_server_goes_on(translator):
    def broken(*args, **kwargs):
        raise RuntimeError("out of memory\n  at some deep frame")

    with serving(create_app(translator)) as (port, _):
        translator.run = broken
        try:
            status, answer = call(port, "POST", "/translate", {"text": "A dog runs."})
        finally:
            del translator.run
        assert status == 500
        assert answer == {"error": "the model failed on this request: RuntimeError: out of memory"}
        assert call(port, "POST", "/translate", {"text": "A dog runs."})[0] == 200


# ---- stopping ---------------------------------------------------------------------------------------


def test_stopping_finishes_the_requests_in_flight(translator):
    app = create_app(translator)
    entered, release, restore = gate(translator)
    try:
        with serving(app) as (port, server):
            threads, results = in_threads(port, [{"texts": SENTENCES[:3], "beam": 2}])
            assert entered.wait(TIMEOUT)
            server.should_exit = True  # what uvicorn's SIGINT/SIGTERM handler does
            time.sleep(0.3)
            with pytest.raises(OSError):  # no new connections once stopping
                call(port, "GET", "/health")
            release.set()
            threads[0].join(TIMEOUT)
    finally:
        restore()
    status, body = results[0]
    assert status == 200 and [t["text"] for t in body["translations"]] == translated(translator, SENTENCES[:3], beam=2)
    assert not app.state.batcher._thread.is_alive()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_serve_command_stops_cleanly_on_a_signal(tiny_model_dir, translator, sig):
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "seq2seq", "serve", str(tiny_model_dir), "--port", str(port),
                             "--threads", "1", "--log-level", "warning"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                status, _ = call(port, "GET", "/health")
                break
            except OSError:
                assert proc.poll() is None, proc.communicate()[1]
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
        status, body = call(port, "POST", "/translate", {"texts": SENTENCES[:2], "beam": 2})
        assert status == 200
        assert [t["text"] for t in body["translations"]] == translated(translator, SENTENCES[:2], beam=2)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    assert "server stopped" in stderr and "Traceback" not in stderr


def test_without_the_serve_extra_the_command_names_it(tiny_model_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "fastapi", None)  # `import fastapi` raises ImportError
    result = CliRunner().invoke(cli, ["serve", str(tiny_model_dir)])
    assert result.exit_code == 1
    assert "pip install 'seq2seq[serve]'" in result.output and "fastapi" in result.output


# ---- image models: /generate ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def image_model(tmp_path_factory):
    from PIL import Image

    root = tmp_path_factory.mktemp("serve_image")
    (root / "img").mkdir()
    rows = ["image\tcaption"]
    for i, (name, rgb) in enumerate([("red", (220, 20, 20)), ("green", (20, 200, 20)), ("blue", (20, 20, 220))] * 2):
        Image.new("RGB", (32, 32), rgb).save(root / "img" / f"{i}.png")
        rows.append(f"img/{i}.png\ta {name} square")
    (root / "data.tsv").write_text("\n".join(rows) + "\n")
    cfg = {"data": {"train": str(root / "data.tsv"), "valid": str(root / "data.tsv")}, "tokenizer": {"vocab_size": 24},
           "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "layers": 1,
                     "encoder": {"type": "image", "image_size": 32, "patch_size": 8}},
           "training": {"output_dir": str(root / "model"), "max_steps": 2, "max_tokens": 400, "device": "cpu",
                        "threads": 1, "valid_bleu": False, "best_metric": "loss"},
           "decoding": {"beam": 2, "max_len_a": 0.0, "max_len_b": 6}}
    (root / "config.yaml").write_text(yaml.safe_dump(cfg))
    result = CliRunner().invoke(cli, ["train", str(root / "config.yaml")])
    assert result.exit_code == 0, result.output
    return root


def test_image_models_caption_uploaded_files(image_model):
    from seq2seq.inference.generator import Captioner
    from seq2seq.inference.generator import load_engine

    image = image_model / "img" / "1.png"
    expected = Captioner.load(image_model / "model", device="cpu").generate([str(image)], beam=2, nbest=2)[0]
    with serving(create_app(load_engine(image_model / "model", device="cpu"))) as (port, _):
        status, body = call(port, "POST", "/generate?beam=2&nbest=2", image.read_bytes(),
                            {"Content-Type": "image/png"})
        assert status == 200, body
        assert body["text"] == expected[0].text and [h["text"] for h in body["nbest"]] == [h.text for h in expected]
        status, body = call(port, "POST", "/generate", b"these bytes are no image", {"Content-Type": "image/png"})
        assert status == 422 and "cannot read the uploaded file" in body["error"]
        status, body = call(port, "POST", "/generate", {"paths": [str(image)]})
        assert status == 403 and "--allow-paths" in body["error"]
        status, body = call(port, "POST", "/translate", {"text": "a red square"})
        assert status == 404 and "/generate" in body["error"]
    with serving(create_app(load_engine(image_model / "model", device="cpu"), allow_paths=True)) as (port, _):
        paths = [str(image), str(image_model / "none.png")]
        status, body = call(port, "POST", "/generate", {"paths": paths, "beam": 2})
        assert status == 200
        assert body["generations"][0]["text"] == expected[0].text
        assert body["generations"][1]["text"] == "" and "not found" in body["generations"][1]["error"]


def png_header(width: int, height: int) -> bytes:
    """A PNG that declares width x height pixels but holds almost no pixel data: its header is valid,
    decoding it fails. So a refusal that names its size was made from the header alone."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def test_images_over_the_pixel_cap_get_413_from_their_header(image_model):
    from seq2seq.inference.generator import load_engine

    model = load_engine(image_model / "model", device="cpu")
    image = image_model / "img" / "1.png"  # 32x32
    with serving(create_app(model)) as (port, _):
        status, body = call(port, "POST", "/generate", png_header(12000, 12000), {"Content-Type": "image/png"})
        assert (status, body) == (413, {"error": "the uploaded file has 12000x12000 pixels (144.0 megapixels); "
                                                 "the limit is 40000000 (40 megapixels)"})
        for content_type in (None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"):
            status, body = call(port, "POST", "/generate", image.read_bytes(), {"Content-Type": content_type})
            assert status == 415 and "Content-Type: image/png" in body["error"], (content_type, body)
        for content_type in ("image/png", "application/octet-stream"):
            assert call(port, "POST", "/generate", image.read_bytes(), {"Content-Type": content_type})[0] == 200
    with serving(create_app(model, Limits(max_pixels=1000), allow_paths=True)) as (port, _):
        status, body = call(port, "POST", "/generate", image.read_bytes(), {"Content-Type": "image/png"})
        assert status == 413 and body["error"].startswith("the uploaded file has 32x32 pixels"), body
        status, body = call(port, "POST", "/generate", {"paths": [str(image)]})
        assert status == 413 and body["error"].startswith(f"{image} has 32x32 pixels"), body


def test_audio_over_the_seconds_cap_is_refused_from_its_header(tmp_path):
    import numpy as np
    import soundfile as sf

    from seq2seq.model.encoders.audio import AudioEncoderConfig, AudioProcessor
    from seq2seq.model.encoders.image import ImageEncoderConfig, ImageProcessor
    from seq2seq.serve.requests import RequestError, check_source_size

    audio = AudioProcessor(AudioEncoderConfig())
    sf.write(tmp_path / "long.wav", np.zeros(8000 * 3, np.float32), 8000)
    check_source_size(str(tmp_path / "long.wav"), audio, Limits(max_audio_seconds=3), "long.wav")  # at the cap
    with pytest.raises(RequestError) as err:
        check_source_size(str(tmp_path / "long.wav"), audio, Limits(max_audio_seconds=2.5), "the uploaded file")
    assert (err.value.status, err.value.message) == (413, "the uploaded file lasts 3.0 s; the limit is 2.5 s")
    (tmp_path / "big.png").write_bytes(png_header(300, 200))
    images = ImageProcessor(ImageEncoderConfig())
    with pytest.raises(RequestError, match="300x200 pixels"):
        check_source_size(str(tmp_path / "big.png"), images, Limits(max_pixels=59_999), "big.png")
    for name in ("missing.wav", "big.png"):  # unreadable (or another kind): left for the processor to name
        check_source_size(str(tmp_path / name), audio, Limits(max_audio_seconds=1), name)


def test_caption_refuses_an_image_over_the_pixel_cap_in_one_line(image_model, tmp_path):
    big = tmp_path / "big.png"
    big.write_bytes(png_header(12000, 12000))
    small = str(image_model / "img" / "0.png")
    model_dir = str(image_model / "model")
    result = CliRunner().invoke(cli, ["caption", model_dir, small, str(big)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    message = result.stderr.strip().splitlines()
    assert len(message) == 1 and message[0].startswith(f"Error: image {big} has 12000x12000 pixels (144.0 megapixels), "
                                                       "more than model.encoder.max_pixels=40000000"), message
    result = CliRunner().invoke(cli, ["caption", model_dir, small, str(big), "--skip-bad"])
    assert result.exit_code == 0 and result.stdout.split("\n")[1:] == ["", ""], result.stdout
    assert f"image {big} has 12000x12000 pixels" in result.stderr


# ---- the API key from the environment: an empty SEQ2SEQ_API_KEY ----------------------------------------


def never_serve(monkeypatch) -> list:
    """The api_key each `seq2seq serve` hands create_app; the server itself never starts."""
    import seq2seq.serve.app as app_module

    keys = []
    monkeypatch.setattr(app_module, "create_app", lambda *args, api_key=None, **kwargs: keys.append(api_key))
    monkeypatch.setattr(app_module, "run_server", lambda *args, **kwargs: None)
    return keys


def test_an_empty_api_key_variable_is_refused_like_an_empty_api_key(tiny_model_dir, monkeypatch):
    """click reads an empty variable as unset, which would serve without auth: refused with the very
    line `--api-key ""` gets."""
    keys = never_serve(monkeypatch)
    runner = CliRunner()
    errors = []
    for args, env in [(["--api-key", ""], {"SEQ2SEQ_API_KEY": None}), ([], {"SEQ2SEQ_API_KEY": ""})]:
        result = runner.invoke(cli, ["serve", str(tiny_model_dir), *args], env=env)
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        errors.append([line for line in result.output.splitlines() if line.startswith("Error")])
    assert len(errors[0]) == 1 and errors[0] == errors[1], errors
    assert "SEQ2SEQ_API_KEY" in errors[1][0] and "non-empty" in errors[1][0], errors
    assert keys == []


def test_api_key_wins_over_an_empty_variable_and_no_key_serves_without_auth(tiny_model_dir, monkeypatch):
    keys = never_serve(monkeypatch)
    runner = CliRunner()
    for args, env in [(["--api-key", "s3cret"], {"SEQ2SEQ_API_KEY": ""}), ([], {"SEQ2SEQ_API_KEY": "fr0m-env"}),
                      ([], {"SEQ2SEQ_API_KEY": None})]:
        result = runner.invoke(cli, ["serve", str(tiny_model_dir), "--device", "cpu", *args], env=env)
        assert result.exit_code == 0, result.output
    assert keys == ["s3cret", "fr0m-env", None]


# ---- steering: prefix, constraints, avoid, --glossary (docs/decoding-controls.md) --------------------


def texts_of(body) -> list[str]:
    return [t["text"] for t in body["translations"]] if "translations" in body else [body["text"]]


def contains(tokens: list[str], phrase: list[str]) -> bool:
    n = len(phrase)
    return any(tokens[i: i + n] == phrase for i in range(len(tokens) - n + 1))


def test_steering_fields_give_what_the_python_api_gives(translator):
    tgt = translator.tokenizers.tgt
    texts = SENTENCES[:2] + SENTENCES[3:]
    with serving(create_app(translator)) as (port, _):
        # a prefix: the output starts with it, and is Translator.translate_nbest(prefix=...)'s
        status, body = call(port, "POST", "/translate", {"text": texts[1], "prefix": "Ein Hund"})
        assert status == 200, body
        assert body["text"].startswith("Ein Hund") and body["tokens"][:2] == ["▁Ein", "▁Hund"]
        want = translate_lines(translator, [texts[1]], prefix=["Ein Hund"])[0][0]
        assert body["text"] == want.text and body["score"] == round(want.score, 4)
        # constraints for every text: each output holds the phrase (or says it could not)
        status, body = call(port, "POST", "/translate", {"texts": texts, "constraints": ["Hund"], "beam": 4})
        assert status == 200, body
        want = translate_lines(translator, texts, constraints=[["Hund"]] * len(texts), beam=4)
        assert texts_of(body) == [h[0].text for h in want]
        for t in body["translations"]:
            assert "▁Hund" in t["tokens"] or t.get("warnings"), t
        # avoid: none of the phrases' tokens appear; the unsteered outputs here do hold them
        plain = translate_lines(translator, texts)
        avoid = ["Ein", "eine"]
        assert all(contains(h[0].pieces, ["▁Ein"]) or contains(h[0].pieces, ["▁eine"]) for h in plain)
        status, body = call(port, "POST", "/translate", {"texts": texts, "avoid": avoid})
        assert status == 200, body
        assert texts_of(body) == [h[0].text for h in translate_lines(translator, texts, avoid=avoid)]
        for t in body["translations"]:
            for phrase in avoid:
                assert not contains(t["tokens"], [tgt.id_to_piece(i) for i in tgt.encode([phrase])[0]]), t
        # items of "texts" as objects hold their own steering, added to the request's
        items = [texts[0], {"text": texts[1], "prefix": "Zwei"}, {"text": texts[2], "constraints": ["Frau"]},
                 {"text": texts[3], "avoid": ["Mann"]}]
        status, body = call(port, "POST", "/translate", {"texts": items, "avoid": ["eine"], "beam": 4})
        assert status == 200, body
        want = translate_lines(translator, texts[:4], prefix=["", "Zwei", "", ""], constraints=[[], [], ["Frau"], []],
                                          avoid=[["eine"], ["eine"], ["eine"], ["eine", "Mann"]], beam=4)
        assert texts_of(body) == [h[0].text for h in want]
        assert body["translations"][1]["text"].startswith("Zwei")


def test_a_request_resolves_its_search_options_once(translator, monkeypatch):
    """The route resolves a request's search options once (`Engine.search_config`): the steering check
    before queueing and the model call take that resolution (`Call.resolved`), and give what they gave."""
    resolved = []
    search_config = Translator.search_config

    def counted(self, **options):
        resolved.append(options)
        return search_config(self, **options)

    with serving(create_app(translator)) as (port, _):
        monkeypatch.setattr(Translator, "search_config", counted)
        body = {"texts": ["A dog runs.", "A man."], "constraints": ["Hund"], "beam": 4, "loop_guard": False}
        status, answer = call(port, "POST", "/translate", body)
        assert status == 200, answer
        assert resolved == [{"beam": 4}]
        monkeypatch.undo()
        want = translate_lines(translator, body["texts"], constraints=[["Hund"]] * 2, beam=4, loop_guard=False)
        assert texts_of(answer) == [h[0].text for h in want]


def test_constraints_that_cannot_be_met_give_the_plain_output_with_a_warning(translator):
    with serving(create_app(translator)) as (port, _):
        body = {"text": "A dog runs.", "constraints": ["Hund Hund Hund Hund"], "max_len_a": 0, "max_len_b": 3}
        status, answer = call(port, "POST", "/translate", body)
        assert status == 200, answer
        assert answer["warnings"] == ["its constraints cannot all be met within its length limit; "
                                      "translated without them"]
        assert answer["diagnostics"] == [{"message": answer["warnings"][0], "code": "constraints_unmet",
                                          "field": "constraints", "index": 0}]
        assert answer["text"] == translated(translator, ["A dog runs."], max_len_a=0, max_len_b=3)[0]


def test_steered_and_plain_requests_share_model_calls_and_get_what_they_get_alone(translator):
    requests = [{"text": SENTENCES[0], "beam": 2}, {"text": SENTENCES[1], "prefix": "Zwei Männer", "beam": 2},
                {"texts": SENTENCES[3:5], "constraints": ["Frau"], "beam": 2},
                {"texts": [{"text": SENTENCES[5], "avoid": ["Mann"]}], "beam": 2}]
    expected = [translated(translator, [SENTENCES[0]], beam=2),
                translated(translator, [SENTENCES[1]], prefix=["Zwei Männer"], beam=2),
                translated(translator, SENTENCES[3:5], constraints=[["Frau"]] * 2, beam=2),
                translated(translator, [SENTENCES[5]], avoid=["Mann"], beam=2)]
    app = create_app(translator, Limits(batch_window_ms=20))
    _, results = queued_behind_one(app, translator, requests)
    assert [texts_of(body) for _, body in results] == expected, results
    assert app.state.batcher.calls == 2  # the first request, then the four together


BAD_STEERING = [
    ({"text": "a", "prefix": 3}, 422, "prefix must be a string, got 3"),
    ({"text": "a", "constraints": "Hund"}, 422, "constraints must be a list of strings"),
    ({"text": "a", "avoid": ["Hund", 3]}, 422, "avoid must be a list of strings"),
    ({"text": "a", "constraints": [" "]}, 422, "text: an empty constraint; give a word or phrase"),
    ({"text": "a", "avoid": [""]}, 422, "text: an empty banned phrase"),
    ({"text": "a", "constraints": ["日本"]}, 422,
     "text: the constraint '日本' cannot be written with the model's target vocabulary"),
    ({"texts": ["a", "b"], "prefix": "日本"}, 422, "texts[0]: the prefix '日本' cannot be written"),
    ({"text": "a", "beam": 2, "constraints": ["Hund", "Mann"]}, 422,
     "text: 2 constraints, but a beam of 2 holds at most 1; pass beam 3 or more"),
    ({"text": "a", "greedy": True, "constraints": ["Hund"]}, 422, "text: constraints need beam search"),
    ({"text": "a", "sample": True, "constraints": ["Hund"]}, 422, "text: constraints need beam search"),
    ({"texts": ["a", {"text": "b", "constraints": [""]}]}, 422, "texts[1]: an empty constraint"),
    ({"texts": [{"text": "a", "prefix": "Ein"}], "prefix": "Zwei"}, 422,
     "texts[0].prefix and the request's prefix are both given"),
    ({"texts": [{"text": "a", "colour": "red"}]}, 422, "texts[0] has unknown field(s) 'colour'"),
    ({"texts": [{"prefix": "Ein"}]}, 422, "texts[0].text must be a string"),
    ({"texts": [{"text": "a", "avoid": "Mann"}]}, 422, "texts[0].avoid must be a list of strings"),
    ({"text": "a", "prefix": "Ein Hund " * 20, "max_len_a": 0, "max_len_b": 3}, 422,
     "text: the target prefix has 40 tokens, more than this sentence's length limit of 3"),
    ({"text": "a", "constraints": ["x" * 201]}, 413, "constraints[0] has 201 characters; the limit is 200"),
    ({"text": "a", "avoid": ["a", "b", "c"], "constraints": ["d"]}, 413,
     "the request has 4 constraints and avoid phrases; the limit is 3"),
    ({"texts": [{"text": "a", "avoid": ["b", "c"]}], "avoid": ["a", "d"]}, 413,
     "texts[0] has 4 constraints and avoid phrases; the limit is 3"),
    (b'{"text": "a", "constraints": ["\\ud800"]}', 422, "constraints[0] is not valid Unicode"),
]


def test_malformed_steering_gets_a_4xx_with_a_message_and_the_server_goes_on(translator):
    limits = Limits(max_texts=8, max_chars=200, max_phrases=3)
    with serving(create_app(translator, limits)) as (port, _):
        for body, status, message in BAD_STEERING:
            got, answer = call(port, "POST", "/translate", body)
            assert got == status and message in answer["error"], (body, answer)
            assert set(answer) - {"error"} <= {"code", "field", "index"}, answer  # details of a refused input
            assert "line" not in answer["error"], answer  # the server names texts as the request does
        assert call(port, "POST", "/translate", {"text": "A dog runs.", "constraints": ["Hund"]})[0] == 200


@pytest.mark.parametrize("body, details", [
    ({"texts": ["a", {"text": "b", "constraints": [""]}]}, {"code": "empty_phrase", "field": "constraints", "index": 1}),
    ({"text": "a", "beam": 2, "constraints": ["Hund", "Mann"]}, {"code": "beam_too_small", "field": "beam", "index": 0}),
    ({"text": "a", "prefix": "Ein Hund " * 20, "max_len_a": 0, "max_len_b": 3},
     {"code": "prefix_too_long", "field": "prefix", "index": 0}),
    ({"texts": [{"text": "a", "avoid": "Mann"}]}, {"code": "bad_field", "field": "texts[0].avoid"}),
    ({"text": "a", "constraints": ["Hund"], "avoid": ["Hund"]}, {"code": "term_avoided", "field": "constraints",
                                                                  "index": 0}),
])
def test_a_refused_input_is_named_by_code_field_and_index_beside_the_message(translator, body, details):
    with serving(create_app(translator)) as (port, _):
        status, answer = call(port, "POST", "/translate", body)
    assert status == 422 and {k: v for k, v in answer.items() if k != "error"} == details, answer


def glossary_file(tmp_path, rows: str, name: str = "terms.tsv"):
    path = tmp_path / name
    path.write_text(rows, encoding="utf-8")
    return path


def test_a_glossary_makes_its_terms_constraints_of_the_texts_that_hold_them(translator, tmp_path):
    path = glossary_file(tmp_path, "source\ttarget\ndog\tHund\nwoman\tFrau\n")
    texts = ["A dog runs.", "A woman with a red hat.", "A man."]
    want = translate_lines(translator, texts, glossary=path)
    assert want[0][0].text != translated(translator, [texts[0]])[0]  # the glossary changes this one
    with serving(create_app(translator, glossary=path)) as (port, _):
        status, body = call(port, "POST", "/translate", {"texts": texts})
        assert status == 200, body
        assert texts_of(body) == [h[0].text for h in want]
        assert "▁Hund" in body["translations"][0]["tokens"] and "▁Frau" in body["translations"][1]["tokens"]
        # with the request's own constraints; and a greedy request holding a term is refused, not unsteered
        status, body = call(port, "POST", "/translate", {"text": texts[0], "constraints": ["Mann"]})
        assert status == 200, body
        assert texts_of(body) == translated(translator, [texts[0]], constraints=[["Mann"]], glossary=path)
        assert "▁Hund" in body["tokens"] and "▁Mann" in body["tokens"]
        status, body = call(port, "POST", "/translate", {"text": texts[0], "greedy": True})
        assert status == 422 and body["error"].startswith("text: ") and "need beam search" in body["error"], body
        assert call(port, "POST", "/translate", {"text": texts[2], "greedy": True})[0] == 200  # no term in it


def test_serve_refuses_a_bad_glossary_in_one_line_before_it_starts(tiny_model_dir, image_model, tmp_path, monkeypatch):
    started = never_serve(monkeypatch)
    runner = CliRunner()
    bad = glossary_file(tmp_path, "dog\tHund\ncat\n")
    cases = [(tiny_model_dir, bad, f"glossary {bad} line 2: expected 'source term<TAB>target term'"),
             (tiny_model_dir, tmp_path / "none.tsv", "not found"),
             (tiny_model_dir, glossary_file(tmp_path, "dog\tHund\ncat\t日本\n", "unwritable.tsv"),
              "unwritable.tsv line 2: the target term '日本' cannot be written with the model's target vocabulary"),
             (image_model / "model", glossary_file(tmp_path, "dog\tHund\n", "good.tsv"),
              "is an image model; send constraints with the requests instead")]
    for model, glossary, message in cases:
        result = runner.invoke(cli, ["serve", str(model), "--device", "cpu", "--glossary", str(glossary)])
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        errors = [line for line in result.output.splitlines() if line.strip()]
        assert len(errors) == 1 and message in errors[0], result.output
    assert started == []


def test_image_uploads_take_steering_in_the_query_string(image_model):
    from urllib.parse import urlencode

    from seq2seq.inference.generator import load_engine

    model = load_engine(image_model / "model", device="cpu")  # 2 training steps: it writes "square" over and over
    image = image_model / "img" / "1.png"

    def generate(port, *query):
        return call(port, "POST", "/generate?" + urlencode([("beam", 2), ("max_len_b", 8), *query]),
                    image.read_bytes(), {"Content-Type": "image/png"})

    def expected(**steering):
        return model.translate_nbest([str(image)], beam=2, max_len_b=8, **steering)[0][0]

    assert contains(expected(prefix=["square"]).pieces, ["▁square", "▁square"])
    with serving(create_app(model, allow_paths=True)) as (port, _):
        status, body = generate(port, ("prefix", "a"))
        assert status == 200 and body["tokens"][:2] == ["▁", "a"] and body["text"] == expected(prefix=["a"]).text
        want = expected(prefix=["square"], avoid=["square square"])
        for avoid in ([("avoid", "square square")], [("avoid", '["square square"]')],
                      [("avoid", "square square"), ("avoid", "blue")]):
            status, body = generate(port, ("prefix", "square"), *avoid)
            assert status == 200 and body["text"] == want.text, (avoid, body)
            assert body["tokens"][0] == "▁square" and not contains(body["tokens"], ["▁square", "▁square"]), body
        status, body = generate(port, ("constraints", "a square"))
        assert status == 200 and contains(body["tokens"], ["▁", "a", "▁square"]), body
        assert body["text"] == expected(constraints=[["a square"]]).text
        for query, message in [([("greedy", "true"), ("beam", 1), ("constraints", "square")], "need beam search"),
                               ([("prefix", "a"), ("prefix", "b")], "prefix is given 2 times"),
                               ([("constraints", '[""]')], "the uploaded file: an empty constraint"),
                               ([("prefix", "a" * 30)], "the uploaded file: the target prefix has")]:
            status, body = call(port, "POST", "/generate?" + urlencode(query), image.read_bytes(),
                                {"Content-Type": "image/png"})
            assert status == 422 and message in body["error"], (query, body)
        # {"paths": [...]}: the request's steering holds for each file
        status, body = call(port, "POST", "/generate", {"paths": [str(image)] * 2, "beam": 2, "max_len_b": 8,
                                                        "prefix": "a"})
        assert status == 200 and [g["text"] for g in body["generations"]] == [expected(prefix=["a"]).text] * 2, body
        status, body = call(port, "POST", "/generate", {"paths": [str(image)], "constraints": [3]})
        assert status == 422 and "constraints must be a list of strings" in body["error"], body
