"""Corpora of any size: time to the first training step, peak memory and step speed, by corpus size.

    python benchmarks/data_scale.py                       # 1M, 4M and 16M pairs
    python benchmarks/data_scale.py --sizes 1 4 --steps 20

Each size is a corpus of the quickstart grammar's pairs (`seq2seq.data.synthetic`: one million
distinct pairs, generated once into --work, repeated to the size; 134 MB of text a million) trained by
`seq2seq train configs/example.yaml` in a subprocess with a cache of its own (nothing prepared before),
run twice: cold (the tokenizer trained and the corpus tokenized into the cache), then warm (a
second run with another output directory, which reuses the cache). Measured from outside: seconds
from the command's start to "data ready" and to its first training step (its log line at step 1),
the peak resident memory of the training process and of its whole process tree (workers
included, polled every 0.1 s), and steps per second over the steps after the first. The peer is the
same command on the 20,000 pairs the quickstart trains on, run in the same script: the step speed must
not depend on the corpus size. Targets (issue 42): peak RSS under 2 GB at every size, first step at
4M under 2 minutes on 2 cores, the same steps per second as the small corpus.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import machine_info  # noqa: E402

MILLION = 1_000_000


def corpus(work: Path, millions: float) -> tuple[Path, Path]:
    """work/train-{size}.en/.de: the grammar's first million pairs, repeated (and cut) to the size."""
    from seq2seq.data.synthetic import generate_pairs

    base = work / "base.en", work / "base.de"
    if not all(p.is_file() for p in base):
        pairs = generate_pairs(MILLION, seed=7)
        base[0].write_text("".join(en + "\n" for en, _ in pairs), encoding="utf-8")
        base[1].write_text("".join(de + "\n" for _, de in pairs), encoding="utf-8")
    name = f"{millions:g}M"
    out = work / f"train-{name}.en", work / f"train-{name}.de"
    if not all(p.is_file() for p in out):
        for src, dst in zip(base, out):
            lines = src.read_bytes().splitlines(keepends=True)
            n = int(millions * MILLION)
            with dst.open("wb") as f:
                for start in range(0, n, MILLION):
                    f.writelines(lines[:min(MILLION, n - start)])
    return out


def small_corpus(work: Path) -> tuple[Path, Path]:
    """The quickstart's 20,000 training pairs (and its data directory's valid files)."""
    from seq2seq.data.synthetic import make_splits, write_splits

    paths = write_splits(make_splits(), work / "small")
    return paths["train"]


