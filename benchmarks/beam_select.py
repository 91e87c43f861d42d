"""Beam search's selection step: one top-k per row, then one over the beam's candidates, against the
top-k over the whole [sentences, beam x vocabulary] sum it replaced; and the row's top-k taken block-wise
(`row_topk`) against torch.topk over the whole row.

    python benchmarks/beam_select.py                      # batches of 32 and 300 sentences, beam 5 (~9 min)
    python benchmarks/beam_select.py --batch-sizes 300 --beam 10 --repeats 5

Each beam step, `Beam.select` (seq2seq/inference/strategies.py) picks a sentence's 2 x beam best
extensions. The previous code added each row's score to its [V] log-probabilities and ran a top-k
over the sentence's beam x V sums: one more pass over a [B, V] tensor (B = sentences x beam rows) and
a top-k over long rows, which costs most when the batch is large (`translate --batch-tokens`, 4,000
source tokens by default, is 200-300 Multi30K sentences, 1,000-1,500 rows at beam 5). The current
code takes each row's best 2 x beam tokens first (adding a row's score does not change their order),
then the best of the beam's rows' candidates: the same hypotheses, less memory traffic. A row's top-k
itself is block-wise on a CPU (`row_topk`: the maximum of each block of 64 columns, the best k blocks,
then the top-k of their columns), against `torch.topk` over the row's V columns ("per row, torch.topk").

Both run the same search (seq2seq.inference.search) on a randomly initialised model of the decode
benchmark's sizes (benchmarks/common.py: d_model 256, 3+3 layers, 8,000 pieces), decoder pre-packed as
`Translator` runs it, on the first 600 Multi30K test_2016_flickr sources (--limit) sorted by length,
with forced output lengths (every sentence of a batch gets as many tokens as the batch's longest
source), beam 5, fp32; the runs alternate and the median of --repeats counts. The outputs must be
identical (checked).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import DATA, SIZES, build_ours, machine_info, read_gz, tokenizer  # noqa: E402
from benchmarks.decode import Workload  # noqa: E402
from seq2seq.accel.packed import pack_decoder  # noqa: E402
from seq2seq.config.search import SearchConfig  # noqa: E402
from seq2seq.inference import search as search_module  # noqa: E402
from seq2seq.inference import strategies  # noqa: E402
from seq2seq.inference.strategies import Beam, Candidates, make_strategy  # noqa: E402

VARIANTS = ("full sum", "per row, torch.topk", "per row, block-wise")  # the last is the current code


class FullSumBeam(Beam):
    """The selection before: the top 2 x beam of the [U, beam x V] sums of scores and log-probabilities."""

    def select(self, lprobs: torch.Tensor, scores: torch.Tensor) -> Candidates:
        b, v = lprobs.shape
        flat = (lprobs + scores[:, None]).view(b // self.group, self.group * v)
        top, index = flat.topk(min(self.candidates, flat.size(1)), dim=1)
        rows = torch.div(index, v, rounding_mode="floor")
        return Candidates(rows, index - rows * v, lprobs.view_as(flat).gather(1, index), top)


def decode(model: torch.nn.Module, work: Workload, beam: int, variant: str) -> tuple[float, list[list[int]]]:
    """Seconds to decode the workload with one of VARIANTS, and the best hypothesis of each sentence."""
    def strategy(cfg: SearchConfig, device: torch.device):
        return FullSumBeam(cfg.beam) if variant == VARIANTS[0] else make_strategy(cfg, device)

    def whole_row_topk(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        return x.topk(k, dim=1)

    row_topk = whole_row_topk if variant == VARIANTS[1] else strategies.row_topk
    outputs = []
    start = time.perf_counter()
    with mock.patch.object(search_module, "make_strategy", strategy), \
            mock.patch.object(strategies, "row_topk", row_topk), torch.inference_mode():
        for src, _, steps in work.batches:
            cfg = SearchConfig(strategy="beam", beam=beam, nbest=1, lenpen=1.0, min_len=steps - 1,
                               max_len=steps - 1, max_len_a=0.0, max_len_b=steps - 1)
            outputs += [h[0].tokens for h in search_module.search(model, src, cfg)]
    return time.perf_counter() - start, outputs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 300], help="sentences per batch")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--limit", type=int, default=600, help="test sentences used (the first N)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--cache-dir", default=str(Path(tempfile.gettempdir()) / "seq2seq-bench"),
                   help="where the benchmarks' tokenizer is cached")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    print(machine_info(args.threads))
    ids = tokenizer(Path(args.cache_dir)).encode(read_gz(DATA / "test_2016_flickr.en.gz", args.limit))
    model = pack_decoder(build_ours(SIZES["vocab"]).eval(), inplace=True)
    print(f"\nbeam {args.beam}, {len(ids)} sentences, median of {args.repeats} runs each\n")
    print("seconds per variant; speed-up of the current code (per row, block-wise) against each other one\n")
    print(f"{'sentences/batch':>15} {'rows/step':>9} " + " ".join(f"{v:>20}" for v in VARIANTS) + "  speed-ups")
    for size in args.batch_sizes:
        work = Workload(ids, size, None)
        decode(model, Workload(ids[:size], size, 4), args.beam, VARIANTS[-1])  # warm-up
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for _ in range(args.repeats):
            for variant in VARIANTS:
                seconds, outputs = decode(model, work, args.beam, variant)
                times[variant].append(seconds)
                if variant == VARIANTS[0]:
                    reference = outputs
                elif outputs != reference:
                    sys.exit(f"{variant} chose other hypotheses than {VARIANTS[0]}")
        median = {v: statistics.median(t) for v, t in times.items()}
        ups = ", ".join(f"{median[v] / median[VARIANTS[-1]]:.2f}x" for v in VARIANTS[:-1])
        print(f"{size:>15} {size * args.beam:>9} " + " ".join(f"{median[v]:>20.2f}" for v in VARIANTS) + f"  {ups}",
              flush=True)


if __name__ == "__main__":
    main()
