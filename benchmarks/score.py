#!/usr/bin/env python
"""Forced-decoding throughput (`seq2seq score`) beside greedy search (`translate --greedy`) on the same pairs.

    python benchmarks/score.py [--model-dir runs/quickstart/model] [--src F] [--limit 1000] [--threads 1]

The pairs: the first `--limit` sources of `--src` (default: the quickstart's held-out test.en beside
its model directory) and the model's own greedy translations of them, so that both sides handle the
same target tokens: the search generates them one step at a time, the scorer reads them in one
teacher-forced decoder pass. Throughput is target tokens (pieces + EOS) per second, through the
Python API with the same `--batch-tokens` (no process start, no model load), each the faster of
`--repeats` runs after a warm-up. Also printed: how far the forced scores are from the logprobs the
search reported for the same outputs (the two must agree), and the throughput on the references
(`--tgt`, default test.de) when there are any. Target (issue 72): score >= 0.9x greedy.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Any, Callable

from common import ROOT, machine_info

from seq2seq.inference.scoring import score_ids, score_pairs
from seq2seq.inference.translator import Translator
from seq2seq.text.lines import read_input_lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model-dir", type=Path, default=ROOT / "runs" / "quickstart" / "model")
    p.add_argument("--src", type=Path, default=None, help="default: MODEL_DIR/../data/test.en")
    p.add_argument("--tgt", type=Path, default=None, help="references (default: MODEL_DIR/../data/test.de, if there)")
    p.add_argument("--limit", type=int, default=1000)
    p.add_argument("--batch-tokens", type=int, nargs="+", default=[4000], help="one table for each")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    import torch

    torch.set_num_threads(args.threads)
    print(machine_info(args.threads))
    data = args.model_dir.parent / "data"
    src_path = args.src or data / "test.en"
    tgt_path = args.tgt or (data / "test.de" if args.src is None and (data / "test.de").is_file() else None)
    srcs = read_input_lines(str(src_path))[: args.limit]
    refs = read_input_lines(str(tgt_path))[: args.limit] if tgt_path is not None else None
    translator = Translator.load(args.model_dir, device=args.device)

    for batch_tokens in args.batch_tokens:
        compare(translator, srcs, refs, src_path, tgt_path, batch_tokens, args.repeats, args.model_dir)


def timed(run: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """(the fastest of `repeats` runs in seconds, the result), after a warm-up run."""
    result = run()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best, result


def compare(translator: Translator, srcs: list[str], refs: list[str] | None, src_path: Path, tgt_path: Path | None,
            batch_tokens: int, repeats: int, model_dir: Path) -> None:
    """One table: greedy search and forced decoding of its outputs (ids, texts) and of the references."""
    t_greedy, nbest = timed(lambda: translator.translate_nbest(srcs, batch_tokens=batch_tokens, greedy=True), repeats)
    hyps = [n[0] for n in nbest if n]
    kept = [s for s, n in zip(srcs, nbest) if n]
    ids = [h.token_ids for h in hyps]
    tokens = sum(len(h.token_logprobs) for h in hyps)
    t_score, scores = timed(lambda: score_ids(translator, kept, ids, batch_tokens), repeats)
    gap = max((abs(s.logprob - h.logprob) for s, h in zip(scores, hyps)), default=0.0)
    texts = [h.text for h in hyps]
    t_text, _ = timed(lambda: score_pairs(translator, kept, texts, batch_tokens), repeats)

    print(f"\n{model_dir}: {len(kept)} pairs from {src_path}, {tokens} target tokens (the greedy outputs + EOS); "
          f"batch_tokens {batch_tokens}; the faster of {repeats} runs")
    rows = [("translate --greedy (search)", t_greedy, tokens),
            ("score (the outputs' token ids)", t_score, tokens),
            ("score (the outputs' texts, re-tokenized)", t_text, tokens)]
    if refs is not None and tgt_path is not None:
        ref_pairs = [(s, r) for s, r in zip(srcs, refs) if s.strip()]
        t_ref, ref_scores = timed(lambda: score_pairs(translator, [s for s, _ in ref_pairs],
                                                      [r for _, r in ref_pairs], batch_tokens), repeats)
        rows.append((f"score (the references, {tgt_path.name})", t_ref, sum(s.n_tokens for s in ref_scores)))
    print(f"{'':44} {'seconds':>8} {'tokens/s':>10} {'vs greedy':>10}")
    base = tokens / t_greedy
    for name, seconds, n in rows:
        print(f"{name:44} {seconds:8.3f} {n / seconds:10,.0f} {n / seconds / base:9.1f}x")
    print(f"largest |forced score - search logprob| over the greedy outputs: {gap:.2e} (must be < 1e-4)")


if __name__ == "__main__":
    main()
