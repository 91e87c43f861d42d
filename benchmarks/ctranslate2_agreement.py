"""How often `translate --engine ctranslate2` gives exactly `seq2seq translate`'s output.

    pip install -e ".[export]"
    python benchmarks/ctranslate2_agreement.py --model-dir runs/m30k/model              # Multi30K val, beam 5
    python benchmarks/ctranslate2_agreement.py --model-dir runs/m30k/model --precision int8 --show 50
    python benchmarks/ctranslate2_agreement.py --model-dir M --engine-dir M/ctranslate2 --src test.en --lenpen 0.6

Translates --src (default: ../shared/data/multi30k/val.en.gz) with the model directory (torch, fp32)
and with its CTranslate2 export (--engine-dir, else MODEL_DIR/ctranslate2 when it exists, else a
fresh export in a temporary directory), same search options, and prints the share of identical
output lines (the target: >= 99% at fp32), how many lines reached the length limit (where the
engine is least exact, see seq2seq/deploy/engine.py), the largest score difference on identical lines,
and the first --show differing lines with both outputs and scores. Exit code 1 when the agreement
is below --min-agreement.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import DATA, machine_info, read_gz  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", required=True, help="A trained seq2seq model directory.")
    parser.add_argument("--engine-dir", default=None, help="Its CTranslate2 export (default: see above).")
    parser.add_argument("--src", default=str(DATA / "val.en.gz"), help="Source sentences (.gz ok).")
    parser.add_argument("--limit", type=int, default=None, help="Only the first N lines.")
    parser.add_argument("--beam", type=int, default=5, help="Beam size (1: greedy).")
    parser.add_argument("--lenpen", type=float, default=None, help="Length penalty (default: the model's).")
    parser.add_argument("--precision", choices=["fp32", "int8", "bf16"], default="fp32",
                        help="CTranslate2's precision (seq2seq always runs fp32).")
    parser.add_argument("--threads", type=int, default=2, help="Threads for both.")
    parser.add_argument("--show", type=int, default=20, help="Differing lines to print.")
    parser.add_argument("--min-agreement", type=float, default=0.99, help="Exit 1 below this share.")
    args = parser.parse_args(argv)

    from seq2seq.deploy.engine import CTranslate2Translator
    from seq2seq.deploy.export_lookup import find_export
    from seq2seq.deploy.ctranslate2 import export_ctranslate2
    from seq2seq.deploy.staging import ExportError
    from seq2seq.text.lines import read_input_lines
    from seq2seq.inference.translator import Translator

    torch.set_num_threads(args.threads)
    print(machine_info(args.threads))
    path = Path(args.src)
    lines = read_gz(path) if path.suffix == ".gz" else read_input_lines(str(path))
    lines = lines[: args.limit]
    try:
        engine_dir = find_export(args.model_dir, args.engine_dir)
    except ExportError:
        if args.engine_dir:
            raise
        engine_dir = export_ctranslate2(args.model_dir, Path(tempfile.mkdtemp(prefix="seq2seq-ct2-")) / "ct2")
        print(f"exported {args.model_dir} -> {engine_dir}")
    ours = Translator.load(args.model_dir, device="cpu")
    theirs = CTranslate2Translator.load(engine_dir, precision=args.precision, threads=args.threads)
    search = dict(beam=args.beam) if args.beam > 1 else dict(greedy=True)
    if args.lenpen is not None:
        search["lenpen"] = args.lenpen
    cfg = ours.search_config(**search)
    print(f"{len(lines)} lines of {path}; search {cfg.strategy} beam {cfg.beam} lenpen {cfg.lenpen} "
          f"max_len {cfg.max_len_a} * src + {cfg.max_len_b}; ctranslate2 {args.precision} ({engine_dir})")

    start = time.perf_counter()
    a = ours.translate_nbest(lines, **search)
    t_ours = time.perf_counter() - start
    start = time.perf_counter()
    b = theirs.translate_nbest(lines, **search)
    t_theirs = time.perf_counter() - start

    # each line's length limit, from its source ids as the model reads them (truncated, EOS appended)
    limits = {i: cfg.max_length(len(ids)) for i, ids in ours.processor.prepare(lines).items()}
    differ, at_limit, worst = [], 0, 0.0
    for i, (x, y) in enumerate(zip(a, b)):
        text_x, text_y = (x[0].text if x else ""), (y[0].text if y else "")
        if x and len(x[0].token_ids) >= limits[i]:
            at_limit += 1
        if text_x != text_y:
            differ.append(i)
        elif x and y:
            worst = max(worst, abs(x[0].score - y[0].score))
    agreement = 1 - len(differ) / max(1, len(lines))
    print(f"identical output: {len(lines) - len(differ)}/{len(lines)} lines = {agreement:.2%}")
    print(f"lines whose seq2seq translation reached the length limit: {at_limit}")
    print(f"largest score difference on identical lines: {worst:.2e}")
    print(f"time: seq2seq {t_ours:.2f}s, ctranslate2 {t_theirs:.2f}s ({args.threads} threads)")
    for i in differ[: args.show]:
        x, y = a[i][0], b[i][0]
        print(f"\nline {i + 1}: {lines[i]}")
        print(f"  seq2seq     {x.score:9.4f}  {x.text}\n  ctranslate2 {y.score:9.4f}  {y.text}")
    if len(differ) > args.show:
        print(f"\n... and {len(differ) - args.show} more differing lines (--show N)")
    return 0 if agreement >= args.min_agreement else 1


if __name__ == "__main__":
    sys.exit(main())
