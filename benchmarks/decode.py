"""Decoding speed: seq2seq's search against Hugging Face `generate`, and inference precisions.

    pip install -e ".[bench]"            # transformers, for the comparison only
    python benchmarks/decode.py                         # 1000 sentences, 2 threads, 3 repeats
    python benchmarks/decode.py --limit 200 --repeats 1 # a quick check
    python benchmarks/decode.py --model-dir runs/m30k/model  # + fp32/bf16/int8 on a trained model
    python benchmarks/decode.py --limit 64 --profile beam5   # where the time of one batch goes

Part 1, equal work. Both toolkits get a randomly initialised encoder-decoder of the same sizes
(d_model 256, 3+3 layers, 4 heads, FFN 1024, a shared 8000-piece vocabulary, tied output
projection, sinusoidal positions; ours pre-norm, Marian post-norm) and identical input ids: the
1000 sentences of Multi30K test_2016_flickr.en, encoded with one joint SentencePiece model trained
on the Multi30K training set (cached), sorted by length and cut into batches of 32. Random
weights never choose to stop, so output lengths are forced: every sentence of a batch gets
exactly L new tokens (L = the batch's longest source, EOS included, or --new-tokens), both sides
run exactly L decoder steps (ours: min_len = max_len = L - 1 plus the final EOS; HF:
min_new_tokens = max_new_tokens = L). Ours runs as `Translator` runs it at fp32 on CPU, with the
decoder's weights pre-packed for MKL (`seq2seq.accel.packed`; `--no-pack` for the plain model). Greedy
and beam 5, fp32, torch.inference_mode, `--threads`
intra-op threads. Runs are interleaved (ours, HF, ours, HF, ...) and the median of `--repeats`
is reported as sentences/s and generated tokens/s (sentences x L / seconds) with the ratio
ours/HF. Target: ratio >= 1.5 at greedy and at beam 5.

Part 2, natural lengths (`--model-dir`): a trained model directory decodes the same sentences
through `Translator` at fp32, bf16 (autocast) and int8 (dynamic quantization), beam 5 and greedy;
each precision's speed-up over fp32 and its BLEU against test_2016_flickr.de (the change must stay
within 0.3 BLEU).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import DATA, SIZES, build_hf, build_ours, machine_info, read_gz, tokenizer  # noqa: E402
from seq2seq.data.batching import pad_sequences  # noqa: E402
from seq2seq.accel.packed import mkl_packing_available, pack_decoder  # noqa: E402
from seq2seq.config.search import SearchConfig  # noqa: E402
from seq2seq.inference.search import search  # noqa: E402
from seq2seq.text.tokenizer import BOS_ID, EOS_ID, PAD_ID  # noqa: E402

MODES = (("greedy", 1), ("beam5", 5))


def make_batches(ids: list[list[int]], size: int) -> list[list[int]]:
    """Indices sorted by length (stable), cut into batches of `size`."""
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    return [order[i : i + size] for i in range(0, len(order), size)]


class Workload:
    """Padded input batches and their forced numbers of new tokens."""

    def __init__(self, ids: list[list[int]], batch_size: int, new_tokens: int | None) -> None:
        self.batches = []
        for batch in make_batches(ids, batch_size):
            seqs = [ids[i] + [EOS_ID] for i in batch]
            src = pad_sequences(seqs, PAD_ID)
            steps = new_tokens or src.size(1)
            self.batches.append((src, src.ne(PAD_ID).long(), steps))
        self.sentences = sum(src.size(0) for src, _, _ in self.batches)
        self.tokens = sum(src.size(0) * steps for src, _, steps in self.batches)


def ours_model(args) -> torch.nn.Module:
    """Our model of the benchmark sizes, as `Translator` runs it at fp32 on CPU (unless --no-pack)."""
    model = build_ours(SIZES["vocab"])
    if not args.no_pack:
        model = pack_decoder(model, inplace=True)
    print(f"seq2seq decoder weights pre-packed for MKL: {not args.no_pack and mkl_packing_available()}")
    return model


def run_ours(model, work: Workload, beam: int, check: bool = False) -> float:
    start = time.perf_counter()
    for src, _, steps in work.batches:
        cfg = SearchConfig(strategy="beam" if beam > 1 else "greedy", beam=beam, nbest=1, lenpen=1.0,
                           min_len=steps - 1, max_len=steps - 1, max_len_a=0.0, max_len_b=steps - 1)
        with torch.inference_mode():
            hyps = search(model, src, cfg)
        if check:
            assert all(len(h[0].tokens) + 1 == steps for h in hyps), "forced length not respected (ours)"
    return time.perf_counter() - start


def run_hf(model, work: Workload, beam: int, check: bool = False) -> float:
    from transformers import GenerationConfig

    start = time.perf_counter()
    for src, mask, steps in work.batches:
        gen = GenerationConfig(
            num_beams=beam, do_sample=False, min_new_tokens=steps, max_new_tokens=steps, num_return_sequences=1,
            use_cache=True, decoder_start_token_id=BOS_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID,
            pad_token_id=PAD_ID, **({"early_stopping": True, "length_penalty": 1.0} if beam > 1 else {}),
        )
        with torch.inference_mode():
            out = model.generate(input_ids=src, attention_mask=mask, generation_config=gen)
        if check:
            assert out.size(1) == steps + 1, f"forced length not respected (HF): {out.size(1)} != {steps + 1}"
    return time.perf_counter() - start


def equal_work(args, ids: list[list[int]]) -> None:
    import transformers

    transformers.logging.set_verbosity_error()
    ours, hf = ours_model(args), build_hf(SIZES["vocab"])
    n_ours, n_hf = sum(p.numel() for p in ours.parameters()), sum(p.numel() for p in hf.parameters())
    print(f"parameters: seq2seq {n_ours:,}, transformers MarianMTModel {n_hf:,} "
          f"(HF attention: {hf.config._attn_implementation})")
    work = Workload(ids, args.batch_size, args.new_tokens)
    print(f"{work.sentences} sentences in {len(work.batches)} batches of <= {args.batch_size}, "
          f"{work.tokens:,} forced new tokens per run (mean {work.tokens / work.sentences:.1f} per sentence)\n")
    warm = Workload(ids[: args.batch_size], args.batch_size, 8)
    rows = []
    for mode, beam in MODES:
        run_ours(ours, warm, beam, check=True)
        run_hf(hf, warm, beam, check=True)
        times: dict[str, list[float]] = {"seq2seq": [], "transformers": []}
        for r in range(args.repeats):
            times["seq2seq"].append(run_ours(ours, work, beam, check=r == 0))
            times["transformers"].append(run_hf(hf, work, beam, check=r == 0))
        med = {k: statistics.median(v) for k, v in times.items()}
        for name in ("seq2seq", "transformers"):
            rows.append((mode, name, work.sentences / med[name], work.tokens / med[name], med[name], min(times[name])))
        ratio = med["transformers"] / med["seq2seq"]
        rows.append((mode, "ratio ours/HF", None, ratio, None, None))
        print(f"  {mode}: seq2seq {med['seq2seq']:.2f}s, transformers {med['transformers']:.2f}s (median of {args.repeats})",
              flush=True)
    print(f"\n{'mode':<8} {'system':<14} {'sent/s':>9} {'tokens/s':>10} {'median s':>9} {'best s':>8}")
    for mode, name, sps, tps, med, best in rows:
        if sps is None:
            verdict = "ok" if tps >= 1.5 else "below the 1.5x target"
            print(f"{mode:<8} {name:<14} {'':>9} {tps:>9.2f}x  ({verdict})")
        else:
            print(f"{mode:<8} {name:<14} {sps:>9.1f} {tps:>10.0f} {med:>9.2f} {best:>8.2f}")


def natural_lengths(args, sources: list[str], refs: list[str]) -> None:
    from seq2seq.text.metrics import score
    from seq2seq.inference.translator import Translator

    print(f"\ntrained model {args.model_dir}: {len(sources)} sentences at natural lengths, batches of {args.batch_size}")
    translators = {p: Translator.load(args.model_dir, device="cpu", precision=p) for p in ("fp32", "bf16", "int8")}
    tok = translators["fp32"].tokenizers.src
    batches = make_batches(tok.encode(sources), args.batch_size)
    results = []
    for mode, beam in MODES:
        options = {"greedy": True} if beam == 1 else {"beam": beam}
        for t in translators.values():  # warm-up
            t.translate([sources[0]], **options)
        times: dict[str, list[float]] = {p: [] for p in translators}
        outputs: dict[str, list] = {}
        for _ in range(args.repeats):
            for p, t in translators.items():  # interleaved
                out: list = [None] * len(sources)
                start = time.perf_counter()
                for batch in batches:
                    for i, r in zip(batch, t.translate_nbest([sources[i] for i in batch], batch_tokens=10**9, **options)):
                        out[i] = r
                times[p].append(time.perf_counter() - start)
                outputs[p] = out
        for p in translators:
            hyps = [r[0].text if r else "" for r in outputs[p]]
            tokens = sum(len(r[0].pieces) + 1 for r in outputs[p] if r)
            bleu = score(hyps, [refs], ["bleu"])["bleu"]["score"]
            results.append((mode, p, statistics.median(times[p]), tokens, bleu))
    print(f"\n{'mode':<8} {'precision':<9} {'sent/s':>8} {'tokens/s':>9} {'speed-up':>9} {'BLEU':>7} {'dBLEU':>7}")
    base = {m: (t, b) for m, p, t, _, b in results if p == "fp32"}
    for mode, p, t, tokens, bleu in results:
        t0, b0 = base[mode]
        flag = "" if abs(bleu - b0) <= 0.3 else "  (> 0.3 BLEU)"
        print(f"{mode:<8} {p:<9} {len(sources) / t:>8.1f} {tokens / t:>9.0f} {t0 / t:>8.2f}x {bleu:>7.2f} {bleu - b0:>+7.2f}{flag}")
    sig = score(["a"], [["a"]], ["bleu"])["bleu"]["signature"]
    print(f"BLEU signature: {sig}")


def profile(args, ids: list[list[int]]) -> None:
    """torch.profiler over one batch of ours (forced lengths), top operators by self CPU time."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    model = ours_model(args)
    work = Workload(ids[: args.batch_size], args.batch_size, args.new_tokens)
    beam = dict(MODES)[args.profile]
    run_ours(model, work, beam)
    with torch_profile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
        elapsed = run_ours(model, work, beam)
    print(f"\nprofile: one {args.profile} batch of {work.sentences} sentences, {work.batches[0][2]} steps, {elapsed:.3f}s")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=None, help="Only the first N test sentences.")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads.")
    parser.add_argument("--repeats", type=int, default=3, help="Timed runs per system and mode (median reported).")
    parser.add_argument("--batch-size", type=int, default=32, help="Sentences per batch.")
    parser.add_argument("--new-tokens", type=int, default=None,
                        help="Forced new tokens per sentence (default: per batch, its longest source incl. EOS).")
    parser.add_argument("--model-dir", default=None, help="Also run a trained model: fp32 vs bf16 vs int8, BLEU.")
    parser.add_argument("--skip-hf", action="store_true", help="Skip the equal-work comparison with transformers.")
    parser.add_argument("--no-pack", action="store_true", help="Run our decoder without MKL weight pre-packing.")
    parser.add_argument("--profile", choices=[m for m, _ in MODES], default=None,
                        help="Profile one batch of ours in this mode and exit.")
    parser.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "seq2seq-bench"),
                        help="Where the benchmark's SentencePiece model is cached.")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    print(machine_info(args.threads))
    sources = read_gz(DATA / "test_2016_flickr.en.gz", args.limit)
    tok = tokenizer(Path(args.cache_dir))
    ids = tok.encode(sources)
    if args.profile:
        profile(args, ids)
        return
    if not args.skip_hf:
        try:
            import transformers  # noqa: F401
        except ImportError:
            sys.exit('transformers is not installed: pip install -e ".[bench]" (or pass --skip-hf)')
        equal_work(args, ids)
    if args.model_dir:
        natural_lengths(args, sources, read_gz(DATA / "test_2016_flickr.de.gz", args.limit))


if __name__ == "__main__":
    main()
