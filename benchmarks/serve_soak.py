#!/usr/bin/env python
"""Server soak: sustained concurrent load on `seq2seq serve`, valid and invalid requests mixed.

    python benchmarks/serve_soak.py                         # text, image and audio servers, 32 clients, 90 s each
    python benchmarks/serve_soak.py --models text --seconds 300
    python benchmarks/serve_soak.py --models text --seconds 2 --clients 2 --steps 2   # a smoke run

For each model kind a small model directory is made (generated data, `seq2seq train`, --steps steps),
served by `seq2seq serve` in a subprocess on 127.0.0.1 (a free port; no other address is ever
contacted), and --clients threads send requests until --seconds have passed. A quarter of the
requests are invalid, of a rotating kind: not JSON, nested too deeply, a lone surrogate, text over
the limit, an unknown or bad search option, a wrong Content-Type, a missing field, a corrupt upload.
Every request is bounded by a timeout, and every client stops at the deadline.

Checks, printed per kind (exit 1 if one fails):
* no 500 (or other 5xx but 503 under a full queue) for a valid request, and each invalid request gets
  its documented 4xx, never a 500;
* memory flat after warm-up: the server's RSS (sampled every 0.5 s from /proc) grows by at most
  --rss-growth (default 10%) from the end of the warm-up (the first quarter) to the end;
* figures: valid requests per second, latency p50 / p99 of valid requests, RSS at warm-up and end.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import machine_info  # noqa: E402

HOST = "127.0.0.1"
WORDS = ["red", "green", "blue", "one", "two", "three"]


# --------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------


def train(config: dict, out: Path, steps: int) -> Path:
    import yaml

    config = {**config, "training": {**config["training"], "max_steps": steps, "valid_every": steps}}
    path = out.parent / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    subprocess.run([sys.executable, "-m", "seq2seq", "train", str(path), "-o", str(out)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return out


SMALL = {"d_model": 32, "heads": 2, "ffn_dim": 64, "layers": 1}
TRAINING = {"max_steps": 60, "valid_every": 60, "device": "cpu", "threads": 1, "lr": 0.003, "warmup_steps": 10,
            "valid_bleu": False, "max_tokens": 512}


def text_model(work: Path, steps: int) -> Path:
    from seq2seq.data.synthetic import make_splits, write_splits

    paths = write_splits(make_splits(n_train=1500, n_valid=50, n_test=100, seed=5), work / "text")
    return train({"data": {"train_src": str(paths["train"][0]), "train_tgt": str(paths["train"][1]),
                           "valid_src": str(paths["valid"][0]), "valid_tgt": str(paths["valid"][1])},
                  "tokenizer": {"vocab_size": 300}, "model": SMALL, "training": TRAINING}, work / "text_model", steps)


def image_model(work: Path, steps: int) -> Path:
    from PIL import Image

    rng = np.random.default_rng(0)
    root = work / "images"
    root.mkdir(parents=True)
    colours = {"red": (220, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 220)}
    rows = ["image\tcaption"]
    for i in range(60):
        name = list(colours)[i % 3]
        pixels = np.clip(np.array(colours[name]) + rng.normal(0, 20, (32, 32, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(root / f"{i}.png")
        rows.append(f"{i}.png\t{name}")
    (root / "train.tsv").write_text("\n".join(rows) + "\n")
    return train({"data": {"train": str(root / "train.tsv"), "valid": str(root / "train.tsv")},
                  "tokenizer": {"vocab_size": 20}, "model": {**SMALL, "encoder": {
                      "type": "image", "image_size": 32, "patch_size": 8}}, "training": TRAINING}, work / "image_model",
                 steps)


def tone(words: list[str], rate: int, rng: np.random.Generator) -> np.ndarray:
    freqs = {w: 300 + 150 * i for i, w in enumerate(WORDS)}
    parts = []
    for w in words:
        t = np.arange(int(0.2 * rate)) / rate
        parts += [0.5 * np.sin(2 * np.pi * freqs[w] * t), np.zeros(int(0.05 * rate))]
    return (np.concatenate(parts) + rng.normal(0, 0.01, sum(len(p) for p in parts))).astype(np.float32)


def audio_model(work: Path, steps: int) -> Path:
    import soundfile as sf

    rng = np.random.default_rng(1)
    root = work / "audio"
    root.mkdir(parents=True)
    rows = ["audio\ttext"]
    for i in range(60):
        words = [str(w) for w in rng.choice(WORDS, size=int(rng.integers(1, 4)))]
        sf.write(root / f"{i}.wav", tone(words, 8000, rng), 8000)
        rows.append(f"{i}.wav\t{' '.join(words)}")
    (root / "train.tsv").write_text("\n".join(rows) + "\n")
    return train({"data": {"train": str(root / "train.tsv"), "valid": str(root / "train.tsv")},
                  "tokenizer": {"vocab_size": 20}, "model": {**SMALL, "encoder": {
                      "type": "audio", "sample_rate": 8000, "n_fft": 256, "hop_length": 80, "win_length": 200, "n_mels": 20,
                      "conv_channels": 8}}, "training": TRAINING}, work / "audio_model", steps)


# --------------------------------------------------------------------------------------------
# Requests
# --------------------------------------------------------------------------------------------


def request(port: int, method: str, path: str, body: bytes = b"", content_type: str | None = "application/json",
            timeout: float = 60.0) -> int:
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        headers = {"Content-Type": content_type} if content_type else {}
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def text_requests(rng: random.Random) -> tuple[list, list]:
    """(valid, invalid) request makers: each () -> (method, path, body, content_type, expected statuses)."""
    def sentence() -> str:
        return " ".join(rng.choice(["a", "the", "dog", "man", "sees", "red", "two", "cats", "runs", "."])
                        for _ in range(rng.randint(2, 12)))

    valid = [
        lambda: ("POST", "/translate", json.dumps({"text": sentence()}).encode(), "application/json", {200}),
        lambda: ("POST", "/translate", json.dumps({"texts": [sentence() for _ in range(rng.randint(1, 6))],
                                                   "beam": rng.choice([1, 2, 4])}).encode(), "application/json", {200}),
        lambda: ("POST", "/translate", json.dumps({"text": sentence(), "greedy": True}).encode(),
                 "application/json; charset=utf-8", {200}),
    ]
    invalid = [
        lambda: ("POST", "/translate", b"{not json", "application/json", {400}),
        lambda: ("POST", "/translate", b"[" * 5000 + b"]" * 5000, "application/json", {400}),
        lambda: ("POST", "/translate", b'{"text": "\\ud800 lone"}', "application/json", {422}),
        lambda: ("POST", "/translate", json.dumps({"text": "x" * 200_000}).encode(), "application/json", {413}),
        lambda: ("POST", "/translate", json.dumps({"text": "a dog", "beam": 0}).encode(), "application/json", {422}),
        lambda: ("POST", "/translate", json.dumps({"text": "a dog", "bogus": 1}).encode(), "application/json", {422}),
        lambda: ("POST", "/translate", json.dumps({"text": "a dog"}).encode(), "text/plain", {415}),
        lambda: ("POST", "/translate", json.dumps({"txt": "a dog"}).encode(), "application/json", {422}),
    ]
    return valid, invalid


def file_requests(kind: str, samples: list[bytes], rng: random.Random) -> tuple[list, list]:
    media = "image/png" if kind == "image" else "audio/wav"
    valid = [
        lambda: ("POST", "/generate", rng.choice(samples), media, {200}),
        lambda: ("POST", f"/generate?beam={rng.choice([1, 2, 3])}", rng.choice(samples), media, {200}),
    ]
    invalid = [
        lambda: ("POST", "/generate", b"not a media file at all", media, {422}),
        lambda: ("POST", "/generate", rng.choice(samples)[: 40], media, {422}),
        lambda: ("POST", "/generate?beam=0", rng.choice(samples), media, {422}),
        lambda: ("POST", "/generate", rng.choice(samples), "text/plain", {415}),
        lambda: ("POST", "/generate", b'{"paths": ["/etc/passwd"]}', "application/json", {403, 422}),
        lambda: ("POST", "/translate", b'{"text": "a"}', "application/json", {404}),
    ]
    return valid, invalid


# --------------------------------------------------------------------------------------------
# The soak
# --------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def soak(kind: str, model_dir: Path, makers: tuple[list, list], args: argparse.Namespace) -> list[str]:
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "seq2seq", "serve", str(model_dir), "--host", HOST,
                               "--port", str(port), "--device", "cpu", "--log-level", "warning"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    failures: list[str] = []
    try:
        for _ in range(600):  # up to 60 s to start
            try:
                if request(port, "GET", "/health", content_type=None, timeout=2) == 200:
                    break
            except OSError:
                time.sleep(0.1)
        else:
            return [f"{kind}: the server did not start"]
        valid, invalid = makers
        latencies: list[float] = []
        outcomes: Counter = Counter()
        lock = threading.Lock()
        start = time.time()
        deadline = start + args.seconds
        rss: list[tuple[float, float]] = []

        def client(seed: int) -> None:
            rng = random.Random(seed)
            while time.time() < deadline:
                bad = rng.random() < 0.25
                method, path, body, ctype, expected = rng.choice(invalid if bad else valid)()
                t = time.time()
                try:
                    status = request(port, method, path, body, ctype)
                except OSError as e:
                    status = f"{type(e).__name__}"
                elapsed = time.time() - t
                with lock:
                    ok = status in expected or (status == 503 and not bad)
                    outcomes[("invalid" if bad else "valid", status, ok)] += 1
                    if not bad and status == 200:
                        latencies.append(elapsed)
                    if not ok and len(failures) < 20:
                        failures.append(f"{kind}: {method} {path} ({ctype}) -> {status}, expected {sorted(expected)}")

        def sample_memory() -> None:
            while time.time() < deadline:
                rss.append((time.time() - start, rss_mb(server.pid)))
                time.sleep(0.5)

        threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
        threads.append(threading.Thread(target=sample_memory))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.time() - start
        warm = [m for s, m in rss if s >= args.seconds / 4]
        warm_rss, end_rss = (warm[0], max(warm[-max(1, len(warm) // 10):])) if warm else (float("nan"),) * 2
        n_valid = sum(n for (which, status, _), n in outcomes.items() if which == "valid" and status == 200)
        n_invalid = sum(n for (which, _, _), n in outcomes.items() if which == "invalid")
        fives = sum(n for (_, status, _), n in outcomes.items() if isinstance(status, int) and status >= 500
                    and status != 503)
        q = statistics.quantiles(latencies, n=100) if len(latencies) >= 2 else [float("nan")] * 99
        print(f"{kind}: {seconds:.0f} s, {args.clients} clients: {n_valid} valid requests answered "
              f"({n_valid / seconds:.1f}/s), {n_invalid} invalid ones refused; 5xx other than 503: {fives}; "
              f"latency p50 {q[49] * 1000:.0f} ms, p99 {q[98] * 1000:.0f} ms; RSS {warm_rss:.0f} MB after warm-up, "
              f"{end_rss:.0f} MB at the end ({(end_rss / warm_rss - 1) * 100:+.1f}%)")
        statuses = Counter()
        for (which, status, _), n in outcomes.items():
            statuses[f"{which} {status}"] += n
        print("  statuses: " + ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items())))
        if end_rss > warm_rss * (1 + args.rss_growth):
            failures.append(f"{kind}: RSS grew from {warm_rss:.0f} to {end_rss:.0f} MB after warm-up")
        if not n_valid:
            failures.append(f"{kind}: no valid request was answered")
    finally:
        server.terminate()
        try:
            server.wait(timeout=90)
        except subprocess.TimeoutExpired:
            server.kill()
    return failures


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="text,image,audio", help="comma-separated: text, image, audio")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--seconds", type=float, default=90.0, help="load per model")
    p.add_argument("--rss-growth", type=float, default=0.10, help="largest RSS growth after warm-up (fraction)")
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/seq2seq-serve-soak"))
    p.add_argument("--steps", type=int, default=TRAINING["max_steps"],
                   help="training steps of each model (default 60; fewer for a smoke run)")
    args = p.parse_args()
    print(machine_info(int(os.environ.get("OMP_NUM_THREADS", 0)) or os.cpu_count() or 1))
    shutil.rmtree(args.work_dir, ignore_errors=True)
    args.work_dir.mkdir(parents=True)
    rng = random.Random(0)
    failures: list[str] = []
    for kind in args.models.split(","):
        if kind == "text":
            failures += soak(kind, text_model(args.work_dir, args.steps), text_requests(rng), args)
        elif kind in ("image", "audio"):
            model = (image_model if kind == "image" else audio_model)(args.work_dir, args.steps)
            folder = args.work_dir / ("images" if kind == "image" else "audio")
            samples = [f.read_bytes() for f in sorted(folder.glob("*.png" if kind == "image" else "*.wav"))[:10]]
            failures += soak(kind, model, file_requests(kind, samples, rng), args)
        else:
            raise SystemExit(f"--models: unknown kind {kind!r} (text, image, audio)")
    print(f"{len(failures)} failures")
    for failure in failures:
        print("  " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
