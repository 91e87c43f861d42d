"""Training speed: seq2seq's training step against a Hugging Face MarianMTModel of the same sizes.

    pip install -e ".[bench]"                 # transformers, for the comparison only
    python benchmarks/train_speed.py          # 2 threads, 3 interleaved repeats of 12 steps each
    python benchmarks/train_speed.py --steps 6 --repeats 2 --curve-steps 0   # a quick check

What is measured: steady-state throughput in non-pad target tokens per second of a full training
step (forward, label-smoothed loss, backward, AdamW step) on real Multi30K en-de batches of ~3000
target tokens (token-bucketed as in training), after warm-up steps. Systems: ours in fp32, ours with
bf16 autocast (both with the CPU module variants the Trainer swaps in, `seq2seq.accel.cpu`), and MarianMTModel in fp32 (d_model 256, 3+3 layers, 4 heads, FFN 1024, shared 8000
vocabulary, tied embeddings, dropout 0.1 for all). Runs are interleaved (ours fp32, HF, ours bf16,
...) and repeated; the median is reported, with each system's peak resident memory growth and its
achieved GFLOP/s as a fraction of this machine's matmul peak (1024x1024 fp32 and bf16 matmuls,
measured in the same process). Targets on 2 CPU cores: ours fp32 >= 1.15x HF fp32, ours bf16 >= 2x
HF fp32. `--curve-steps N` also trains ours from one initialisation for N steps in fp32 and in bf16
on the same batches and prints how far apart the two loss curves are.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import DATA, SIZES, build_hf, build_ours, machine_info, read_gz, tokenizer  # noqa: E402
from seq2seq.data.batching import TokenBatchSampler, collate_text  # noqa: E402
from seq2seq.accel.cpu import limit_onednn_caches, speed_up_for_cpu_training  # noqa: E402
from seq2seq.training.loss import sequence_loss  # noqa: E402
from seq2seq.text.tokenizer import PAD_ID  # noqa: E402
from seq2seq.accel.device import autocast_context, cpu_bf16_is_native  # noqa: E402


def batches(tok, n: int, max_tokens: int) -> list:
    """The first n token-bucketed batches (shuffled, seed 1) of Multi30K en-de train."""
    src = tok.encode(read_gz(DATA / "train.en.gz"))
    tgt = tok.encode(read_gz(DATA / "train.de.gz"))
    rows = [{"src_ids": s[:126] + [3], "tgt_ids": t[:126], "index": i} for i, (s, t) in enumerate(zip(src, tgt))]
    sampler = TokenBatchSampler([len(r["src_ids"]) for r in rows], [len(r["tgt_ids"]) + 1 for r in rows],
                                max_tokens=max_tokens, shuffle=True, seed=1)
    out = []
    for idx in sampler:
        out.append(collate_text([rows[i] for i in idx]))
        if len(out) == n:
            break
    return out


def step_flops(batch) -> float:
    """Matmul FLOPs of one training step (forward x 3 for forward + backward), both models alike."""
    d, f, v, n_layers = SIZES["d_model"], SIZES["ffn_dim"], SIZES["vocab"], SIZES["layers"]
    b, s = batch.src.shape
    t = batch.tgt_in.size(1)
    src_tok, tgt_tok = b * s, b * t
    enc = src_tok * (2 * 4 * d * d + 2 * 2 * d * f) + b * 2 * 2 * s * s * d
    dec_self = tgt_tok * 2 * 4 * d * d + b * 2 * 2 * t * t * d
    dec_cross = tgt_tok * 2 * 2 * d * d + src_tok * 2 * 2 * d * d + b * 2 * 2 * t * s * d
    dec_ffn = tgt_tok * 2 * 2 * d * f
    output = tgt_tok * 2 * d * v
    return 3.0 * (n_layers * (enc + dec_self + dec_cross + dec_ffn) + output)


def matmul_peak(dtype: torch.dtype, n: int = 1024, reps: int = 20) -> float:
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            a @ b
        best = min(best, (time.perf_counter() - t0) / reps)
    return 2 * n**3 / best / 1e9


class System:
    """One model + optimizer + precision; `step(batch)` runs a full training step."""

    def __init__(self, name: str, kind: str, precision: str) -> None:
        self.name, self.kind, self.precision = name, kind, precision
        if kind == "ours":  # as the Trainer trains it on a CPU: with the CPU module variants (seq2seq.accel.cpu)
            self.model = speed_up_for_cpu_training(build_ours(SIZES["vocab"], dropout=0.1))
        else:
            self.model = build_hf(SIZES["vocab"], dropout=0.1)
        self.model.train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=5e-4, betas=(0.9, 0.98), weight_decay=1e-4)
        self.times: list[float] = []
        self.tokens: list[int] = []
        self.rss_growth = 0.0

    def loss(self, batch) -> torch.Tensor:
        """Label-smoothed (0.1) cross-entropy per target token, the way each library trains: ours with
        the trainer's `sequence_loss`, HF's Marian with F.cross_entropy on its logits."""
        with autocast_context(torch.device("cpu"), self.precision):
            if self.kind == "ours":
                loss = sequence_loss(self.model, batch.src, batch.tgt_in, batch.tgt_out, PAD_ID, smoothing=0.1)
            else:
                logits = self.model(input_ids=batch.src, attention_mask=batch.src.ne(PAD_ID),
                                    decoder_input_ids=batch.tgt_in, decoder_attention_mask=batch.tgt_in.ne(PAD_ID)).logits
                loss = F.cross_entropy(logits.float().flatten(0, 1), batch.tgt_out.flatten(), ignore_index=PAD_ID,
                                       label_smoothing=0.1, reduction="sum")
        return loss / batch.n_tgt_tokens

    def step(self, batch) -> float:
        loss = self.loss(batch)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        return loss.item()


def rss_mb() -> tuple[float, float]:
    """(current, peak) resident set size of this process in MB."""
    cur = peak = 0.0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            cur = int(line.split()[1]) / 1024
        elif line.startswith("VmHWM:"):
            peak = int(line.split()[1]) / 1024
    return cur, peak


def reset_peak_rss() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def timed_run(system: System, work: list, warmup: int) -> None:
    for batch in work[:warmup]:
        system.step(batch)
    reset_peak_rss()
    before, _ = rss_mb()
    t0 = time.perf_counter()
    for batch in work[warmup:]:
        system.step(batch)
    system.times.append(time.perf_counter() - t0)
    system.tokens.append(sum(b.n_tgt_tokens for b in work[warmup:]))
    system.rss_growth = max(system.rss_growth, rss_mb()[1] - before)


def loss_curves(work: list, steps: int) -> None:
    curves = {}
    for precision in ("fp32", "bf16"):
        system = System(f"ours {precision}", "ours", precision)
        torch.manual_seed(123)  # same dropout masks for both
        curves[precision] = [system.step(work[i % len(work)]) for i in range(steps)]
    diffs = [abs(a - b) / a for a, b in zip(curves["fp32"], curves["bf16"])]
    tail = max(1, steps // 5)
    print(f"\nloss curves over {steps} steps (same init, batches and dropout seed):")
    for i in sorted({0, steps // 4, steps // 2, 3 * steps // 4, steps - 1}):
        print(f"  step {i + 1:4d}: fp32 {curves['fp32'][i]:.4f}  bf16 {curves['bf16'][i]:.4f}")
    print(f"  mean |bf16 - fp32| / fp32 over the last {tail} steps: {100 * statistics.mean(diffs[-tail:]):.2f}%")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=12, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-tokens", type=int, default=3200, help="padded tokens per side (~3000 real target tokens)")
    p.add_argument("--curve-steps", type=int, default=60)
    p.add_argument("--skip-hf", action="store_true")
    p.add_argument("--precisions", default="auto",
                   help="ours: comma-separated fp32, bf16; auto: fp32, and bf16 where this CPU's bf16 kernels are "
                        "native (emulated bf16 is ~100x slower under a forced AVX2 ISA)")
    p.add_argument("--cache-dir", default="/tmp/seq2seq-bench")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    limit_onednn_caches()  # as the Trainer does, before the first bf16 matmul (matmul_peak below)
    print(machine_info(args.threads))
    precisions = (["fp32", "bf16"] if cpu_bf16_is_native() else ["fp32"]) if args.precisions == "auto" \
        else args.precisions.split(",")
    if set(precisions) - {"fp32", "bf16"} or "fp32" not in precisions:
        raise SystemExit("--precisions: fp32 and optionally bf16")
    tok = tokenizer(Path(args.cache_dir))
    work = batches(tok, args.warmup + args.steps, args.max_tokens)
    flops = statistics.mean(step_flops(b) for b in work[args.warmup:])
    print(f"batches: {len(work)} of ~{statistics.mean(b.n_tgt_tokens for b in work):.0f} target tokens "
          f"({args.warmup} warm-up + {args.steps} timed), {flops / 1e9:.1f} GFLOP per step")
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    peak = {name: matmul_peak(dtypes[name]) for name in precisions}
    print("matmul peak (1024^3): " + ", ".join(f"{name} {value:.0f} GFLOP/s" for name, value in peak.items()))

    systems = [System(f"ours {name}", "ours", name) for name in precisions]
    if not args.skip_hf:
        systems.insert(1, System("HF Marian fp32", "hf", "fp32"))
    for r in range(args.repeats):
        for system in systems:
            timed_run(system, work, args.warmup)
        print(f"  repeat {r + 1}: " + ", ".join(f"{s.name} {s.tokens[-1] / s.times[-1]:,.0f} tok/s" for s in systems), flush=True)

    print(f"\n{'system':<16} {'tokens/s':>10} {'s/step':>8} {'GFLOP/s':>8} {'% peak':>7} {'peak RSS +MB':>12}")
    rate = {}
    for s in systems:
        t = statistics.median(s.times)
        rate[s.name] = statistics.median(tok_ / t_ for tok_, t_ in zip(s.tokens, s.times))
        gflops = flops * args.steps / t / 1e9
        print(f"{s.name:<16} {rate[s.name]:>10,.0f} {t / args.steps:>8.3f} {gflops:>8.0f} "
              f"{100 * gflops / peak[s.precision]:>6.0f}% {s.rss_growth:>12.0f}")
    if "HF Marian fp32" in rate:
        hf = rate["HF Marian fp32"]
        print(f"\nours fp32 / HF fp32: {rate['ours fp32'] / hf:.2f}x (target >= 1.15x)")
        if "ours bf16" in rate:
            print(f"ours bf16 / HF fp32: {rate['ours bf16'] / hf:.2f}x (target >= 2x)")
    if args.curve_steps and "bf16" in precisions:
        loss_curves(work, args.curve_steps)


if __name__ == "__main__":
    main()
