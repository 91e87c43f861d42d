"""Train and translate with a custom encoder, two ways (see README.md beside this file):

1. registered by name: `model.encoder.type: bigru` in the config; the model directory rebuilds it.
2. injected: `run_training(cfg, encoder=my_module)` with an encoder instance that already holds
   (pretrained) weights, which the toolkit does not re-initialise; load the result with
   `load_model_dir(path, encoder=<a new instance>)`.

    python recipes/custom_encoder/run.py --output-dir runs/custom_encoder [--steps 300]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bigru  # noqa: E402 - registers model.encoder.type "bigru"

from seq2seq.training.experiment import run_training  # noqa: E402
from seq2seq.config import load_config
from seq2seq.storage.model_dir import load_model_dir  # noqa: E402
from seq2seq.data.synthetic import make_splits, write_splits  # noqa: E402
from seq2seq.inference.translator import Translator  # noqa: E402


def config(data: dict, out: Path, steps: int, encoder_type: str) -> object:
    (train_src, train_tgt), (valid_src, valid_tgt) = data["train"], data["valid"]
    return load_config(None, [
        f"data.train_src={train_src}", f"data.train_tgt={train_tgt}",
        f"data.valid_src={valid_src}", f"data.valid_tgt={valid_tgt}",
        "tokenizer.vocab_size=400", f"model.encoder.type={encoder_type}",
        "model.d_model=64", "model.heads=2", "model.ffn_dim=128", "model.layers=1",
        f"training.output_dir={out}", f"training.max_steps={steps}", f"training.valid_every={steps}",
        "training.max_tokens=2000", "training.lr=0.003", "training.warmup_steps=30", "training.device=cpu",
        "training.valid_bleu=false", "training.best_metric=loss",
    ])


def main(argv: list[str] | None = None) -> dict[str, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", default="runs/custom_encoder")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--pairs", type=int, default=3000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    out = Path(args.output_dir)
    data = write_splits(make_splits(args.pairs, 100, 0, seed=1), out / "data")
    sentences = ["The man sees the dog.", "The small cat helps the woman."]
    outputs = {}

    # 1. Registered by name: everything goes through the config.
    run_training(config(data, out / "registered", args.steps, "bigru"))
    outputs["registered"] = Translator.load(out / "registered", device="cpu").translate(sentences)

    # 2. Injected: an instance with its own weights, kept as they are when training starts.
    cfg = config(data, out / "injected", args.steps, "text")
    from seq2seq.data import prepare  # the tokenizer decides the vocabulary size

    vocab = prepare(cfg.data, cfg.tokenizer, out / "injected").tokenizers.src.vocab_size
    encoder = bigru.pretrained(vocab, cfg.model.d_model)
    run_training(cfg, encoder=encoder)  # the model starts from the encoder's weights as they are
    loaded = load_model_dir(out / "injected", encoder=bigru.BiGRUEncoder(vocab, cfg.model.d_model))
    outputs["injected"] = Translator(loaded).translate(sentences)
    for how, texts in outputs.items():
        for src, hyp in zip(sentences, texts):
            print(f"{how}: {src} -> {hyp}")
    return outputs


if __name__ == "__main__":
    main()
