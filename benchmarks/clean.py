"""Benchmark of `seq2seq clean` (issue 72): Multi30K train with noise of known kinds injected at known
rates, cleaned by the command; each kind's recall, each filter's precision, the clean pairs lost, the
speed (pairs/s, extrapolated to 1M pairs) and the peak memory.

    python benchmarks/clean.py                       # en-de, 3% of each kind, 2 workers
    python benchmarks/clean.py --limit 2000 --workers 1
    python benchmarks/clean.py --speed-pairs 300000  # then the speed on 300k pairs, for 1M's extrapolation
    python benchmarks/clean.py --compare-langid      # py3langid vs lingua on short val sentences, then exit
    python benchmarks/clean.py --rate 0.05 --train-steps 2000   # then BLEU of clean, noisy and cleaned data

With --train-steps N, the same model (configs/multi30k_en_de.yaml: d_model 256, 3+3 layers, its own
8k tokenizer per corpus) is trained for N steps of the same batch size on 1 thread on each of the clean
corpus, the noisy one and the cleaned output, one after another, and each is scored with sacreBLEU on
Multi30K val and test_2016_flickr (`seq2seq test`, the config's beam), side by side.

The noise, each kind on its own pairs of the clean corpus (a pair gets one kind at most):
    misaligned       the target of another pair (targets shuffled among these pairs)
    wrong_language   the target replaced by the pair's French side (--wrong): right content, wrong language
    copy             the target replaced by the source
    truncation       the target cut at a word boundary to 20-60% of its characters
    html             a tag around or inside a side, an entity in it, or a boilerplate phrase appended
    number           " (N)" added to the source and " (M)" to the target, M != N
    duplicate        an extra copy of a pair (exact, or differing in case and punctuation), placed after it
The rest is "clean" (Multi30K as published: a few of its own pairs are noisy, and count as clean lost).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import read_gz  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "multi30k"
TRAIN_CONFIG = ROOT / "configs" / "multi30k_en_de.yaml"
EVAL_SPLITS = ("val", "test_2016_flickr")
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
KINDS = ("misaligned", "wrong_language", "copy", "truncation", "html", "number", "duplicate")
BOILERPLATE = ("Click here to read more.", "This website uses cookies.", "All rights reserved.",
               "Hier klicken", "Alle Rechte vorbehalten.")


def truncate(text: str, rng: random.Random) -> str:
    cut = int(len(text) * rng.uniform(0.2, 0.6))
    space = text.rfind(" ", 0, cut + 1)
    return text[:space if space > 0 else max(cut, 1)].rstrip(" ,;:")


def html_noise(src: str, tgt: str, rng: random.Random) -> tuple[str, str]:
    kind = rng.randrange(3)
    side = rng.randrange(2)
    pair = [src, tgt]
    if kind == 0:
        tag = rng.choice(["p", "b", "div", "span", "a href=\"/x\""])
        words = pair[side].split(" ")
        at = rng.randrange(len(words))
        words[at] = f"<{tag}>{words[at]}</{tag.split()[0]}>" if rng.random() < 0.5 else words[at] + "<br/>"
        pair[side] = " ".join(words)
    elif kind == 1:
        pair[side] = pair[side].replace(" ", rng.choice(["&nbsp;", " &amp; ", " &#39;", "&#160;"]), 1)
    else:
        pair[side] = f"{pair[side]} {rng.choice(BOILERPLATE)}"
    return pair[0], pair[1]


def near_copy(text: str, rng: random.Random) -> str:
    text = text.lower() if rng.random() < 0.5 else text.upper()
    return text.rstrip(".") + rng.choice(["", " .", "!", " ..."])


def noisy_corpus(src: list[str], tgt: list[str], wrong: list[str], rate: float, seed: int
                 ) -> list[tuple[str, str, str]]:
    """(src, tgt, kind) rows: the clean corpus with `rate` of its pairs (per kind) made noisy, and
    duplicates inserted after their originals."""
    rng = random.Random(seed)
    n = len(src)
    order = list(range(n))
    rng.shuffle(order)
    per_kind = int(rate * n)
    rows = [(s, t, "clean") for s, t in zip(src, tgt)]
    chosen = {kind: order[k * per_kind:(k + 1) * per_kind] for k, kind in enumerate(KINDS[:-1])}
    targets = [tgt[i] for i in chosen["misaligned"]]
    rng.shuffle(targets)
    for i, t in zip(chosen["misaligned"], targets):
        rows[i] = (src[i], t, "misaligned" if t != tgt[i] else "clean")
    for i in chosen["wrong_language"]:
        rows[i] = (src[i], wrong[i], "wrong_language")
    for i in chosen["copy"]:
        rows[i] = (src[i], src[i], "copy")
    for i in chosen["truncation"]:
        rows[i] = (src[i], truncate(tgt[i], rng), "truncation")
    for i in chosen["html"]:
        rows[i] = (*html_noise(src[i], tgt[i], rng), "html")
    for i in chosen["number"]:
        a = rng.randrange(2, 2000)
        b = rng.choice([x for x in (a + 1, a * 10, a - 1, rng.randrange(2, 2000)) if x != a])
        rows[i] = (f"{src[i]} ({a})", f"{tgt[i]} ({b})", "number")
    clean = [i for i in order[len(KINDS[:-1]) * per_kind:]]
    inserts: dict[int, list[tuple[str, str, str]]] = {}
    for i in rng.sample(clean, per_kind):
        s, t = src[i], tgt[i]
        if rng.random() < 0.5:
            s, t = near_copy(s, rng), near_copy(t, rng)
        inserts.setdefault(rng.randrange(i, n), []).append((s, t, "duplicate"))
    out = []
    for i, row in enumerate(rows):
        out.append(row)
        out.extend(inserts.get(i, []))
    return out


def run_clean(command: list) -> tuple[float, float, float]:
    """Run `seq2seq clean`: (wall seconds, CPU seconds of it and its workers, the largest process's peak
    RSS in MB)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"seq2seq clean failed:\n{done.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return seconds, cpu, after.ru_maxrss / 1024