def tree_rss(pid: int) -> tuple[int, int, int]:
    """(RSS of `pid`, its anonymous part, RSS of it and every descendant), bytes, from /proc. The rest of
    the RSS is file pages: the memory-mapped shards a step read, which the kernel may drop at any time."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    anon: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        ppid = int(fields.get("PPid", "0").strip() or 0)
        children.setdefault(ppid, []).append(int(entry.name))
        rss[int(entry.name)] = int(fields.get("VmRSS", "0 kB").split()[0]) * 1024
        anon[int(entry.name)] = int(fields.get("RssAnon", "0 kB").split()[0]) * 1024
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += children.get(p, [])
    return rss.get(pid, 0), anon.get(pid, 0), total


def run(src: Path, tgt: Path, valid: tuple[Path, Path], out_dir: Path, cache: Path, steps: int) -> dict:
    """One `seq2seq train` on (src, tgt); returns the times, peak RSS and steps/s it showed."""
    cmd = [sys.executable, "-m", "seq2seq", "train", str(ROOT / "configs" / "example.yaml"),
           "--set", f"data.train_src={src}", "--set", f"data.train_tgt={tgt}",
           "--set", f"data.valid_src={valid[0]}", "--set", f"data.valid_tgt={valid[1]}",
           "--set", f"training.output_dir={out_dir}", "--set", f"training.max_steps={steps}",
           "--set", "training.log_every=1", "--set", "training.valid_every=1000000",
           "--set", "training.valid_bleu=false", "--set", "training.threads=2"]
    env = {**os.environ, "SEQ2SEQ_CACHE": str(cache), "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    peak, peak_anon, peak_tree, stop = [0], [0], [0], threading.Event()

    def poll() -> None:
        while not stop.is_set():
            own, anon, tree = tree_rss(proc.pid)
            peak[0], peak_anon[0], peak_tree[0] = max(peak[0], own), max(peak_anon[0], anon), max(peak_tree[0], tree)
            time.sleep(0.1)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    ready = first = None
    step_times: dict[int, float] = {}
    tail: list[str] = []
    assert proc.stderr is not None
    for line in proc.stderr:
        now = time.perf_counter() - t0
        tail = (tail + [line])[-20:]
        if ready is None and "data ready" in line:
            ready = now
        match = re.search(r"step (\d+): loss", line)
        if match:
            step_times[int(match.group(1))] = now
            first = first if first is not None else now
    proc.wait()
    stop.set()
    poller.join()
    if proc.returncode != 0:
        raise SystemExit(f"training failed ({proc.returncode}):\n{''.join(tail)}")
    last = max(step_times)
    speed = (last - 1) / (step_times[last] - step_times[1]) if last > 1 else float("nan")
    return {"ready": ready, "first": first, "rss": peak[0], "anon": peak_anon[0], "tree": peak_tree[0], "speed": speed}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=float, nargs="+", default=[1, 4, 16], help="corpus sizes in millions of pairs")
    p.add_argument("--steps", type=int, default=30, help="training steps of each run")
    p.add_argument("--work", default=None, help="where the corpora are generated (kept for reuse; default: a temp dir)")
    args = p.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="data_scale-"))
    work.mkdir(parents=True, exist_ok=True)
    print(machine_info(2))
    small = small_corpus(work)
    valid = (work / "small" / "valid.en", work / "small" / "valid.de")
    rows = []
    for label, files in [("20k (quickstart)", small)] + [(f"{m:g}M", corpus(work, m)) for m in args.sizes]:
        size = sum(f.stat().st_size for f in files) / 1e6
        cache = Path(tempfile.mkdtemp(prefix="cache-", dir=work))
        try:
            for kind in ("cold", "warm"):
                r = run(*files, valid, work / f"run-{label.split()[0]}-{kind}", cache, args.steps)
                rows.append((label, f"{size:,.0f}", kind, r))
                print(f"{label:>17} {kind}: data ready {r['ready']:.1f} s, first step {r['first']:.1f} s, peak RSS "
                      f"{r['rss'] / 2**30:.2f} GiB (anonymous {r['anon'] / 2**30:.2f}; with workers "
                      f"{r['tree'] / 2**30:.2f}), {r['speed']:.2f} steps/s", flush=True)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
            for run_dir in work.glob("run-*"):
                shutil.rmtree(run_dir, ignore_errors=True)
    base = {kind: r["speed"] for label, _, kind, r in rows if label.startswith("20k")}
    print("\n| corpus | MB | cache | data ready (s) | first step (s) | peak RSS (GiB) | anonymous (GiB) "
          "| with workers (GiB) | steps/s | vs 20k |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, size, kind, r in rows:
        print(f"| {label} | {size} | {kind} | {r['ready']:.1f} | {r['first']:.1f} | {r['rss'] / 2**30:.2f} | "
              f"{r['anon'] / 2**30:.2f} | {r['tree'] / 2**30:.2f} | {r['speed']:.2f} | {r['speed'] / base[kind]:.2f}x |")
    worst = max(r["rss"] for *_, r in rows) / 2**30
    print(f"\npeak RSS of the training process, largest: {worst:.2f} GiB (target < 2 GiB)")
    for label, _, kind, r in rows:
        if label == "4M" and kind == "cold":
            print(f"4M pairs, cold: first step after {r['first']:.0f} s (target < 120 s on 2 cores)")


if __name__ == "__main__":
    main()
