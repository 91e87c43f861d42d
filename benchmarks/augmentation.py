"""What on-the-fly augmentation costs per training batch, against the training step it feeds.

    python recipes/speech_digits/make_data.py --data-dir ../shared/data/fsdd/recordings --out /tmp/digits \
        --n-train 350 --n-val 20 --n-test 20
    python benchmarks/augmentation.py --train /tmp/digits/train.tsv [--config recipes/speech_digits/config.yaml]
    python benchmarks/augmentation.py --train /tmp/digits/train.tsv --batches 2 --set model.encoder_layers=1  # smoke

Builds the recipe's training batches (its max_tokens, ~35 utterances of ~2.3 s), then times, per batch,
`collate` with augmentation off and with each setting below on, and one training step of the recipe's
model (forward, backward, AdamW; bf16 autocast where the CPU has it, 1 thread). Medians over the batches.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from seq2seq.accel.device import autocast_context, choose_device, resolve_precision
from seq2seq.config import from_dict
from seq2seq.config.root import load_config
from seq2seq.config.encoder_section import AudioAugmentConfig
from seq2seq.model.transformer import Seq2SeqTransformer
from seq2seq.training.experiment import media_training_data
from seq2seq.training.loss import sequence_loss

SETTINGS = {
    "speed [0.9, 1.0, 1.1]": {"speed": [0.9, 1.0, 1.1]},
    "vtlp [0.9, 1.1]": {"vtlp": [0.9, 1.1]},
    "noise_prob 1 (white, pink)": {"noise_prob": 1.0},
    "gain_prob 1": {"gain_prob": 1.0},
    "reverb_prob 1": {"reverb_prob": 1.0},
    "all: speed, vtlp, noise 0.5, gain 0.5, reverb 0.3": {"speed": [0.9, 1.0, 1.1], "vtlp": [0.9, 1.1],
                                                          "noise_prob": 0.5, "gain_prob": 0.5, "reverb_prob": 0.3},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", required=True, help="a training table (audio<TAB>text)")
    parser.add_argument("--config", default=str(ROOT / "recipes" / "speech_digits" / "config.yaml"))
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="config override (e.g. a smaller model or batch for a smoke run; repeatable)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = Path(tempfile.mkdtemp())
    cfg = load_config(args.config, [f"data.train={args.train}", f"training.output_dir={out}", *args.overrides])
    data = media_training_data(cfg, out)
    batches = data.sampler.batches()[: args.batches]
    print(f"{len(batches)} batches of {statistics.mean(len(b) for b in batches):.1f} utterances")

    def per_batch(collate) -> float:  # median ms
        times = []
        for b in batches:
            t = time.perf_counter()
            collate(b)
            times.append(time.perf_counter() - t)
        return 1000 * statistics.median(times)

    off = per_batch(data.collate)
    print(f"collate, augmentation off: {off:.1f} ms/batch")
    collates = {}
    for name, augment in SETTINGS.items():
        encoder = dataclasses.replace(cfg.model.encoder, augment=from_dict(AudioAugmentConfig, augment))
        on = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, encoder=encoder))
        collates[name] = media_training_data(on, out).collate
        ms = per_batch(collates[name])
        print(f"collate, {name}: {ms:.1f} ms/batch (+{ms - off:.1f})")

    # one training step, on plain batches and on batches with every augmentation (VTLP is in the features)
    model_cfg = dataclasses.replace(cfg.model, tgt_vocab_size=data.tokenizers.tgt.vocab_size)
    model = Seq2SeqTransformer(model_cfg).train()
    device = choose_device("cpu")
    precision = resolve_precision(cfg.training.precision, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for name, collate in (("off", data.collate), ("all", collates[list(SETTINGS)[-1]])):
        times = []
        for b in batches:
            batch = collate(b)
            t = time.perf_counter()
            with autocast_context(device, precision):
                loss = sequence_loss(model, batch.src, batch.tgt_in, batch.tgt_out, 0, 0.1)
            (loss / batch.n_tgt_tokens).backward()
            optimizer.step()
            optimizer.zero_grad()
            times.append(time.perf_counter() - t)
        print(f"training step ({precision}, 1 thread), augmentation {name}: "
              f"{1000 * statistics.median(times[1:]):.1f} ms/batch")

if __name__ == "__main__":
    main()
