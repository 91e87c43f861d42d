"""An NLLB-600M-sized model (random weights, built here): `import-hf`'s peak memory, and beam-5
decoding of the import against transformers' `generate` (and CTranslate2) on the same CPU threads.

    pip install -e ".[export]"
    python benchmarks/hf_import_nllb.py                    # NLLB-200-distilled-600M's sizes, 2 threads
    python benchmarks/hf_import_nllb.py --d-model 32 --layers 1 --ffn 64 --heads 2 --vocab 400 \\
        --sentences 2 --out-len 4                          # the smoke test's size, seconds

Builds an `M2M100ForConditionalGeneration` of the given sizes (default: d_model 1024, 12+12 layers,
16 heads, FFN 4096, a vocabulary of 256,206: NLLB-200-distilled-600M's) with transformers' random
initialisation and an NLLB tokenizer (a small SentencePiece model trained here, NLLB's layout, four
language codes; the model ids past it import as UNUSED pieces), saved as safetensors. Then:

* `seq2seq import-hf` in a child process: its wall time and peak RSS (ru_maxrss), against the size of
  model.safetensors (the target: peak < 2x the weights);
* beam 5, length penalty 0, eng_Latn -> deu_Latn, the same --sentences random sources, every output
  exactly --out-len tokens (min = max length on both sides: a random model does not stop by itself),
  decoded by the import (`Translator`), by transformers `generate` on the original directory, and by
  CTranslate2 on its own conversion of it (`ctranslate2.converters.TransformersConverter`), one after
  the other in this process with --threads torch / CTranslate2 threads (the target: ours >= 1.5x
  generate). The output lengths are printed beside each time, to show the work was the same.
* with --profile N, ours and generate once more each under torch's profiler: the operations per decoder
  step on a tensor of the whole vocabulary (counts, which a loaded machine does not change) and the N
  operations of most self CPU time.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, cast

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import machine_info  # noqa: E402

WORDS = ("red blue green cat dog tree sun moon big small house river bird fish car road apple water stone light "
         "night garden window winter summer yellow mountain little happy quiet").split()
CODES = ["deu_Latn", "eng_Latn", "fra_Latn", "zho_Hans"]


def _sentences(n: int, seed: int, words: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(words)) for _ in range(n)]


def nllb_tokenizer(path: Path) -> None:
    """NLLB's tokenizer files (sentencepiece.bpe.model, tokenizer.json in NLLB's id layout) in `path`."""
    import sentencepiece as spm
    import transformers

    writer = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(_sentences(400, 1, 6)), model_writer=writer,
                                   vocab_size=90, model_type="bpe", num_threads=1, minloglevel=2,
                                   character_coverage=1.0)
    (path / "sentencepiece.bpe.model").write_bytes(writer.getvalue())
    converted = json.loads(transformers.NllbTokenizer.from_pretrained(str(path)).backend_tokenizer.to_str())
    vocab = {p: i for p, i in converted["model"]["vocab"].items() if p != "<mask>"}
    for code in CODES:
        vocab[code] = len(vocab)
    vocab["<mask>"] = len(vocab)
    merges: Any = [tuple(m) for m in converted["model"]["merges"]]
    transformers.NllbTokenizer(vocab=vocab, merges=merges,
                               extra_special_tokens=CODES, vocab_file=str(path / "sentencepiece.bpe.model"),
                               src_lang="eng_Latn").save_pretrained(str(path))


def build(path: Path, args: argparse.Namespace) -> None:
    import transformers

    path.mkdir(parents=True, exist_ok=True)
    nllb_tokenizer(path)
    config = transformers.M2M100Config(
        vocab_size=args.vocab, d_model=args.d_model, encoder_layers=args.layers, decoder_layers=args.layers,
        encoder_attention_heads=args.heads, decoder_attention_heads=args.heads, encoder_ffn_dim=args.ffn,
        decoder_ffn_dim=args.ffn, max_position_embeddings=1024, activation_function="relu", scale_embedding=True,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, pad_token_id=1, bos_token_id=0, eos_token_id=2,
        decoder_start_token_id=2)
    torch.manual_seed(0)
    model = transformers.M2M100ForConditionalGeneration(config).eval()
    model.save_pretrained(str(path))


# A child's own peak RSS: VmHWM of /proc/self/status, printed at exit (ru_maxrss would count the parent's
# RSS at the fork, which exec keeps)
PEAK = ("import atexit, sys\n"
        "atexit.register(lambda: print('VmHWM', next(l.split()[1] for l in open('/proc/self/status') "
        "if l.startswith('VmHWM')), file=sys.stderr))\n")


def _child_peak(code: str) -> tuple[float, int]:
    """(seconds, peak RSS in bytes) of `code` run by a child python."""
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", PEAK + code], capture_output=True, text=True, cwd=ROOT)
    seconds = time.perf_counter() - start
    peaks = [line.split()[1] for line in result.stderr.splitlines() if line.startswith("VmHWM")]
    if result.returncode != 0 or not peaks:
        raise SystemExit(f"the child failed: {result.stderr.strip()[-2000:] or result.stdout.strip()[-2000:]}")
    return seconds, int(peaks[-1]) * 1024


def timed_import(hf_dir: Path, out: Path) -> tuple[float, int]:
    """(seconds, peak RSS in bytes) of `seq2seq import-hf` in a child process."""
    return _child_peak(f"from seq2seq.cli import cli\ncli(['import-hf', {str(hf_dir)!r}, {str(out)!r}], "
                       "standalone_mode=False)\n")


def baseline_rss() -> int:
    """Peak RSS in bytes of a child process that only imports what import-hf imports."""
    return _child_peak("import torch, transformers, safetensors.torch, seq2seq.cli, seq2seq.deploy.hf_fairseq, "
                       "seq2seq.deploy.hf_import\n")[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--layers", type=int, default=12, help="Encoder and decoder layers each.")
    p.add_argument("--ffn", type=int, default=4096)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=256206)
    p.add_argument("--sentences", type=int, default=8, help="Sources decoded (one batch).")
    p.add_argument("--src-words", type=int, default=12, help="Words per source.")
    p.add_argument("--out-len", type=int, default=24, help="Tokens of every output (min = max length).")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2, help="Rounds of the three engines, each timed.")
    p.add_argument("--skip-ctranslate2", action="store_true")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="Then run ours and generate once each under torch's profiler: the operations on a "
                        "whole-vocabulary tensor per step and the N operations of most self CPU time (counts "
                        "to compare on a loaded machine, where the times are not).")
    p.add_argument("--work-dir", default=None, help="Where the model directories go (default: a temporary one).")
    p.add_argument("--build-only", default=None, metavar="DIR", help=argparse.SUPPRESS)  # the child that builds
    args = p.parse_args(argv)
    if args.build_only:
        build(Path(args.build_only), args)
        return 0
    torch.set_num_threads(args.threads)
    print(machine_info(args.threads))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work_dir or tmp)
        hf_dir, ours_dir = work / "nllb-hf", work / "nllb-imported"
        start = time.perf_counter()
        # in a child, so that this process stays small (its RSS at a fork would count in the import's peak)
        sizes = [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in ("d_model", "layers", "ffn", "heads", "vocab")]
        subprocess.run([sys.executable, __file__, *sizes, "--build-only", str(hf_dir)], check=True, cwd=ROOT,
                       capture_output=True)
        weights = sum(f.stat().st_size for f in hf_dir.glob("*.safetensors"))
        print(f"built d_model {args.d_model}, {args.layers}+{args.layers} layers, FFN {args.ffn}, vocabulary "
              f"{args.vocab}: {weights / 2**30:.2f} GiB of safetensors in {time.perf_counter() - start:.0f} s")
        seconds, peak = timed_import(hf_dir, ours_dir)
        print(f"import-hf: {seconds:.1f} s, peak RSS {peak / 2**30:.2f} GiB = {peak / weights:.2f}x the weights "
              f"(target < 2x; of it, {baseline_rss() / 2**30:.2f} GiB is python + torch + transformers loaded)")
        rows = decode_all(hf_dir, ours_dir, args)
    base = next(t for name, t, _ in rows if name == "transformers generate")
    print(f"\nbeam {args.beam}, {args.sentences} sentences, every output {args.out_len} tokens, {args.threads} threads; "
          f"seconds of each of {args.repeats} rounds, and generate's time / this engine's in each round")
    for name, secs, lengths in rows:
        runs = " ".join(f"{t:7.2f} s" for t in secs)
        speed = " ".join(f"{g / t:5.2f}x" for g, t in zip(base, secs) if t > 0)
        print(f"{name:<26} {runs}   {speed}   output lengths {sorted(set(lengths))}")
    return 0


Runs = list[tuple[str, list[float], list[int]]]  # (engine, seconds of each repeat, output lengths)


def decode_all(hf_dir: Path, ours_dir: Path, args: argparse.Namespace) -> Runs:
    """Each engine loaded and warmed up once, then --repeats rounds of ours, generate, CTranslate2 in turn
    (a shared machine's load hits every engine of a round alike)."""
    import transformers

    from seq2seq.inference.translator import Translator

    texts = _sentences(args.sentences, 7, args.src_words)
    n = args.out_len
    translator = Translator.load(ours_dir, device="cpu")

    def ours() -> list[int]:
        # our length limits count the forced language tag: n + 1 is the tag and n tokens
        out = translator.translate_nbest(texts, beam=args.beam, lenpen=0.0, min_len=n + 1, max_len_a=0,
                                         max_len_b=n + 1, tgt_lang="deu_Latn", src_lang="eng_Latn")
        return [len(h[0].token_ids) for h in out]

    tok = transformers.AutoTokenizer.from_pretrained(str(hf_dir))
    tok.src_lang = "eng_Latn"
    model = transformers.M2M100ForConditionalGeneration.from_pretrained(str(hf_dir)).eval()
    batch = tok(texts, return_tensors="pt", padding=True)
    code = cast(int, tok.convert_tokens_to_ids("deu_Latn"))

    def generate() -> list[int]:
        with torch.inference_mode():
            out = model.generate(**batch, num_beams=args.beam, length_penalty=0.0, early_stopping=True,
                                 forced_bos_token_id=code, min_new_tokens=n + 1, max_new_tokens=n + 1)
        return [sum(1 for t in row[2:] if t not in (tok.pad_token_id, tok.eos_token_id)) for row in out.tolist()]

    engines = {"seq2seq (import-hf)": ours, "transformers generate": generate}
    if not args.skip_ctranslate2:
        engines["CTranslate2"] = ctranslate2_engine(hf_dir, tok, texts, code, args)
    lengths = {name: run() for name, run in engines.items()}  # warm-up (and the lengths)
    times: dict[str, list[float]] = {name: [] for name in engines}
    for _ in range(args.repeats):
        for name, run in engines.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    if args.profile:
        for name in ("seq2seq (import-hf)", "transformers generate"):
            print(profiled(name, engines[name], args))
    return [(name, times[name], lengths[name]) for name in engines]


NO_PASS = {f"aten::{op}" for op in ("select", "view", "reshape", "as_strided", "narrow", "slice", "to", "embedding",
                                     "index_select", "gather", "expand", "unsqueeze", "squeeze", "t", "transpose",
                                     "detach", "alias", "flatten", "unflatten", "contiguous", "empty_like")}


def profiled(name: str, run: Callable[[], list[int]], args: argparse.Namespace) -> str:
    """One call of `run` under torch's profiler: how many operations per decoder step go over a tensor
    of the whole vocabulary (the outermost such operation of each call stack: one linear, not also the
    matmul inside it; views and row lookups left out), by name, and the --profile operations of most
    self CPU time."""
    from torch.profiler import ProfilerActivity, profile

    from seq2seq.inference.strategies import BLOCK

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        run()

    def covers(shape: Any) -> bool:  # a dimension of V ids (or beam x V), or ours' [rows, blocks, 64] view of V
        if not isinstance(shape, list) or not shape:
            return False
        return any(d > 0 and d % args.vocab == 0 for d in shape) or args.vocab - BLOCK < math.prod(shape[1:]) < args.vocab

    def whole(event: Any) -> bool:  # views, dtype no-ops and row lookups read no whole vocabulary
        return event.name not in NO_PASS and any(covers(shape) for shape in event.input_shapes)

    def outermost(event: Any) -> bool:
        parent = event.cpu_parent
        while parent is not None:
            if whole(parent):
                return False
            parent = parent.cpu_parent
        return True

    passes: dict[str, int] = {}
    for event in prof.events():
        if whole(event) and outermost(event):
            passes[event.name] = passes.get(event.name, 0) + 1
    steps = args.out_len + 1  # the language code and the tokens: the decoder steps of every output
    per_step = ", ".join(f"{op} {n / steps:.1f}" for op, n in sorted(passes.items(), key=lambda kv: -kv[1]))
    table = prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=args.profile,
                                                               max_name_column_width=28, max_shapes_column_width=50)
    return (f"\n{name} under the profiler: {sum(passes.values()) / steps:.1f} operations on a whole-vocabulary "
            f"tensor per step ({per_step})\n{table}")


def ctranslate2_engine(hf_dir: Path, tok: Any, texts: list[str], code: int,
                       args: argparse.Namespace) -> Callable[[], list[int]]:
    """CTranslate2 (fp32) on its own conversion of the transformers directory: a call -> output lengths."""
    import ctranslate2
    from ctranslate2.converters import TransformersConverter

    ct2_dir = hf_dir.parent / "nllb-ct2"
    TransformersConverter(str(hf_dir)).convert(str(ct2_dir), force=True)
    translator = ctranslate2.Translator(str(ct2_dir), device="cpu", intra_threads=args.threads)
    sources = [tok.convert_ids_to_tokens(ids) for ids in tok(texts).input_ids]
    target = tok.convert_ids_to_tokens(code)
    n = args.out_len

    def run() -> list[int]:
        results = translator.translate_batch(sources, target_prefix=[[target]] * len(texts), beam_size=args.beam,
                                             length_penalty=0.0, min_decoding_length=n + 1,
                                             max_decoding_length=n + 1)
        return [len(r.hypotheses[0]) - 1 for r in results]  # without the target code

    return run


if __name__ == "__main__":
    raise SystemExit(main())
