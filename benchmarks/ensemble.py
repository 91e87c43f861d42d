#!/usr/bin/env python
"""Ensembles on Multi30K: members, ensembles of 2 and all, both ways of averaging, and checkpoints.

    python benchmarks/ensemble.py --members runs/s1 runs/s2 runs/s3 runs/s4     # test_2016_flickr, beam 5

Members: model directories trained alike with different seeds (e.g. `seq2seq train
configs/multi30k_en_de.yaml --set training.seed=S --set training.output_dir=runs/sS`), sharing the
target tokenizer. Reported on val and test_2016_flickr (sacreBLEU, beam 5, each member's decoding
defaults as the first member's): BLEU of each member, of the ensemble of the first two and of all
(mean of probabilities, and mean of log-probabilities), of the first member's last checkpoints
averaged (`seq2seq average`) and of the same checkpoints as an ensemble; with `--equal-budget DIR`,
of one model trained like the members for their total budget (the comparison at equal training
cost); decoding time of each as a ratio to the first member's, in the same run.

    python benchmarks/ensemble.py --members runs/s1 runs/s2 --equal-budget runs/long    # runs/long: 2 x the steps
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from common import DATA, machine_info, read_gz

from seq2seq.inference.translator import Translator
from seq2seq.storage.model_dir import ModelDir, load_model_dir
from seq2seq.text.metrics import score


def bleu(hyps: list[str], refs: list[str]) -> float:
    return score(hyps, [refs], metrics=("bleu",))["bleu"]["score"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--members", nargs="+", required=True)
    p.add_argument("--data-dir", type=Path, default=DATA)
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--last", type=int, default=5, help="Checkpoints of the first member to average / ensemble.")
    p.add_argument("--equal-budget", metavar="DIR",
                   help="A model trained like the members for their total number of steps.")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--limit", type=int, default=None)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    import torch

    torch.set_num_threads(args.threads)
    print(machine_info(args.threads))
    splits = {s: (read_gz(args.data_dir / f"{s}.{args.src}.gz", args.limit),
                  read_gz(args.data_dir / f"{s}.{args.tgt}.gz", args.limit)) for s in ("val", "test_2016_flickr")}
    first = args.members[0]
    kept = ModelDir(first).checkpoints()[-args.last:]
    systems: dict[str, callable] = {}
    for i, member in enumerate(args.members, 1):
        systems[f"member {i}"] = lambda m=member: Translator.load(m, device=args.device)
    systems["ensemble of 2 (mean prob)"] = lambda: Translator.load(args.members[:2], device=args.device)
    if len(args.members) > 2:
        n = len(args.members)
        systems[f"ensemble of {n} (mean prob)"] = lambda: Translator.load(args.members, device=args.device)
        systems[f"ensemble of {n} (mean logprob)"] = lambda: Translator.load(args.members, device=args.device,
                                                                             ensemble_combine="logprob")
    if len(kept) >= 2:
        def averaged() -> Translator:
            from seq2seq.storage.weights import save_weights

            path = Path(first) / f"model.avg{len(kept)}.bench.safetensors"
            save_weights(ModelDir(first).average(len(kept))[0], path)
            return Translator.load(first, device=args.device, weights=path)

        systems[f"member 1, last {len(kept)} checkpoints averaged"] = averaged
        systems[f"member 1, last {len(kept)} checkpoints as an ensemble"] = lambda: Translator(
            [load_model_dir(first, device=args.device, weights=k) for k in kept])
    if args.equal_budget:
        systems["one model, the members' total budget"] = lambda: Translator.load(args.equal_budget,
                                                                                 device=args.device)
    base_seconds = None
    print(f"\nbeam {args.beam}; val {len(splits['val'][0])} and test_2016_flickr {len(splits['test_2016_flickr'][0])} "
          "sentences; time: decoding val + test, as a ratio to member 1")
    print(f"{'system':<48} {'val BLEU':>9} {'test BLEU':>10} {'time':>7}")
    for name, make in systems.items():
        t = make()
        t.translate(splits["val"][0][:16], beam=args.beam)  # warm-up
        start = time.perf_counter()
        hyps = {s: t.translate(src, beam=args.beam) for s, (src, _) in splits.items()}
        seconds = time.perf_counter() - start
        base_seconds = base_seconds or seconds
        scores = {s: bleu(hyps[s], ref) for s, (_, ref) in splits.items()}
        print(f"{name:<48} {scores['val']:>9.2f} {scores['test_2016_flickr']:>10.2f} {seconds / base_seconds:>6.2f}x",
              flush=True)


if __name__ == "__main__":
    main()
