"""A server that no request can hold (seq2seq/serve/budget.py, batcher.py, connections.py and the
search's stop hook, seq2seq/inference/search.py stop_when): a request past its time budget gets a JSON 504 and
its search stops between two decoding steps, as it does when its client goes away; one over the work
limit is refused up front; slow or broken connections get JSON and are closed; SIGTERM drains within
the budget and exits 0.

Servers run on 127.0.0.1 only, on a port the kernel picks; every request and wait has a timeout, and the
subprocess test kills what it started. The model is the session's `tiny_model_dir` (max_positions 256).
"""

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

if os.environ.get("SEQ2SEQ_REQUIRE_DATA"):  # CI: the serve extra is installed, these tests must run
    import fastapi  # noqa: F401
    import uvicorn
else:
    pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")
    uvicorn = pytest.importorskip("uvicorn", reason="the serve extra: pip install -e '.[serve]'")

from seq2seq.documents.line_translation import translate_lines  # noqa: E402
from seq2seq.inference.search import SearchStopped, stop_when  # noqa: E402
from seq2seq.inference.translator import Translator  # noqa: E402
from seq2seq.serve.app import create_app, server_config  # noqa: E402
from seq2seq.serve.batcher import Abandoned, Batcher  # noqa: E402
from seq2seq.serve.requests import Limits  # noqa: E402

import test_serve  # noqa: E402  (its `serving`)

TIMEOUT = 60
LONG_LINE = " ".join(["a man in a blue shirt rides a bike down the street"] * 25)  # > 255 source tokens


@pytest.fixture(scope="module")
def translator(tiny_model_dir) -> Translator:
    return Translator.load(tiny_model_dir, device="cpu")


def pathological(translator: Translator, texts: int = 16) -> dict:
    """The issue's request, scaled to the tiny model: long lines, the largest beam and n-best, and every
    output forced to the model's longest (min_len = max_len = max_positions - 1)."""
    cap = translator.config.model.max_positions - 1
    return {"texts": [LONG_LINE] * texts, "beam": 16, "nbest": 16, "max_len_a": 1000, "min_len": cap}


@contextlib.contextmanager
def serving(app):
    """uvicorn serving `app` on 127.0.0.1 in a thread with the server's own settings (`server_config`):
    test_serve's `serving`; yields the port."""
    with test_serve.serving(app, server_config(app, log_level="warning")) as (port, _):
        yield port


def call(port: int, method: str, path: str, body=None, timeout: float = TIMEOUT):
    """One request; returns (status, parsed JSON body, seconds it took)."""
    start = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        response = conn.getresponse()
        raw = response.read()
    finally:
        conn.close()
    return response.status, json.loads(raw) if raw else None, time.monotonic() - start


