#!/usr/bin/env python
"""Can one request hold `seq2seq serve`? --clients clients under load, plus the pathological request of
issue 70 (64 lines of 500 words, beam 16, nbest 16, max_len_a 1000, min_len = the model's longest output).

    python benchmarks/serve_hold.py                                   # 64 clients, 5 s budget, 10 s per phase
    python benchmarks/serve_hold.py --model runs/quickstart/model --budget 10
    python benchmarks/serve_hold.py --clients 2 --seconds 2 --budget 1 --steps 2   # a smoke run

A model directory (--model, else a small one trained on generated data, as serve_soak.py makes it) is
served by `seq2seq serve --request-timeout BUDGET` in a subprocess on 127.0.0.1 (a free port; no other
address is ever contacted). Phase 1: the clients send short texts for --seconds, each request after the
last one's answer, while a prober asks GET /health every 20 ms. Phase 2: the same, with the pathological
request sent at its start. Then SIGTERM, with the pathological request sent again just before it.
Every request has a timeout; the server is killed if it outlives the run.

Printed: /health p50 / p99 in each phase, the clients' latency p50 / p99 / max in each phase, what the
pathological request got and when, and the seconds from SIGTERM to the exit. Checks (exit 1 if one
fails): the pathological request gets 504 within budget + 2 s, no client request waits longer than
its phase-1 maximum + budget + 2 s, the server exits 0 within 10 s + budget after SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import machine_info  # noqa: E402
from benchmarks.serve_soak import HOST, WORDS, free_port, request, text_model  # noqa: E402


def pathological(model_dir: Path) -> bytes:
    config = yaml.safe_load((model_dir / "config.yaml").read_text(encoding="utf-8"))
    cap = int((config.get("model") or {}).get("max_positions", 1024)) - 1
    rng = random.Random(0)
    line = " ".join(rng.choice(WORDS) for _ in range(500))
    return json.dumps({"texts": [line] * 64, "beam": 16, "nbest": 16, "max_len_a": 1000, "min_len": cap}).encode()


def timed(port: int, method: str, path: str, body: bytes = b"", timeout: float = 120.0) -> tuple[int, float]:
    start = time.monotonic()
    try:
        status = request(port, method, path, body, timeout=timeout)
    except OSError:
        status = 0
    return status, time.monotonic() - start


def phase(port: int, clients: int, seconds: float, hold: bytes | None) -> dict:
    """Load for `seconds`: client latencies, /health latencies and (with `hold`) the pathological answer."""
    stop = time.monotonic() + seconds
    latencies: list[float] = []
    statuses: list[int] = []
    health: list[float] = []
    held: dict = {}
    lock = threading.Lock()

    def client(seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < stop:
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8)))
            status, took = timed(port, "POST", "/translate", json.dumps({"text": text}).encode())
            with lock:
                statuses.append(status)
                latencies.append(took)

    def prober() -> None:
        while time.monotonic() < stop:
            status, took = timed(port, "GET", "/health", timeout=10)
            with lock:
                health.append(took if status == 200 else float("inf"))
            time.sleep(0.02)

    def hold_it() -> None:
        held["status"], held["seconds"] = timed(port, "POST", "/translate", hold or b"")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)] + [threading.Thread(target=prober)]
    if hold is not None:
        threads.append(threading.Thread(target=hold_it))
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 180)
    return {"latency": np.array(latencies), "statuses": statuses, "health": np.array(health), "held": held}


def ms(values: np.ndarray, q: float) -> str:
    return f"{np.percentile(values, q) * 1000:.0f} ms" if len(values) else "n/a"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=None, help="a model directory (default: train a small one)")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    p.add_argument("--budget", type=float, default=5.0, help="the server's --request-timeout")
    p.add_argument("--threads", type=int, default=1, help="the server's torch threads")
    p.add_argument("--steps", type=int, default=60, help="training steps of the small model")
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/seq2seq-serve-hold"))
    args = p.parse_args()

    print(machine_info(args.threads))
    model_dir = args.model
    if model_dir is None:
        args.work_dir.mkdir(parents=True, exist_ok=True)
        model_dir = text_model(args.work_dir, args.steps)
    hold = pathological(model_dir)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "seq2seq", "serve", str(model_dir), "--host", HOST, "--port",
                             str(port), "--threads", str(args.threads), "--log-level", "warning", "--max-chars",
                             "5000", "--max-work", str(10**12), "--request-timeout", str(args.budget)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    failures = []
    try:
        deadline = time.monotonic() + 120
        while timed(port, "GET", "/health", timeout=5)[0] != 200:
            if proc.poll() is not None or time.monotonic() > deadline:
                print(proc.communicate(timeout=10)[1])
                return 1
            time.sleep(0.2)
        quiet = phase(port, args.clients, args.seconds, None)
        loaded = phase(port, args.clients, args.seconds, hold)
        for name, result in (("without", quiet), ("with", loaded)):
            lat, health = result["latency"], result["health"]
            print(f"{name} the pathological request: {len(lat)} client requests ({args.clients} clients), latency "
                  f"p50 {ms(lat, 50)}, p99 {ms(lat, 99)}, max {ms(lat, 100)}; /health p50 {ms(health, 50)}, "
                  f"p99 {ms(health, 99)} ({len(health)} probes); statuses "
                  f"{dict(sorted((s, result['statuses'].count(s)) for s in set(result['statuses'])))}")
        held = loaded["held"]
        print(f"the pathological request: {held.get('status')} after {held.get('seconds', float('nan')):.2f} s "
              f"(budget {args.budget:g} s)")
        if held.get("status") != 504 or held["seconds"] > args.budget + 2:
            failures.append("the pathological request was not cut at its budget")
        if len(loaded["latency"]) and loaded["latency"].max() > quiet["latency"].max() + args.budget + 2:
            failures.append("a client waited longer than the budget beyond the quiet phase's worst")
        again = threading.Thread(target=timed, args=(port, "POST", "/translate", hold), daemon=True)
        again.start()
        time.sleep(0.5)  # it is in the model now
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=10 + args.budget + 30)
        took = time.monotonic() - signalled
        print(f"SIGTERM with the pathological request in flight: exit {proc.returncode} after {took:.2f} s "
              f"(limit 10 s + budget {args.budget:g} s)")
        if proc.returncode != 0 or took > 10 + args.budget:
            failures.append("the server did not exit 0 within 10 s + the budget after SIGTERM")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    for failure in failures:
        print("FAILED:", failure)
    print(f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
