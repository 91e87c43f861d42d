"""LoRA against full fine-tuning on a new domain: the share of full fine-tuning's BLEU gain a LoRA adapter
recovers (issue 73's target: >= 80% on a small model).

    python benchmarks/lora_domain.py --work runs/lora-domain          # the figures of docs/fine-tuning.md
    python benchmarks/lora_domain.py --work /tmp/x --base-steps 2 --steps 2 --limit 8 --tokens 300   # smoke test

1. a joint unigram tokenizer trained on the synthetic quickstart corpus (seq2seq.data.synthetic) and Multi30K
   train (en, de), so the base's vocabulary already writes the new domain;
2. a base model trained on the synthetic corpus only (another domain: a small grammar's sentences);
3. from that base, for the same number of steps on Multi30K train: full fine-tuning, and one LoRA run per
   --lora setting (RANK:LR[:TARGETS][:emb], TARGETS a +-joined list of target modules, default all four;
   emb: training.adapter.train_embeddings, the embedding tables train too);
4. BLEU (beam 4, sacreBLEU) of the base and of every run on Multi30K val; the LoRA setting with the best val
   BLEU is chosen, and only then are the base, full fine-tuning and that LoRA run scored on the test set.

recovered = (BLEU(LoRA) - BLEU(base)) / (BLEU(full) - BLEU(base)). Every run trains with 1 thread
(training.threads) and is kept in WORK: a second call reuses the finished runs (their val BLEU in
WORK/NAME/bleu.json) and trains only what is missing, so --lora settings can be added later.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from common import DATA, machine_info, read_gz  # noqa: F401  (common: seq2seq importable)

from seq2seq.config import Config, DataConfig, ModelConfig, TokenizerConfig, TrainingConfig
from seq2seq.config.adapter_section import DEFAULT_TARGETS, AdapterConfig
from seq2seq.config.search import SearchConfig
from seq2seq.data.synthetic import make_splits, write_splits
from seq2seq.inference.translator import Translator
from seq2seq.text.metrics import score
from seq2seq.text.tokenizer import Tokenizer, train_tokenizer

SEARCH = SearchConfig(strategy="beam", beam=4, lenpen=1.0, max_len_a=1.5, max_len_b=10)

FULL_LR = 1e-3


def lora_setting(text: str) -> tuple[str, AdapterConfig, float]:
    """"16:3e-3[:in_proj+w1][:emb]" -> (run name, adapter section (alpha = 2 rank), learning rate); a part
    "emb" sets train_embeddings (the embedding tables train too)."""
    parts = text.split(":")
    rank, lr = int(parts[0]), float(parts[1])
    embeddings = "emb" in parts[2:]
    rest = [part for part in parts[2:] if part != "emb"]
    targets = rest[0].split("+") if rest else list(DEFAULT_TARGETS)
    name = (f"lora-r{rank}-lr{parts[1]}" + (f"-{rest[0].replace('+', '-')}" if rest else "")
            + ("-emb" if embeddings else ""))
    return name, AdapterConfig(type="lora", rank=rank, alpha=2.0 * rank, target_modules=targets,
                               train_embeddings=embeddings), lr


def training(args: argparse.Namespace, out: Path, steps: int, lr: float, warmup: int,
             adapter: AdapterConfig | None = None) -> TrainingConfig:
    return TrainingConfig(output_dir=str(out), seed=1, max_tokens=args.tokens, lr=lr, warmup_steps=warmup,
                          cooldown=0.3, max_steps=steps, valid_every=steps, valid_bleu=False, best_metric="loss",
                          label_smoothing=0.1, device="cpu", precision="fp32", threads=1, log_every=100, keep_last=1,
                          adapter=adapter or AdapterConfig())


def bleu(model_dir: Path, src: list[str], ref: list[str], base: Path | None = None) -> float:
    translator = Translator.load(base or model_dir, device="cpu", adapter=model_dir if base else None)
    hyps = translator.translate(src, strategy="beam", beam=SEARCH.beam)
    return float(score(hyps, [ref], metrics=("bleu",))["bleu"]["score"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", type=Path, required=True, help="where the data, tokenizer and runs are kept")
    p.add_argument("--data-dir", type=Path, default=DATA)
    p.add_argument("--vocab", type=int, default=4000)
    p.add_argument("--base-steps", type=int, default=1000)
    p.add_argument("--steps", type=int, default=600, help="fine-tuning steps, each run")
    p.add_argument("--tokens", type=int, default=2000, help="training.max_tokens")
    p.add_argument("--full-lr", type=float, default=FULL_LR, help="full fine-tuning's lr (its run: WORK/full-lrLR "
                   "unless the default)")
    p.add_argument("--lora", nargs="+", default=["16:3e-3"], help="RANK:LR[:TARGETS][:emb] of each LoRA run")
    p.add_argument("--limit", type=int, default=None, help="only the first N training pairs and val/test sentences")
    p.add_argument("--test", action="store_true", help="also score the chosen runs on the test set")
    p.add_argument("--lora-only", action="store_true",
                   help="train only the LoRA runs (beside a call training full fine-tuning in the same WORK)")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    print(machine_info(1))
    work = args.work
    synthetic = write_splits(make_splits(n_train=args.limit or 20000, seed=1), work / "data")
    m30k = {split: {lang: work / "data" / f"m30k.{split}.{lang}" for lang in ("en", "de")}
            for split in ("train", "val", "test_2016_flickr")}
    for split, files in m30k.items():
        for lang, path in files.items():
            if not path.exists():
                lines = read_gz(args.data_dir / f"{split}.{lang}.gz", args.limit)
                path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    spm = work / "spm.model"
    if not spm.exists():
        texts = [line for files in (synthetic["train"], tuple(m30k["train"].values()))
                 for path in files for line in path.read_text(encoding="utf-8").splitlines()]
        train_tokenizer(texts, args.vocab, TokenizerConfig(vocab_size=args.vocab)).save(spm)

    from seq2seq.training.experiment import run_training

    base = work / "base"
    if not (base / "model.safetensors").exists():
        run_training(Config(
            data=DataConfig(train_src=str(synthetic["train"][0]), train_tgt=str(synthetic["train"][1]),
                            valid_src=str(synthetic["valid"][0]), valid_tgt=str(synthetic["valid"][1]),
                            max_len=64, valid_max_sentences=200),
            tokenizer=TokenizerConfig(src_model=str(spm)),
            model=ModelConfig(d_model=192, heads=4, ffn_dim=768, layers=2, dropout=0.1, share_embeddings=True,
                              tie_output=True),
            training=training(args, base, args.base_steps, 2e-3, min(100, args.base_steps)),
            decoding=SEARCH), config_source="benchmarks/lora_domain.py")
    domain = DataConfig(train_src=str(m30k["train"]["en"]), train_tgt=str(m30k["train"]["de"]),
                        valid_src=str(m30k["val"]["en"]), valid_tgt=str(m30k["val"]["de"]), max_len=64)
    full_dir = work / ("full" if args.full_lr == FULL_LR else f"full-lr{args.full_lr:g}")  # one run per lr
    runs: dict[str, tuple[Path, AdapterConfig | None, float]] = {"full": (full_dir, None, args.full_lr)}
    for text in args.lora:
        name, adapter, lr = lora_setting(text)
        runs[name] = (work / name, adapter, lr)
    val = read_lines(m30k["val"]["en"]), read_lines(m30k["val"]["de"])
    scores = {"base": cached_bleu(base, val)}
    for name, (out, adapter, lr) in runs.items():
        finished = (out / ("adapter.safetensors" if adapter else "model.safetensors")).exists()
        if adapter is None and args.lora_only and not finished:
            continue
        if not finished:
            run_training(Config(data=domain, training=training(args, out, args.steps, lr, min(50, args.steps),
                                                                adapter), decoding=SEARCH),
                         config_source="benchmarks/lora_domain.py", init_from=str(base))
        scores[name] = cached_bleu(out, val, base if adapter else None)
    lora_names = [name for name in runs if name != "full"]
    best = max(lora_names, key=lambda name: scores[name])
    print(f"\nMulti30K val: {unseen_share(spm, synthetic['train'], m30k['val']['de']):.1f}% of the target pieces, "
          f"{unseen_share(spm, synthetic['train'], m30k['val']['en']):.1f}% of the source pieces never occur in the "
          f"synthetic corpus: their embedding rows (the output projection's too, tied) were not trained by the base, "
          f"and LoRA does not train them")
    print(f"\nMulti30K en-de, {args.steps} fine-tuning steps of {args.tokens} tokens from a base trained "
          f"{args.base_steps} steps on the synthetic corpus; BLEU beam {SEARCH.beam}")
    print(f"{'run':<34} {'val BLEU':>9} {'gain':>7} {'recovered':>10}")
    gain_full = scores.get("full", float("nan")) - scores["base"]
    for name in ["base", *(["full"] if "full" in scores else []), *lora_names]:
        gain = scores[name] - scores["base"]
        share = f"{100 * gain / gain_full:.1f}%" if name != "base" and gain_full else "-"
        print(f"{name + (' (chosen on val)' if name == best else ''):<34} {scores[name]:>9.2f} {gain:>7.2f} {share:>10}")
    if args.test:
        test = read_lines(m30k["test_2016_flickr"]["en"]), read_lines(m30k["test_2016_flickr"]["de"])
        figures = {"base": bleu(base, *test), "full": bleu(runs["full"][0], *test),
                   best: bleu(runs[best][0], *test, base=base)}
        gain_full = figures["full"] - figures["base"]
        print(f"\ntest_2016_flickr (scored once, after the choice): {'run':<20} {'BLEU':>6} {'recovered':>10}")
        for name, value in figures.items():
            share = f"{100 * (value - figures['base']) / gain_full:.1f}%" if name != "base" and gain_full else "-"
            print(f"{'':<49} {name:<20} {value:>6.2f} {share:>10}")


def unseen_share(spm: Path, corpus: tuple[Path, Path], text: Path) -> float:
    """The percentage of `text`'s pieces that never occur in `corpus` (both sides)."""
    tok = Tokenizer.load(spm)
    seen = {i for path in corpus for ids in tok.encode(read_lines(path)) for i in ids}
    ids = [i for row in tok.encode(read_lines(text)) for i in row]
    return 100.0 * sum(i not in seen for i in ids) / max(1, len(ids))


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def cached_bleu(out: Path, val: tuple[list[str], list[str]], base: Path | None = None) -> float:
    """The run's val BLEU, computed once and kept in OUT/bleu.json."""
    cache = out / "bleu.json"
    if cache.exists():
        return float(json.loads(cache.read_text())["val_bleu"])
    value = bleu(out, *val, base=base)
    cache.write_text(json.dumps({"val_bleu": value}))
    return value


if __name__ == "__main__":
    main()