def raw_exchange(port: int, data: bytes, wait: float = TIMEOUT) -> tuple[bytes, float]:
    """Send `data` on a fresh connection and read one answer, or until the server closes the connection:
    (what came back, seconds)."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        if data:
            s.sendall(data)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
            head, sep, body = got.partition(b"\r\n\r\n")
            length = [line.split(b":")[1] for line in head.lower().split(b"\r\n") if line.startswith(b"content-length")]
            if sep and length and len(body) >= int(length[0]):
                break
    return got, time.monotonic() - start


def json_answer(raw: bytes) -> tuple[int, dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), raw[:300]
    return int(head.split()[1]), json.loads(body)


def in_thread(fn, *args):
    out = {}
    thread = threading.Thread(target=lambda: out.setdefault("result", fn(*args)), daemon=True)
    thread.start()
    return thread, out


def wait_for(condition, what: str, limit: float = TIMEOUT) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


# ---- the search's stop hook -------------------------------------------------------------------------


def test_a_search_stops_before_the_step_its_check_says_and_is_unchanged_otherwise(translator):
    texts = ["A dog runs.", "Two men are talking in a park."]
    plain = translator.translate_nbest(texts, beam=3, nbest=2)
    checks = []
    with stop_when(lambda: checks.append(1) is None and False):  # a check that never fires
        watched = translator.translate_nbest(texts, beam=3, nbest=2)
    assert checks, "the search never asked"
    assert [[(h.text, h.score, h.token_logprobs) for h in hyps] for hyps in watched] == \
           [[(h.text, h.score, h.token_logprobs) for h in hyps] for hyps in plain]

    asked = []
    with stop_when(lambda: asked.append(1) is None and len(asked) > 3), pytest.raises(SearchStopped, match="step 3"):
        translator.translate_nbest(texts, beam=3, min_len=50, max_len_a=0, max_len_b=60)
    assert len(asked) == 4  # asked before each step: stopped before the 4th


def test_the_batcher_stops_a_call_nobody_waits_for_and_drops_expired_jobs():
    steps = []

    def run(items, options):  # a model call of many steps that asks the hook before each
        from seq2seq.inference.search import stop_check

        check = stop_check()
        for step in range(options.get("steps", 10_000)):
            if check():
                raise SearchStopped(f"before step {step}")
            steps.append(step)
            time.sleep(0.001)
        return items

    batcher = Batcher(run, max_batch=8, window_s=0.0, max_queue=64)
    batcher.start()
    try:
        abandoned = threading.Event()
        long = batcher.submit(["a"], {}, abandoned=abandoned)
        wait_for(lambda: len(steps) > 5, "the call to start")
        expired = batcher.submit(["b"], {"other": 1}, deadline=time.monotonic() + 0.05)  # queued behind it
        time.sleep(0.1)  # its deadline passes while it waits
        abandoned.set()
        with pytest.raises(Abandoned) as stopped:
            long.result(TIMEOUT)
        assert stopped.value.running and len(steps) < 10_000
        with pytest.raises(Abandoned) as dropped:
            expired.result(TIMEOUT)
        assert not dropped.value.running
        assert batcher.calls == 1 and batcher.pending == 0  # the expired job never reached the model
        assert batcher.submit(["c"], {"steps": 3}, deadline=time.monotonic() + TIMEOUT).result(TIMEOUT) == ["c"]
    finally:
        batcher.close(TIMEOUT)


# ---- the time budget and the work limit -------------------------------------------------------------


def test_a_pathological_request_is_cut_at_its_budget_and_holds_no_one_else(translator):
    budget = 1.0
    app = create_app(translator, Limits(request_timeout_s=budget, max_work=10**9, batch_window_ms=0))
    with serving(app) as port:
        slow, slow_out = in_thread(call, port, "POST", "/translate", pathological(translator))
        wait_for(lambda: app.state.batcher.pending > 0, "the pathological request to reach the worker")
        time.sleep(0.2)  # it is in its search now
        health = [call(port, "GET", "/health") for _ in range(5)]
        status, body, took = call(port, "POST", "/translate", {"text": "A dog runs.", "beam": 2})
        slow.join(TIMEOUT)
    assert all(s == 200 for s, _, _ in health) and max(t for _, _, t in health) < 0.5
    assert status == 200 and body["text"] == translate_lines(translator, ["A dog runs."], beam=2)[0][0].text
    assert took < budget + 1.0  # it waited at most the rest of the pathological request's budget
    slow_status, slow_body, slow_took = slow_out["result"]
    assert slow_status == 504 and "time budget of 1 s" in slow_body["error"], slow_body
    assert budget <= slow_took < budget + 1.0


def test_a_request_whose_client_goes_away_stops_its_search(translator):
    app = create_app(translator, Limits(request_timeout_s=TIMEOUT, max_work=10**9))
    body = json.dumps(pathological(translator)).encode()
    with serving(app) as port:
        s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        s.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        wait_for(lambda: app.state.batcher.pending > 0, "the request to reach the worker")
        time.sleep(0.2)
        gone = time.monotonic()
        s.close()
        wait_for(lambda: app.state.batcher.pending == 0, "the search to stop", limit=10)
        freed = time.monotonic() - gone
        status, _, _ = call(port, "POST", "/translate", {"text": "A dog runs."})
    assert freed < 3.0 and status == 200  # (the search alone takes many seconds more)


def test_more_work_than_the_limit_is_refused_up_front_saying_what_fits(translator):
    app = create_app(translator, Limits(max_work=20_000))
    with serving(app) as port:
        status, body, _ = call(port, "POST", "/translate", pathological(translator))
        assert app.state.batcher.calls == 0
        ok, _, _ = call(port, "POST", "/translate", {"texts": ["A dog runs."] * 4, "beam": 16})
    assert status == 413 and ok == 200
    message = body["error"]
    assert "limit is 20,000 (--max-work)" in message and "a smaller beam (" in message, message
    fits = int(message.split("a smaller beam (")[1].split(" fits")[0])
    assert 1 <= fits < 16


# ---- connections ------------------------------------------------------------------------------------


def test_broken_and_slow_connections_get_json_and_are_closed(translator):
    app = create_app(translator, Limits(read_timeout_s=0.5))
    with serving(app) as port:
        big, _ = raw_exchange(port, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n")
        bad, _ = raw_exchange(port, b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Length: ten\r\n\r\n")
        half, half_took = raw_exchange(port, b"POST /translate HTTP/1.1\r\nHost: x\r\n")
        idle, idle_took = raw_exchange(port, b"")
        stalled, _ = raw_exchange(port, b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                        b"Content-Length: 100\r\n\r\n{\"text\": ")
        status, _, _ = call(port, "GET", "/health")
    assert json_answer(big) == (431, {"error": "the request's headers are too large (over 16 KiB together)"})
    status_bad, body_bad = json_answer(bad)
    assert status_bad == 400 and "Content-Length" in body_bad["error"]
    assert json_answer(half)[0] == 408 and 0.5 <= half_took < 3
    assert idle == b"" and 0.5 <= idle_took < 3
    status_stalled, body_stalled = json_answer(stalled)
    assert status_stalled == 408 and "stopped arriving" in body_stalled["error"]
    assert status == 200


# ---- SIGTERM ----------------------------------------------------------------------------------------


def test_sigterm_drains_within_the_budget_and_exits_0(tiny_model_dir, translator):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    budget = 2.0
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "seq2seq", "serve", str(tiny_model_dir), "--port", str(port),
                             "--threads", "1", "--log-level", "warning", "--request-timeout", str(budget),
                             "--max-work", str(10**9)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                call(port, "GET", "/health", timeout=5)
                break
            except OSError:
                assert proc.poll() is None, proc.communicate()[1]
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.1)
        slow, slow_out = in_thread(call, port, "POST", "/translate", pathological(translator))
        wait_for(lambda: call(port, "GET", "/health", timeout=5)[1]["queue"] > 0, "the request to be queued")
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=10 + budget + 5)
        took = time.monotonic() - signalled
        slow.join(TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    assert took < 10 + budget, took
    assert "server stopped" in stderr and "Traceback" not in stderr
    assert slow_out["result"][0] == 504  # cut at its budget, answered before the exit
