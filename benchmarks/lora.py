"""LoRA: our `LoRALinear` against peft, and both against full fine-tuning (issue 73, part 2).

    python benchmarks/lora.py                      # the benchmarks' model (d_model 256, 3+3 layers, 8000 words)
    python benchmarks/lora.py --preset nllb600m --device cuda --steps 10   # NLLB-200-600M's sizes, random weights
    python benchmarks/lora.py --steps 3 --batch 4 --length 8 --preset tiny   # the smoke test
    python benchmarks/lora.py --modes full,full+ckpt,ours,ours+ckpt          # with gradient checkpointing
    python benchmarks/lora.py --modes serve --serve-tables                  # adapters with their own embedding tables

Each of full fine-tuning, our LoRA and peft's LoRA (a mode with "+ckpt": with gradient checkpointing,
`training.gradient_checkpointing`) (`pip install peft`; skipped without it) trains in a
process of its own on the same random batches (AdamW, fp32), and prints:

  trainable     parameters that train, and their share of the model
  steps/s       after 2 warm-up steps
  peak MB       CPU: the C heap in use (glibc mallinfo2: torch's CPU tensors), the most of its values after
                the forward pass, the backward pass and the optimizer step; CUDA: max_memory_allocated.
                training MB: that peak less the heap once the model was built (the training's own memory:
                gradients, optimizer moments, activations). The process's peak RSS beside them (it also
                holds what the allocator keeps after a free)
  layers        adapted layers whose update got a gradient, of those adapted (peft: cross-attention's
                q/k/v are computed from slices of the fused weight, which peft's layer does not see)
  merged        max |logits(merged) - logits(unmerged)| after training (the B are no longer zero)

serve: one engine (Translator, CPU fp32) over a base of the preset's sizes (a 2000-piece Multi30K tokenizer,
random weights) with 3 random rank-r adapters attached: the resident memory they add against their
tensors' size, and each adapter's 16 outputs (beam 2) against its merged model's.

Also the parameter counts of the NLLB-200-600M-sized model with rank-16 LoRA (built on the meta device).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import resource
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from common import ROOT, machine_info  # noqa: F401  (ROOT: seq2seq importable)

from seq2seq.adapters.lora import add_lora, lora_tensors, merge_lora
from seq2seq.config import ModelConfig
from seq2seq.config.adapter_section import AdapterConfig
from seq2seq.model.transformer import Seq2SeqTransformer

PRESETS = {
    "tiny": dict(d_model=64, heads=2, ffn_dim=128, layers=1, vocab=500),
    "bench": dict(d_model=256, heads=4, ffn_dim=1024, layers=3, vocab=8000),  # benchmarks/common.py SIZES
    "medium": dict(d_model=512, heads=8, ffn_dim=2048, layers=6, vocab=32000),  # weights outweigh a small batch
    "nllb600m": dict(d_model=1024, heads=16, ffn_dim=4096, layers=12, vocab=256206),  # NLLB-200-distilled-600M
}
TARGETS = ["in_proj", "out_proj", "w1", "w2"]


def model_config(preset: str) -> ModelConfig:
    s = PRESETS[preset]
    return ModelConfig(src_vocab_size=s["vocab"], tgt_vocab_size=s["vocab"], d_model=s["d_model"], heads=s["heads"],
                       ffn_dim=s["ffn_dim"], layers=s["layers"], dropout=0.1, share_embeddings=True, tie_output=True,
                       max_positions=1024, activation="relu")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]


def heap_mb() -> float:
    """The C heap in use now (MB): glibc's mallinfo2, allocated chunks plus mmapped blocks, where torch's CPU
    tensors live (peak RSS also counts freed memory the allocator keeps; NaN off glibc)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        info = libc.mallinfo2()
    except (OSError, AttributeError):
        return float("nan")
    return (info.uordblks + info.hblkhd) / 2**20


def peft_lora(model: torch.nn.Module, rank: int, alpha: float) -> torch.nn.Module:
    from peft import LoraConfig, inject_adapter_in_model

    for p in model.parameters():
        p.requires_grad_(False)
    return inject_adapter_in_model(LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=TARGETS),
                                   model)


