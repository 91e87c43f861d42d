"""What subword regularization costs a training step: the same batches with and without sampling.

    python benchmarks/subword_sampling.py                      # alpha 0.3, the Multi30K recipe's model
    python benchmarks/subword_sampling.py --alpha 0.5 --steps 30
    python benchmarks/subword_sampling.py --steps 1 --warmup 0 --set model.layers=1   # a smoke run

Two trainers of the recipe's model (configs/multi30k_en_de.yaml: d_model 256, 3+3 layers, bf16
where the CPU has it) take turns, step by step, each on the first batches of its own first epoch
(the same token budget): one with the best segmentation, one with a segmentation sampled at
`--alpha` (sampled text is longer, so its batches hold fewer sentences). The time of a step
includes collating the batch; the time of segmenting the epoch is printed apart. Printed: ms per step and
target tokens per step of each, and the ratios. A machine running the recipe on a time budget
trains 1/ratio as many steps with sampling; `recipes/multi30k/run.py --steps N` emulates a machine
by its step count, so that is the conversion to apply there.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import DATA, machine_info  # noqa: E402
from seq2seq.training.experiment import text_training_data  # noqa: E402
from seq2seq.config import load_config
from seq2seq.model.transformer import Seq2SeqTransformer  # noqa: E402
from seq2seq.text.tokenizer import PAD_ID  # noqa: E402
from seq2seq.training.trainer import Trainer  # noqa: E402


def trainer(cfg, data, out_dir: Path) -> Trainer:
    torch.manual_seed(0)
    vocab_size = data.tokenizers.src.vocab_size
    model_cfg = dataclasses.replace(cfg.model, src_vocab_size=vocab_size, tgt_vocab_size=vocab_size)
    return Trainer(Seq2SeqTransformer(model_cfg), cfg.training, data.sampler, data.collate, None, out_dir, pad_id=PAD_ID)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--alpha", type=float, default=0.3)
    p.add_argument("--steps", type=int, default=20, help="timed steps of each")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--data-dir", type=Path, default=DATA)
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   help="config override of both trainers (e.g. a smaller model for a smoke run; repeatable)")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    print(machine_info(args.threads))
    out = Path(tempfile.mkdtemp(prefix="seq2seq-sampling-"))
    files = [f"data.train_src={args.data_dir}/train.en.gz", f"data.train_tgt={args.data_dir}/train.de.gz",
             f"data.valid_src={args.data_dir}/val.en.gz", f"data.valid_tgt={args.data_dir}/val.de.gz",
             f"training.threads={args.threads}"]
    runs = {}
    for name, alpha in (("best segmentation", "null"), (f"sampled, alpha {args.alpha}", str(args.alpha))):
        cfg = load_config(ROOT / "configs" / "multi30k_en_de.yaml",
                          [*files, *args.overrides, f"data.subword_alpha={alpha}"])
        data = text_training_data(cfg, out)
        start = time.perf_counter()
        batches = len(data.sampler)  # segments the first epoch
        print(f"{name}: {batches} batches per epoch, {time.perf_counter() - start:.2f} s to segment and batch it")
        runs[name] = (trainer(cfg, data, out / "unused"), data.collate)
    times = {name: [] for name in runs}
    tokens = {name: [] for name in runs}
    streams = {name: iter(t.sampler) for name, (t, _) in runs.items()}  # each its own batches (lengths differ)
    for i in range(args.warmup + args.steps):
        for name, (t, collate) in runs.items():  # turn by turn: both see the machine in the same state
            start = time.perf_counter()
            batch = collate(next(streams[name]))
            t._train_step([batch])
            if i >= args.warmup:
                times[name].append(time.perf_counter() - start)
                tokens[name].append(batch.n_tgt_tokens)
    (base, sampled) = runs
    print(f"\n{'':24} {'ms/step (median)':>17} {'target tokens/step':>19}")
    for name in runs:
        print(f"{name:24} {1000 * statistics.median(times[name]):17.0f} {statistics.mean(tokens[name]):19.0f}")
    time_ratio = statistics.median(times[sampled]) / statistics.median(times[base])
    print(f"\nsampled / best: {time_ratio:.3f}x the time per step, "
          f"{statistics.mean(tokens[sampled]) / statistics.mean(tokens[base]):.3f}x the target tokens; "
          f"a time budget trains {1 / time_ratio:.3f}x the steps")


if __name__ == "__main__":
    main()
