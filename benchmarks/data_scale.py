"""Corpora of any size: time to the first training step, peak memory and step speed, by corpus size.

    python benchmarks/data_scale.py                       # 1M, 4M and 16M pairs
    python benchmarks/data_scale.py --sizes 1 4 --steps 20
    python benchmarks/data_scale.py --sizes 0.0005 --steps 2 --distinct 300 --peer-pairs 0 --cold-only   # smoke

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


def corpus(work: Path, millions: float, distinct: int = MILLION) -> tuple[Path, Path]:
    """work/train-{size}.en/.de: the grammar's first `distinct` pairs (a million), repeated (and cut) to the size."""
    from seq2seq.data.synthetic import generate_pairs

    kind = "" if distinct == MILLION else f"-{distinct}"  # (a smoke run's corpora beside the real ones)
    base = work / f"base{kind}.en", work / f"base{kind}.de"
    if not all(p.is_file() for p in base):
        pairs = generate_pairs(distinct, seed=7)
        base[0].write_text("".join(en + "\n" for en, _ in pairs), encoding="utf-8")
        base[1].write_text("".join(de + "\n" for _, de in pairs), encoding="utf-8")
    name = f"{millions:g}M"
    out = work / f"train-{name}{kind}.en", work / f"train-{name}{kind}.de"
    if not all(p.is_file() for p in out):
        for src, dst in zip(base, out):
            lines = src.read_bytes().splitlines(keepends=True)
            n = int(millions * MILLION)
            with dst.open("wb") as f:
                for start in range(0, n, distinct):
                    f.writelines(lines[:min(distinct, n - start)])
    return out


def small_corpus(work: Path, pairs: int = 20000) -> tuple[Path, Path]:
    """The quickstart's 20,000 training pairs (`pairs`: its first so many), and its data directory's valid files."""
    from seq2seq.data.synthetic import make_splits, write_splits

    paths = write_splits(make_splits(n_train=pairs), work / "small")
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


def run(src: Path, tgt: Path, valid: tuple[Path, Path], out_dir: Path, cache: Path, steps: int,
        overrides: tuple[str, ...] = ()) -> dict:
    """One `seq2seq train` on (src, tgt); returns the times, peak RSS and steps/s it showed."""
    cmd = [sys.executable, "-m", "seq2seq", "train", str(ROOT / "configs" / "example.yaml"),
           "--set", f"data.train_src={src}", "--set", f"data.train_tgt={tgt}",
           "--set", f"data.valid_src={valid[0]}", "--set", f"data.valid_tgt={valid[1]}",
           "--set", f"training.output_dir={out_dir}", "--set", f"training.max_steps={steps}",
           "--set", "training.log_every=1", "--set", "training.valid_every=1000000",
           "--set", "training.valid_bleu=false", "--set", "training.threads=2",
           *(arg for override in overrides for arg in ("--set", override))]
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
    p.add_argument("--distinct", type=int, default=MILLION,
                   help="distinct generated pairs, repeated to each size (default: a million; fewer for a smoke run)")
    p.add_argument("--peer-pairs", type=int, default=20000,
                   help="pairs of the peer corpus (default: the quickstart's 20,000; 0: no peer run, a smoke run)")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   help="config override of every training (e.g. a smaller model for a smoke run; repeatable)")
    p.add_argument("--cold-only", action="store_true", help="no warm run (a smoke run)")
    args = p.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="data_scale-"))
    work.mkdir(parents=True, exist_ok=True)
    print(machine_info(2))
    small = small_corpus(work, args.peer_pairs)
    valid = (work / "small" / "valid.en", work / "small" / "valid.de")
    peer = "20k" if args.peer_pairs == 20000 else f"{args.peer_pairs:,}"
    rows = []
    peers = [(f"{peer} (quickstart)", small)] if args.peer_pairs else []
    for label, files in peers + [(f"{m:g}M", corpus(work, m, args.distinct)) for m in args.sizes]:
        size = sum(f.stat().st_size for f in files) / 1e6
        cache = Path(tempfile.mkdtemp(prefix="cache-", dir=work))
        try:
            for kind in ("cold",) if args.cold_only else ("cold", "warm"):
                r = run(*files, valid, work / f"run-{label.split()[0]}-{kind}", cache, args.steps, args.overrides)
                rows.append((label, f"{size:,.0f}", kind, r))
                print(f"{label:>17} {kind}: data ready {r['ready']:.1f} s, first step {r['first']:.1f} s, peak RSS "
                      f"{r['rss'] / 2**30:.2f} GiB (anonymous {r['anon'] / 2**30:.2f}; with workers "
                      f"{r['tree'] / 2**30:.2f}), {r['speed']:.2f} steps/s", flush=True)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
            for run_dir in work.glob("run-*"):
                shutil.rmtree(run_dir, ignore_errors=True)
    base = {kind: r["speed"] for label, _, kind, r in rows if label == f"{peer} (quickstart)"}
    print("\n| corpus | MB | cache | data ready (s) | first step (s) | peak RSS (GiB) | anonymous (GiB) "
          f"| with workers (GiB) | steps/s | vs {peer if args.peer_pairs else 'peer'} |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, size, kind, r in rows:
        versus = f"{r['speed'] / base[kind]:.2f}x" if kind in base else "-"  # (--peer-pairs 0: no peer)
        print(f"| {label} | {size} | {kind} | {r['ready']:.1f} | {r['first']:.1f} | {r['rss'] / 2**30:.2f} | "
              f"{r['anon'] / 2**30:.2f} | {r['tree'] / 2**30:.2f} | {r['speed']:.2f} | {versus} |")
    worst = max(r["rss"] for *_, r in rows) / 2**30
    print(f"\npeak RSS of the training process, largest: {worst:.2f} GiB (target < 2 GiB)")
    for label, _, kind, r in rows:
        if label == "4M" and kind == "cold":
            print(f"4M pairs, cold: first step after {r['first']:.0f} s (target < 120 s on 2 cores)")


if __name__ == "__main__":
    main()