def peft_merge(model: torch.nn.Module) -> None:
    from peft.tuners.lora import LoraLayer

    for m in model.modules():
        if isinstance(m, LoraLayer):
            m.merge()


def child(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = Seq2SeqTransformer(model_config(args.preset)).to(device)
    mode, _, extra = args.mode.partition("+")  # "ours+ckpt": with gradient checkpointing
    model.checkpoint_layers(extra == "ckpt")
    if mode == "ours":
        add_lora(model, AdapterConfig(type="lora", rank=args.rank, alpha=2.0 * args.rank, target_modules=TARGETS))
    elif mode == "peft":
        model = peft_lora(model, args.rank, 2.0 * args.rank)
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    built_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    built_heap, peak_heap = heap_mb(), 0.0
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    optimizer = torch.optim.AdamW(trainable, lr=1e-3)
    vocab = model.cfg.tgt_vocab_size
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(4, vocab, (args.batch, args.length), generator=g),
                torch.randint(4, vocab, (args.batch, args.length + 1), generator=g)) for _ in range(4)]
    model.train()
    times = []
    for step in range(args.steps + 2):
        src, tgt = (t.to(device) for t in batches[step % len(batches)])
        start = time.perf_counter()
        logits = model(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, vocab), tgt[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        peak_heap = max(peak_heap, heap_mb())  # the activations held for the backward pass
        loss.backward()
        peak_heap = max(peak_heap, heap_mb())  # the gradients
        if step == 0:
            graded = {n for n, p in model.named_parameters() if p.grad is not None and bool(p.grad.abs().sum() > 0)}
        optimizer.step()
        peak_heap = max(peak_heap, heap_mb())  # the optimizer's moments
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if step >= 2:
            times.append(time.perf_counter() - start)
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {"mode": args.mode, "trainable": sum(p.numel() for p in trainable), "total": sum(p.numel() for p in params),
              "steps_per_s": len(times) / sum(times), "peak_rss_mb": peak_rss, "rss_growth_mb": peak_rss - built_rss,
              "peak_heap_mb": peak_heap, "heap_growth_mb": peak_heap - built_heap}
    if device.type == "cuda":
        result["cuda_peak_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    if mode != "full":
        b_names = [n for n, _ in model.named_parameters() if n.endswith(("lora_B", "lora_B.default.weight"))]
        result["layers_adapted"] = len(b_names)
        result["layers_trained"] = sum(n in graded for n in b_names)  # B's gradient is the first to be nonzero
        model.eval()
        src, tgt = (t.to(device) for t in batches[0])
        with torch.no_grad():
            unmerged = model(src, tgt[:, :-1]).float()
            if mode == "ours":
                tensors = {k: v.detach() for k, v in lora_tensors(model).items()}
                merged_model = Seq2SeqTransformer(model.cfg).to(device).eval()
                own = {k: v for k, v in model.state_dict().items() if "lora_" not in k}
                merged_model.load_state_dict(own)
                merge_lora(merged_model, tensors, 2.0)
                merged = merged_model(src, tgt[:, :-1]).float()
            else:
                peft_merge(model)
                merged = model(src, tgt[:, :-1]).float()
        result["merged_max_diff"] = float((merged - unmerged).abs().max())
    return result


def rss_mb() -> float:
    """The process's resident memory now (MB), from /proc (ru_maxrss is the peak)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def serve_memory(args: argparse.Namespace) -> dict:
    """`_serve_memory` in a temporary directory, removed afterwards."""
    import shutil
    import tempfile
    from pathlib import Path

    root = Path(tempfile.mkdtemp(prefix="lora-serve-"))
    try:
        return _serve_memory(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _serve_memory(args: argparse.Namespace, root) -> dict:
    """One engine serving 3 adapters over its base (`seq2seq.adapters.serving`): the resident memory the
    adapters add, against their tensors' size, and each adapter's outputs against its merged model's. With
    --serve-tables each adapter also holds its own embedding tables (`train_embeddings`), perturbed."""

    from common import DATA, read_gz
    from seq2seq.adapters.files import write_adapter
    from seq2seq.adapters.lora import embedding_keys, lora_tensors
    from seq2seq.adapters.serving import attach_adapters, using
    from seq2seq.config import Config, TokenizerConfig
    from seq2seq.inference.translator import Translator
    from seq2seq.storage.model_dir import ModelDir
    from seq2seq.text.tokenizer import PAD_ID, TokenizerPair, train_tokenizer

    torch.set_num_threads(args.threads)
    texts = read_gz(DATA / "train.en.gz", 3000) + read_gz(DATA / "train.de.gz", 3000)
    tok = train_tokenizer(texts, 2000, TokenizerConfig(vocab_size=2000))
    base = ModelDir(root / "base")
    base.path.mkdir()
    s = PRESETS[args.preset]
    cfg = Config(model=ModelConfig(src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size, d_model=s["d_model"],
                                   heads=s["heads"], ffn_dim=s["ffn_dim"], layers=s["layers"], share_embeddings=True,
                                   pad_id=PAD_ID))
    base.write_config(cfg)
    TokenizerPair(tok, tok, joint=True).save(base.path)
    torch.manual_seed(0)
    model = Seq2SeqTransformer(cfg.model)
    base.save_weights(model.state_dict())
    adapter_bytes = 0
    for i in range(3):
        adapted = Seq2SeqTransformer(cfg.model)
        adapted.load_state_dict(model.state_dict())
        lora = AdapterConfig(type="lora", rank=args.rank, alpha=2.0 * args.rank, target_modules=TARGETS,
                             train_embeddings=args.serve_tables)
        add_lora(adapted, lora)
        g = torch.Generator().manual_seed(i)
        tensors = dict(lora_tensors(adapted))
        with torch.no_grad():
            for name, t in tensors.items():
                if name.endswith("lora_B"):
                    t.copy_(torch.randn(t.shape, generator=g) * 0.05)
            for key in embedding_keys(adapted) if args.serve_tables else []:
                table = adapted.get_parameter(key)
                table.add_(torch.randn(table.shape, generator=g) * 0.02)
                tensors[key] = table
        write_adapter(root / f"a{i}", lora, tensors, base.path)
        adapter_bytes += sum(t.numel() * t.element_size() for t in tensors.values())
    del model, adapted
    sentences = read_gz(DATA / "val.en.gz", 16)
    before = rss_mb()
    engine = Translator.load(base.path, device="cpu")
    engine.translate(sentences, beam=2)  # (the packed decoder's weights are packed on first use)
    loaded = rss_mb()
    attach_adapters(engine, {f"a{i}": str(root / f"a{i}") for i in range(3)})
    outputs = {}
    for i in range(3):
        with using(engine, f"a{i}"):
            outputs[i] = engine.translate(sentences, beam=2)
    served = rss_mb()
    equal = all(Translator.load(base.path, device="cpu", adapter=root / f"a{i}").translate(sentences, beam=2)
                == outputs[i] for i in range(3))
    base_bytes = (base.weights_path.stat().st_size)
    return {"mode": "serve", "base_weights_mb": base_bytes / 2**20, "engine_mb": loaded - before,
            "adapters_mb": adapter_bytes / 2**20, "added_mb": served - loaded, "equal_to_merged": equal}


def nllb_counts(rank: int) -> dict:
    """Parameters of the NLLB-600M-sized model, and of its rank-`rank` LoRA, counted on the meta device."""
    with torch.device("meta"):
        model = Seq2SeqTransformer(model_config("nllb600m"))
        total = sum(p.numel() for p in model.parameters())
        add_lora(model, AdapterConfig(type="lora", rank=rank, alpha=2.0 * rank, target_modules=TARGETS))
        lora = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"base": total, "lora": lora}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), default="bench")
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--length", type=int, default=24)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--modes", default="full,ours,peft,serve")
    p.add_argument("--serve-tables", action="store_true",
                   help="serve: adapters with their own embedding tables (training.adapter.train_embeddings)")
    p.add_argument("--mode", help=argparse.SUPPRESS)  # a child process: one mode, a JSON line out
    args = p.parse_args()
    if args.mode:
        print(json.dumps(serve_memory(args) if args.mode == "serve" else child(args)))
        return
    print(machine_info(args.threads))
    s = PRESETS[args.preset]
    print(f"\nmodel {args.preset}: d_model {s['d_model']}, {s['layers']}+{s['layers']} layers, FFN {s['ffn_dim']}, "
          f"{s['vocab']} words (tied); batch {args.batch} x {args.length} tokens, AdamW fp32, {args.steps} steps on "
          f"{args.device}; LoRA rank {args.rank}, alpha {2 * args.rank} on {', '.join(TARGETS)}\n")
    rows = []
    for mode in args.modes.split(","):
        if mode == "peft":
            try:
                import peft  # noqa: F401
            except ImportError:
                print("peft: not installed (pip install peft), skipped")
                continue
        argv = [sys.executable, __file__, "--mode", mode] + [f"--{k}={getattr(args, k)}" for k in
                                                            ("preset", "device", "steps", "batch", "length", "rank",
                                                             "threads")] + ["--serve-tables"] * args.serve_tables
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        rows.append(json.loads(out))
    served = next((r for r in rows if r["mode"] == "serve"), None)
    rows = [r for r in rows if r["mode"] != "serve"]
    full = next((r for r in rows if r["mode"] == "full"), None)
    mem = "cuda_peak_mb" if args.device.startswith("cuda") else "peak_heap_mb"
    print(f"{'':10} {'trainable':>22} {'steps/s':>8} {'peak MB':>9} {'vs full':>8} {'training MB':>12} {'vs full':>8} "
          f"{'peak RSS MB':>12} {'layers trained':>15} {'merged max diff':>16}")
    for r in rows:
        share = f"{r['trainable']:,} ({100 * r['trainable'] / r['total']:.2f}%)"
        rel = f"{100 * r[mem] / full[mem]:.0f}%" if full else "-"
        grown = "cuda_peak_mb" if mem == "cuda_peak_mb" else "heap_growth_mb"
        rel_grown = f"{100 * r[grown] / full[grown]:.0f}%" if full else "-"
        layers = f"{r['layers_trained']}/{r['layers_adapted']}" if "layers_adapted" in r else "all"
        diff = f"{r['merged_max_diff']:.2e}" if "merged_max_diff" in r else "-"
        print(f"{r['mode']:10} {share:>22} {r['steps_per_s']:8.2f} {r[mem]:9.1f} {rel:>8} {r[grown]:12.1f} {rel_grown:>8} "
              f"{r['peak_rss_mb']:12.0f} "
              f"{layers:>15} {diff:>16}")
    if served:
        r = served
        tables = " with their own embedding tables" if args.serve_tables else ""
        print(f"\nserving 3 rank-{args.rank} adapters{tables} on one base (CPU, fp32, the decoder packed): base weights "
              f"{r['base_weights_mb']:.1f} MB, the engine {r['engine_mb']:.1f} MB resident; the adapters' tensors "
              f"{r['adapters_mb']:.1f} MB, resident memory added by attaching and using them {r['added_mb']:.1f} MB"
              f"; served {r['engine_mb'] + r['added_mb']:.1f} MB against base + 3 adapters "
              f"{r['engine_mb'] + r['adapters_mb']:.1f} MB "
              f"(+{100 * (r['added_mb'] - r['adapters_mb']) / (r['engine_mb'] + r['adapters_mb']):.1f}%); "
              f"outputs equal to the merged models': {'yes' if r['equal_to_merged'] else 'NO'}")
    counts = nllb_counts(args.rank)
    print(f"\nNLLB-200-600M-sized model: {counts['base']:,} parameters; rank-{args.rank} LoRA on {', '.join(TARGETS)}: "
          f"{counts['lora']:,} ({100 * counts['lora'] / (counts['base'] + counts['lora']):.2f}% of the adapted model)")


if __name__ == "__main__":
    main()
