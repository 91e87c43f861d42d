"""Deployment speed: seq2seq's Translator against the same model exported to Hugging Face transformers
(`generate`) and to CTranslate2 (fp32 and int8), on the same batches, in one run.

    pip install -e ".[export]"
    python benchmarks/deploy.py --model-dir runs/m30k/model                     # Multi30K test 2016, beam 5
    python benchmarks/deploy.py --model-dir runs/m30k/model --beam 1 --limit 200 --repeats 1

Every system gets the same sentences (default: Multi30K test_2016_flickr.en), sorted by length and
cut into batches of --batch-size, one call per batch, --threads intra-op threads:

* seq2seq: `Translator` at fp32 (on CPU with its MKL-packed decoder), beam --beam, the model's
  length penalty and limits;
* transformers: `seq2seq export --to hf` of the model (MarianMTModel or
  BlenderbotForConditionalGeneration: the same logits), `generate(num_beams=...)` with
  max_new_tokens = the batch's longest limit + 1 and HF's own length penalty (score / length **
  lenpen), so its outputs may differ slightly from ours;
* ctranslate2 fp32 / int8: `seq2seq export --to ctranslate2` run through
  `seq2seq.deploy.engine.CTranslate2Translator` (our search exactly, see its docstring), fp32 as exported
  and int8 (`seq2seq export --quantize int8`: 7-bit weights, see seq2seq/deploy/ctranslate2.py);
* ctranslate2 raw fp32 / int8: plain `translate_batch` (CTranslate2's own length normalisation, one
  limit per batch, no re-scoring): what a user calling CTranslate2 directly gets; the difference to
  the rows above is the cost of matching our search exactly.

Runs are interleaved (each system once per repeat) and the median is reported as sentences/s and
target tokens/s (of that system's own outputs), with the speed-up over seq2seq and the share of
lines identical to seq2seq's output.
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

from benchmarks.common import DATA, machine_info, read_gz  # noqa: E402


def batches_of(texts: list[str], length, size: int) -> tuple[list[list[str]], list[int]]:
    """Batches of `size` texts sorted by length(index), and the order of the texts in them."""
    order = sorted(range(len(texts)), key=length)
    return [[texts[i] for i in order[k : k + size]] for k in range(0, len(order), size)], order


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", required=True, help="A trained seq2seq model directory.")
    parser.add_argument("--src", default=str(DATA / "test_2016_flickr.en.gz"), help="Source sentences (.gz ok).")
    parser.add_argument("--ref", default=None,
                        help="References, line-parallel to --src (.gz ok): adds each system's BLEU (sacreBLEU)")
    parser.add_argument("--limit", type=int, default=None, help="Only the first N sentences.")
    parser.add_argument("--beam", type=int, default=5, help="Beam size (1: greedy).")
    parser.add_argument("--batch-size", type=int, default=32, help="Sentences per batch.")
    parser.add_argument("--threads", type=int, default=2, help="Intra-op threads for every system.")
    parser.add_argument("--repeats", type=int, default=3, help="Timed runs per system (median reported).")
    parser.add_argument("--skip-hf", action="store_true", help="Leave out transformers.")
    parser.add_argument("--skip-raw", action="store_true", help="Leave out the raw CTranslate2 rows.")
    parser.add_argument("--work-dir", default=None, help="Where the exports go (default: a temporary directory).")
    args = parser.parse_args()

    import ctranslate2
    import sacrebleu

    from seq2seq.deploy.engine import CTranslate2Translator
    from seq2seq.deploy.ctranslate2 import export_ctranslate2
    from seq2seq.deploy.hf import export_hf
    from seq2seq.text.lines import read_input_lines
    from seq2seq.text.tokenizer import EOS_ID, PAD_ID
    from seq2seq.inference.translator import Translator

    torch.set_num_threads(args.threads)
    path = Path(args.src)
    read = lambda p: read_gz(Path(p)) if str(p).endswith(".gz") else read_input_lines(str(p))  # noqa: E731
    texts = read(path)[: args.limit]
    refs = read(args.ref)[: args.limit] if args.ref else None
    if refs is not None and len(refs) != len(texts):
        raise SystemExit(f"--ref has {len(refs)} lines for {len(texts)} sources")
    keep = [i for i, t in enumerate(texts) if t.strip()]
    texts, refs = [texts[i] for i in keep], refs and [refs[i] for i in keep]
    print(machine_info(args.threads))
    print(f"ctranslate2 {ctranslate2.__version__}; {len(texts)} sentences from {path}, batches of {args.batch_size}, "
          f"beam {args.beam}, {args.repeats} repeat(s)\n", flush=True)

    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="seq2seq-deploy-"))
    ours = Translator.load(args.model_dir, device="cpu")
    search = dict(beam=args.beam) if args.beam > 1 else dict(greedy=True)
    cfg = ours.search_config(**search)
    tok_src, tok_tgt = ours.tokenizers.src, ours.tokenizers.tgt
    # each text's source ids as the model reads them (truncated to its positions, EOS appended)
    examples = {texts[i]: ids for i, ids in ours.processor.prepare(texts).items()}  # every text is non-empty
    batches, order = batches_of(texts, lambda i: len(examples[texts[i]]), args.batch_size)
    huge = 10**9

    systems: dict[str, callable] = {}
    systems["seq2seq"] = lambda b: ours.translate(b, batch_tokens=huge, **search)

    ct2_dir = export_ctranslate2(args.model_dir, work / "ct2", force=True)
    ct_fp32 = CTranslate2Translator.load(ct2_dir, precision="fp32", threads=args.threads)
    int8_dir = export_ctranslate2(args.model_dir, work / "ct2_int8", quantize="int8", force=True)  # 7-bit weights
    ct_int8 = CTranslate2Translator.load(int8_dir, threads=args.threads)
    systems["ctranslate2 fp32"] = lambda b: ct_fp32.translate(b, batch_tokens=huge, **search)
    systems["ctranslate2 int8"] = lambda b: ct_int8.translate(b, batch_tokens=huge, **search)

    def max_len(batch: list[str]) -> int:
        """The batch's longest length limit (`SearchConfig.max_length` of each source's positions)."""
        return max(cfg.max_length(len(examples[t])) for t in batch)

    def target_ids(pieces: list[str]) -> list[int]:
        return [tok_tgt.unk_id if i is None else i for i in map(tok_tgt.piece_id, pieces)]

    if not args.skip_raw:
        def raw(engine):
            def run(b: list[str]) -> list[str]:
                pieces = [[tok_src.id_to_piece(i) for i in examples[t][:-1]] for t in b]  # CTranslate2 adds EOS
                out = engine.engine.translate_batch(
                    pieces, beam_size=cfg.beam if cfg.strategy == "beam" else 1, length_penalty=cfg.lenpen,
                    max_decoding_length=max_len(b) + 1, max_input_length=0, max_batch_size=0,
                )
                return tok_tgt.decode([target_ids(r.hypotheses[0]) for r in out])
            return run

        systems["ctranslate2 raw fp32"] = raw(ct_fp32)
        systems["ctranslate2 raw int8"] = raw(ct_int8)

    if not args.skip_hf:
        import transformers
        from transformers import AutoModelForSeq2SeqLM, GenerationConfig

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
        hf_dir = export_hf(args.model_dir, work / "hf", force=True)
        hf = AutoModelForSeq2SeqLM.from_pretrained(str(hf_dir)).eval()

        def run_hf(b: list[str]) -> list[str]:
            src = ours.processor.collate([examples[t] for t in b])  # ids + EOS, padded with PAD_ID
            gen = GenerationConfig(
                num_beams=args.beam, do_sample=False, max_new_tokens=max_len(b) + 1, length_penalty=cfg.lenpen,
                early_stopping=True, decoder_start_token_id=hf.config.decoder_start_token_id,
                bos_token_id=hf.config.bos_token_id, eos_token_id=EOS_ID, pad_token_id=PAD_ID,
                bad_words_ids=[[PAD_ID], [hf.config.decoder_start_token_id]],
            )
            with torch.inference_mode():
                out = hf.generate(input_ids=src, attention_mask=src.ne(PAD_ID), generation_config=gen)
            return tok_tgt.decode(out.tolist())

        systems["transformers"] = run_hf

    outputs: dict[str, list[str]] = {}
    times: dict[str, list[float]] = {name: [] for name in systems}
    for name, fn in systems.items():  # warm-up, and the outputs
        outputs[name] = [t for b in batches for t in fn(b)]
    for _ in range(args.repeats):
        for name, fn in systems.items():
            start = time.perf_counter()
            for b in batches:
                fn(b)
            times[name].append(time.perf_counter() - start)
        print("  " + ", ".join(f"{n} {t[-1]:.2f}s" for n, t in times.items()), flush=True)

    base = statistics.median(times["seq2seq"])
    ref = outputs["seq2seq"]
    references = refs and [[refs[i] for i in order]]  # in the order the batches hold the sources
    print(f"\n{'system':<22} {'sent/s':>8} {'tok/s':>8} {'median s':>9} {'vs seq2seq':>10} {'same output':>12}"
          + (f" {'BLEU':>6}" if references else ""))
    for name, t in times.items():
        med = statistics.median(t)
        tokens = sum(len(ids) for ids in tok_tgt.encode(outputs[name]))
        same = sum(a == b for a, b in zip(outputs[name], ref)) / len(ref)
        bleu = f" {sacrebleu.corpus_bleu(outputs[name], references).score:>6.2f}" if references else ""
        print(f"{name:<22} {len(texts) / med:>8.1f} {tokens / med:>8.0f} {med:>9.2f} {base / med:>9.2f}x {same:>11.1%}"
              + bleu)
    print(f"\nexports in {work}")


if __name__ == "__main__":
    main()