def speed_run(rows: list[tuple[str, str, str]], pairs: int, args: argparse.Namespace,
              first: tuple[int, float, float]) -> None:
    """The noisy corpus repeated to `pairs` pairs (the repeats are duplicates, but judged by every other
    filter first, as new pairs are), cleaned once for its speed and memory; the cost of a pair is the
    difference to the `first` run (pairs, wall s, CPU s), start-up left out."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        with open(d / "in.src", "w", encoding="utf-8") as fs, open(d / "in.tgt", "w", encoding="utf-8") as ft:
            for i in range(pairs):
                s, t, _ = rows[i % len(rows)]
                fs.write(s + "\n")
                ft.write(t + "\n")
        seconds, cpu, peak_mb = run_clean(clean_command(d, args, report=False))
    n0, wall0, cpu0 = first
    wall_us, cpu_us = 1e6 * (seconds - wall0) / (pairs - n0), 1e6 * (cpu - cpu0) / (pairs - n0)
    fixed = max(0.0, wall0 - n0 * wall_us / 1e6)  # start-up, learning from the sample
    print(f"\nspeed: {pairs:,} pairs in {seconds:.1f} s wall, {cpu:.1f} CPU s; largest process's peak RSS "
          f"{peak_mb:,.0f} MB. Beyond the first run's pairs: {wall_us:.0f} us wall and {cpu_us:.0f} CPU us a pair: "
          f"1M pairs in {fixed + wall_us:.0f} s at this wall rate, in {fixed + cpu_us / args.workers:.0f} s on "
          f"{args.workers} idle cores (CPU time / workers)")


def clean_command(d: Path, args: argparse.Namespace, report: bool = True) -> list:
    command = [sys.executable, "-m", "seq2seq", "clean", "--src", d / "in.src", "--tgt", d / "in.tgt",
               "--src-lang", args.src, "--tgt-lang", args.tgt, "--out-src", d / "out.src", "--out-tgt",
               d / "out.tgt", "--workers", str(args.workers), "--no-progress"]
    if report:
        command += ["--removed", d / "removed.jsonl", "--report", d / "report.json"]
    if args.config:
        command += ["--config", args.config]
    return command


def run_seq2seq(command: list, what: str, timeout: float | None = None) -> str:
    """`python -m seq2seq COMMAND` on one thread; its stdout, or exit naming `what` with its stderr's end."""
    env = {**os.environ, **ONE_THREAD}
    done = subprocess.run([sys.executable, "-m", "seq2seq", *map(str, command)], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=timeout)
    if done.returncode:
        sys.exit(f"{what} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def train_config(src: Path, tgt: Path, out: Path, args: argparse.Namespace) -> Path:
    """The YAML of one training run: --train-config on (src, tgt), validated on Multi30K val at the end
    only (loss: no decoding inside the run), --train-steps steps on one thread, no time budget, then
    the --train-set overrides (SECTION.KEY=VALUE, the value read as YAML)."""
    cfg = yaml.safe_load(Path(args.train_config).read_text(encoding="utf-8"))
    cfg["data"].update(train_src=str(src), train_tgt=str(tgt),
                       valid_src=str(args.data_dir / f"val.{args.src}.gz"),
                       valid_tgt=str(args.data_dir / f"val.{args.tgt}.gz"))
    cfg["training"].update(output_dir=str(out / "model"), max_steps=args.train_steps, max_time_minutes=None,
                           threads=1, valid_every=args.train_steps, checkpoint_every=None, valid_bleu=False,
                           best_metric="loss", cooldown_patience=None, device="cpu")
    for item in args.train_set:
        key, _, value = item.partition("=")
        section, _, name = key.partition(".")
        if not name or not _:
            sys.exit(f"--train-set {item!r}: expected SECTION.KEY=VALUE")
        cfg.setdefault(section, {})[name] = yaml.safe_load(value)
    path = out / "config.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def train_and_score(name: str, src: Path, tgt: Path, work: Path, args: argparse.Namespace) -> dict:
    """Train on (src, tgt) as `train_config` says, then score the model on EVAL_SPLITS: {"minutes":
    training wall minutes, split: {"score", "signature"}} (BLEU)."""
    out = work / name
    out.mkdir()
    start = time.perf_counter()
    run_seq2seq(["train", train_config(src, tgt, out, args)], f"training on the {name} corpus")
    result: dict = {"minutes": (time.perf_counter() - start) / 60}
    for split in EVAL_SPLITS:
        sources, refs = (args.data_dir / f"{split}.{lang}.gz" for lang in (args.src, args.tgt))
        if args.eval_limit:
            sources, refs = (write_lines(out / f"{split}.{lang}", read_gz(path, args.eval_limit))
                             for lang, path in ((args.src, sources), (args.tgt, refs)))
        scores = run_seq2seq(["test", out / "model", "--src", sources, "--ref", refs, "--metrics", "bleu", "--json",
                              "--no-progress", "-o", out / f"{split}.hyp"], f"scoring the {name} model on {split}")
        result[split] = json.loads(scores)["bleu"]
    print(f"  {name}: {result['minutes']:.1f} training minutes, BLEU " +
          ", ".join(f"{split} {result[split]['score']:.2f}" for split in EVAL_SPLITS), flush=True)
    return result


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def compare_training(src: list[str], tgt: list[str], d: Path, args: argparse.Namespace) -> None:
    """BLEU of the same model trained the same steps on the clean corpus (src, tgt: before the noise), the
    noisy one (in.src/in.tgt of `d`) and the cleaned one (out.src/out.tgt)."""
    corpora = {"clean": (write_lines(d / "clean.src", src), write_lines(d / "clean.tgt", tgt)),
               "noisy": (d / "in.src", d / "in.tgt"), "cleaned": (d / "out.src", d / "out.tgt")}
    pairs = {name: sum(1 for _ in open(s, encoding="utf-8")) for name, (s, _) in corpora.items()}
    print(f"\ntraining {args.train_config} for {args.train_steps} steps on each corpus, 1 thread, one after another:", flush=True)
    results = {name: train_and_score(name, s, t, d, args) for name, (s, t) in corpora.items()}
    signature = results["clean"][EVAL_SPLITS[0]]["signature"]
    print(f"\n{'corpus':<9} {'pairs':>8} {'minutes':>8} " + " ".join(f"{split:>17}" for split in EVAL_SPLITS))
    for name, r in results.items():
        print(f"{name:<9} {pairs[name]:>8,} {r['minutes']:>8.1f} " +
              " ".join(f"{r[split]['score']:>17.2f}" for split in EVAL_SPLITS))
    for a, b in (("cleaned", "clean"), ("cleaned", "noisy"), ("noisy", "clean")):
        print(f"{a + ' - ' + b:<18} {'':>8} " +
              " ".join(f"{results[a][split]['score'] - results[b][split]['score']:>+17.2f}" for split in EVAL_SPLITS))
    print(f"BLEU: sacreBLEU {signature}")


def compare_langid(data_dir: Path) -> None:
    """Accuracy and speed of py3langid and lingua-language-detector (where installed) on Multi30K val,
    all sentences and the short ones (<= 6 words)."""
    from py3langid import langid

    data = {lang: read_gz(data_dir / f"val.{lang}.gz") for lang in ("en", "de", "fr")}
    ident = langid.LanguageIdentifier.from_modelpath(langid.MODEL_DIR / langid.MODEL_FILE)
    candidates = [("py3langid, all its languages", lambda s: ident.classify(s)[0])]
    try:
        from lingua import LanguageDetectorBuilder

        def lingua(detector):
            def classify(s):
                found = detector.detect_language_of(s)
                return found.iso_code_639_1.name.lower() if found else None
            return classify
        candidates.append(("lingua, all, low accuracy mode",
                           lingua(LanguageDetectorBuilder.from_all_languages().with_low_accuracy_mode().build())))
        candidates.append(("lingua, all, high accuracy", lingua(LanguageDetectorBuilder.from_all_languages().build())))
    except ImportError:
        print("(lingua-language-detector not installed: pip install lingua-language-detector to compare)")
    for subset, pick in (("all val", lambda s: True), ("<= 6 words", lambda s: len(s.split()) <= 6)):
        sets = {lang: [s for s in lines if pick(s)] for lang, lines in data.items()}
        print(f"\n{subset}: " + ", ".join(f"{lang} {len(v)}" for lang, v in sets.items()))
        print(f"{'identifier':<34} {'en':>7} {'de':>7} {'fr':>7} {'sent/s':>9}")
        for name, classify in candidates:
            start, n, acc = time.perf_counter(), 0, {}
            for lang, lines in sets.items():
                acc[lang] = sum(classify(s) == lang for s in lines) / max(1, len(lines))
                n += len(lines)
            rate = n / (time.perf_counter() - start)
            print(f"{name:<34} " + " ".join(f"{100 * acc[lang]:6.1f}%" for lang in sets) + f" {rate:9,.0f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data-dir", type=Path, default=DATA)
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--wrong", default="fr", help="the language whose side stands in as a wrong target")
    p.add_argument("--rate", type=float, default=0.03, help="share of the corpus made noisy, per kind")
    p.add_argument("--limit", type=int, default=None, help="only the first N pairs of train")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--config", default=None, help="a YAML file with a clean: section, passed to seq2seq clean")
    p.add_argument("--speed-pairs", type=int, default=0,
                   help="then time a run on the noisy corpus repeated to this many pairs (e.g. 300000)")
    p.add_argument("--compare-langid", action="store_true")
    p.add_argument("--train-steps", type=int, default=0,
                   help="then train the same model N steps on the clean, noisy and cleaned corpora and print BLEU")
    p.add_argument("--train-config", type=Path, default=TRAIN_CONFIG, help="the training config of --train-steps")
    p.add_argument("--train-set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a value of --train-config (repeatable), e.g. model.layers=1")
    p.add_argument("--eval-limit", type=int, default=None, help="score only the first N pairs of each split")
    args = p.parse_args()
    if args.compare_langid:
        compare_langid(args.data_dir)
        return
    src, tgt, wrong = (read_gz(args.data_dir / f"train.{lang}.gz", args.limit) for lang in
                       (args.src, args.tgt, args.wrong))
    rows = noisy_corpus(src, tgt, wrong, args.rate, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "in.src").write_text("".join(s + "\n" for s, _, _ in rows), encoding="utf-8")
        (d / "in.tgt").write_text("".join(t + "\n" for _, t, _ in rows), encoding="utf-8")
        seconds, cpu, peak_mb = run_clean(clean_command(d, args))
        removed = [json.loads(line) for line in (d / "removed.jsonl").read_text(encoding="utf-8").splitlines()]
        report = json.loads((d / "report.json").read_text(encoding="utf-8"))
        print_tables(rows, removed, report, len(src), seconds, cpu, peak_mb, args)
        if args.speed_pairs:
            speed_run(rows, args.speed_pairs, args, (len(rows), seconds, cpu))
        if args.train_steps:
            compare_training(src, tgt, d, args)


def print_tables(rows: list[tuple[str, str, str]], removed: list[dict], report: dict, n_clean: int, seconds: float,
                 cpu: float, peak_mb: float, args: argparse.Namespace) -> None:
    """Each noise kind's recall, each filter's precision, and the speed of the run."""
    kind_of = [kind for _, _, kind in rows]
    injected = Counter(kind_of)
    caught: Counter[str] = Counter()
    by_filter: dict[str, Counter[str]] = {}
    for r in removed:
        kind = kind_of[r["line"] - 1]
        caught[kind] += 1
        by_filter.setdefault(r["filter"], Counter())[kind] += 1
    print(f"Multi30K train {args.src}-{args.tgt}: {n_clean:,} clean pairs, {args.rate:.0%} of each noise kind, "
          f"{len(rows):,} pairs in all; seq2seq clean --workers {args.workers}")
    print(f"\n{'noise kind':<16} {'injected':>9} {'removed':>9} {'recall':>8}   removed by")
    for kind in (*KINDS, "clean"):
        n = injected[kind]
        filters = ", ".join(f"{f} {c[kind]}" for f, c in sorted(by_filter.items(), key=lambda x: -x[1][kind])
                            if c[kind])
        label = "clean (lost)" if kind == "clean" else kind
        print(f"{label:<16} {n:>9,} {caught[kind]:>9,} {100 * caught[kind] / max(1, n):7.2f}%   {filters}")
    noise = sum(n for k, n in injected.items() if k != "clean")
    print(f"{'all noise':<16} {noise:>9,} {sum(caught.values()) - caught['clean']:>9,} "
          f"{100 * (sum(caught.values()) - caught['clean']) / max(1, noise):7.2f}%")
    print(f"\n{'filter':<12} {'removed':>9} {'precision':>10}  (share of its removals that are injected noise)")
    for f in report["filters"]:
        c = by_filter.get(f["name"], Counter())
        total = sum(c.values())
        precision = f"{100 * (total - c['clean']) / total:9.2f}%" if total else f"{'-':>10}"
        print(f"{f['name']:<12} {total:>9,} {precision}")
    print(f"\n{len(rows):,} pairs in {seconds:.1f} s wall, start-up included ({len(rows) / seconds:,.0f} pairs/s), "
          f"{cpu:.1f} CPU s; largest process's peak RSS {peak_mb:,.0f} MB", flush=True)


if __name__ == "__main__":
    main()
