#!/usr/bin/env python
"""Spoken digit strings: build utterances from FSDD, train an audio -> text model, report WER/CER.

    python recipes/speech_digits/run.py --data-dir ../shared/data/fsdd/recordings                 # 20 min
    python recipes/speech_digits/run.py --data-dir ../shared/data/fsdd/recordings --minutes 5     # shorter
    python recipes/speech_digits/run.py --data-dir ... --test-speaker lucas --minutes 8           # leave one out
    python recipes/speech_digits/run.py --data-dir ... --loso --minutes 8                         # all five
    python recipes/speech_digits/run.py --corpus audiomnist --data-dir AudioMNIST                 # 60 speakers
    python recipes/speech_digits/run.py --corpus audiomnist --download AudioMNIST                 # git clone first
    python recipes/speech_digits/run.py --data-dir ... --loso --synthetic runs/synth              # + espeak-ng voices

Standard mode trains on all five speakers' train-split recordings (FSDD indices 5-44; 45-49 make the
validation utterances, on which settings were chosen) and tests on utterances built only from the
official test-split recordings (indices 0-4). Leave-one-speaker-out trains on four speakers and
tests on utterances of the fifth (all 50 recordings per digit; the speaker is never heard in
training). AudioMNIST (--corpus audiomnist) splits by speaker: 48 train, 6 val and 6 test speakers
(--val-speakers, --test-speakers; make_data.py says how they are chosen), so val and test are both
voices never heard in training. Utterances, models and results go under --output-dir OUT: OUT/data,
OUT/model, OUT/{val,test}.hyp.tsv, OUT/results.json (LOSO: OUT/loso/<speaker>/...).

--synthetic DIR (written by synth.py) builds --synthetic-share (default 0.5) of the TRAIN utterances
from espeak-ng voices; val and test stay real recordings. Those utterances go to
OUT/data-synthetic-<share>-<hash of DIR and its manifest> instead of OUT/data, and a model trained on
one data folder is never evaluated as if trained on another (--retrain or another --output-dir).

The decoding chosen on val (the CTC rescoring weight, and --beam when given) is written into each
model directory's defaults (config.yaml; metadata.json's `decoding_chosen_on` says so) before test
is decoded with them, so `seq2seq transcribe OUT/model` decodes as the report did. At its start a
training run logs the steps behind the README's figures (REFERENCE, LOSO_REFERENCE), for comparison.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import logging
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import make_data
import torch

from seq2seq.config import Seq2SeqError
from seq2seq.training.experiment import run_training
from seq2seq.config import load_config
from seq2seq.inference.generator import Transcriber
from seq2seq.storage.model_dir import ModelDir
from seq2seq.text.metrics import cer, wer
from seq2seq.training.throughput import speed_note

log = logging.getLogger("recipe")
# The steps behind the README's figures and their result ("Results": the standard split with the
# current config, 10,035 steps in 20.0 minutes; the full-budget leave-one-speaker-out table, 9,860-10,179).
REFERENCE = (10035, "20 minutes, standard split: test WER 0.21%")
LOSO_REFERENCE = (10000, "20 minutes, leave-one-speaker-out: mean unseen-speaker test WER 9.67%")


def build_data(args: argparse.Namespace, out: Path, test_speaker: str | None, sample_rate: int) -> Path:
    """Write the utterances into `out` unless the same arguments already made them there."""
    argv = ["--data-dir", str(args.data_dir), "--out", str(out), "--seed", str(args.seed),
            "--n-train", str(args.n_train), "--n-val", str(args.n_val), "--n-test", str(args.n_test)]
    if args.corpus != "fsdd" or sample_rate != make_data.SAMPLE_RATE:  # FSDD at 8 kHz: the argv of earlier runs
        argv += ["--corpus", args.corpus, "--sample-rate", str(sample_rate)]
    if args.corpus == "audiomnist":
        argv += ["--val-speakers", str(args.val_speakers), "--test-speakers", str(args.test_speakers)]
    if test_speaker:
        argv += ["--test-speaker", test_speaker]
    if args.synthetic is not None:
        argv += ["--synthetic", str(args.synthetic), "--synthetic-share", str(args.synthetic_share)]
    summary = out / "summary.json"
    if summary.exists():
        old = json.loads(summary.read_text())["args"]
        if old.get("argv") == " ".join(argv):
            log.info("utterances already in %s", out)
            return out
    t = time.time()
    make_data.main(argv)
    data = json.loads(summary.read_text())
    data["args"]["argv"] = " ".join(argv)
    summary.write_text(json.dumps(data, indent=2) + "\n")
    log.info("built utterances in %s (%.0f s)", out, time.time() - t)
    return out


def model_rate(encoder) -> int:
    """The sample rate the model reads: our audio encoder's, or an HF backbone's feature extractor's
    (`type: hf`, config_hf.yaml); the utterances are written at it."""
    rate = getattr(encoder, "sample_rate", None)
    return int(rate if rate is not None else encoder.preprocessor.get("sampling_rate", make_data.SAMPLE_RATE))


def data_dir_name(args: argparse.Namespace) -> str:
    """`data`, or with --synthetic a name that changes with the share, the directory and its manifest
    (so utterances, and the model trained on them, are not reused for other synthetic voices)."""
    if args.synthetic is None:
        return "data"
    manifest = args.synthetic / "manifest.json"
    key = str(args.synthetic.resolve()) + "\n" + (manifest.read_text() if manifest.is_file() else "")
    return f"data-synthetic-{args.synthetic_share:g}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"


def read_table(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def evaluate(transcriber: Transcriber, data: Path, split: str, out: Path, beam: int | None,
             options: dict | None = None) -> dict:
    """Transcribe data/<split>.tsv (with search `options`); WER/CER overall and per speaker; hypotheses to
    out/<split>.hyp.tsv."""
    rows = read_table(data / f"{split}.tsv")
    t = time.time()
    options = ({} if beam is None else {"beam": beam}) | (options or {})
    hyps = transcriber.transcribe([str(data / r["audio"]) for r in rows], **options)
    seconds = time.time() - t
    refs = [r["text"] for r in rows]
    by_speaker: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        by_speaker[r["speaker"]].append(i)
    with open(out / f"{split}.hyp.tsv", "w", encoding="utf-8") as f:
        f.write("audio\tspeaker\tref\thyp\n")
        for r, h in zip(rows, hyps):
            f.write(f"{r['audio']}\t{r['speaker']}\t{r['text']}\t{h}\n")
    result = {
        "utterances": len(rows), "words": sum(len(x.split()) for x in refs),
        "wer": round(wer(hyps, refs), 2), "cer": round(cer(hyps, refs), 2),
        "sentence_errors": sum(h != r for h, r in zip(hyps, refs)), "decode_seconds": round(seconds, 1),
        "per_speaker": {s: {"utterances": len(ix), "wer": round(wer([hyps[i] for i in ix], [refs[i] for i in ix]), 2),
                            "cer": round(cer([hyps[i] for i in ix], [refs[i] for i in ix]), 2)}
                        for s, ix in sorted(by_speaker.items())},
        "examples": [{"ref": r, "hyp": h} for h, r in zip(hyps, refs) if h != r][:10],
    }
    log.info("%s: WER %.2f%%  CER %.2f%%  (%d utterances, %d wrong, %.0f s)", split, result["wer"], result["cer"],
             len(rows), result["sentence_errors"], seconds)
    return result


def run_one(args: argparse.Namespace, out: Path, test_speaker: str | None) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    data = out / data_dir_name(args)
    model_dir = out / "model"
    overrides = [f"data.train={data / 'train.tsv'}", f"data.valid={data / 'val.tsv'}",
                 f"training.output_dir={model_dir}", *args.set]
    if args.minutes is not None:
        overrides.append(f"training.max_time_minutes={args.minutes}")
    cfg = load_config(args.config, overrides)
    train_minutes = None
    done = model_dir / "recipe_trained"  # written when training ended; without it a run was interrupted
    stamp = model_dir / "recipe_data"  # the name of the data folder it was trained on ("data" before it existed)
    if args.retrain and model_dir.exists():
        shutil.rmtree(model_dir)
    if done.exists() or (model_dir / "train_state").exists():
        trained_on = stamp.read_text().strip() if stamp.exists() else "data"
        if trained_on != data.name:
            raise SystemExit(f"error: {model_dir} was trained on {out / trained_on}, not on {data}: pass --retrain "
                             "to train it again, or another --output-dir")
    build_data(args, data, test_speaker, model_rate(cfg.model.encoder))
    if done.exists():
        log.info("%s already holds a trained model: evaluating it (--retrain to train again)", model_dir)
    else:
        resume = (model_dir / "train_state").exists()
        if resume:
            log.info("resuming the interrupted run in %s", model_dir)
        model_dir.mkdir(parents=True, exist_ok=True)
        stamp.write_text(data.name + "\n")
        reference = REFERENCE if test_speaker is None else LOSO_REFERENCE
        log.info(speed_note(None, cfg.training.max_time_minutes, *reference))
        t = time.time()
        run_training(cfg, resume=resume, config_source=str(args.config))
        train_minutes = round((time.time() - t) / 60, 2)
        done.write_text(f"{train_minutes} min wall clock for this call\n")
    metadata = json.loads((model_dir / "metadata.json").read_text()) if (model_dir / "metadata.json").exists() else {}
    torch.set_num_threads(cfg.training.threads or torch.get_num_threads())
    transcriber = Transcriber.load(model_dir, device="cpu")
    result = {
        "test_speaker": test_speaker, "model_dir": str(model_dir), "train_minutes_wall": train_minutes,
        "training": {k: metadata.get(k) for k in ("step", "best_metric", "best_score", "best_step", "training_minutes")
                     if k in metadata},
        "max_time_minutes": cfg.training.max_time_minutes,
    }
    # A model trained with CTC (training.ctc_weight) may be decoded with its CTC head's rescoring
    # (decoding.ctc_weight): the weight is chosen on val WER, test is decoded once with it.
    weights = [0.0, 0.3, 0.5, 0.7, 1.0] if cfg.training.ctc_weight else [0.0]
    # Each candidate is explicit (0: attention only, whatever the config's decoding.ctc_weight says).
    vals = {w: evaluate(transcriber, data, "val", out, args.beam, {"ctc_weight": w}) for w in weights}
    chosen = min(weights, key=lambda w: vals[w]["wer"])  # the first of equals: no rescoring
    if len(weights) > 1:
        log.info("decoding.ctc_weight chosen on val WER: %g (%s)", chosen,
                 ", ".join(f"{w:g}: {v['wer']:.2f}" for w, v in vals.items()))
        result["val_ctc_weight"] = {str(w): v["wer"] for w, v in vals.items()}
    ModelDir(model_dir).set_decoding("recipes/speech_digits/run.py", ctc_weight=chosen,
                                     **({} if args.beam is None else {"beam": args.beam}))
    transcriber = Transcriber.load(model_dir, device="cpu")  # with those defaults, as `seq2seq transcribe` loads it
    if chosen != weights[-1]:  # val.hyp.tsv holds the last candidate's hypotheses: write the chosen one's
        evaluate(transcriber, data, "val", out, None)
    result.update(ctc_weight=chosen, val=vals[chosen], test=evaluate(transcriber, data, "test", out, None))
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--data-dir", type=Path, default=None,
                   help="FSDD recordings/ directory, or (--corpus audiomnist) AudioMNIST's root or data/ folder")
    p.add_argument("--corpus", choices=["fsdd", "audiomnist"], default="fsdd")
    p.add_argument("--download", type=Path, default=None, metavar="DIR",
                   help="AudioMNIST: git clone it (about 1 GB) into DIR first, unless DIR holds it already")
    p.add_argument("--val-speakers", type=int, default=6, help="AudioMNIST: validation speakers")
    p.add_argument("--test-speakers", type=int, default=6, help="AudioMNIST: test speakers")
    p.add_argument("--output-dir", "--out", dest="out", type=Path, default=Path("runs/speech_digits"),
                   help="where utterances, models and results go (default: runs/speech_digits, git-ignored)")
    p.add_argument("--config", type=Path, default=HERE / "config.yaml")
    p.add_argument("--minutes", type=float, default=None, help="training budget (default: the config's, 20)")
    p.add_argument("--test-speaker", action="append", default=[], choices=make_data.SPEAKERS,
                   help="leave this speaker out (repeatable: one model per speaker)")
    p.add_argument("--loso", action="store_true", help="leave-one-speaker-out for all five speakers")
    p.add_argument("--n-train", type=int, default=6000)
    p.add_argument("--n-val", type=int, default=300)
    p.add_argument("--n-test", type=int, default=500)
    p.add_argument("--seed", type=int, default=1, help="data seed")
    p.add_argument("--synthetic", type=Path, default=None, metavar="DIR",
                   help="synth.py's espeak-ng voices: build part of the TRAIN utterances from them (never val/test)")
    p.add_argument("--synthetic-share", type=float, default=None, metavar="F",
                   help="share of the train utterances from --synthetic voices (default 0.5)")
    p.add_argument("--beam", type=int, default=None, help="beam size for evaluation (default: the config's)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    p.add_argument("--retrain", action="store_true", help="train again even if OUT holds a model")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    if args.corpus == "audiomnist" and (args.loso or args.test_speaker):
        p.error("--loso and --test-speaker are FSDD's; AudioMNIST's test speakers are never heard in training")
    if args.download is not None:
        if args.corpus != "audiomnist":
            p.error("--download is for --corpus audiomnist (FSDD: clone Jakobovski/free-spoken-digit-dataset)")
        args.data_dir = make_data.download_audiomnist(args.download)
    if args.data_dir is None:
        p.error("give --data-dir (or, for AudioMNIST, --download DIR)")
    if args.synthetic is None:
        if args.synthetic_share is not None:
            p.error("--synthetic-share needs --synthetic DIR")
    elif not args.synthetic.is_dir():
        p.error(f"--synthetic {args.synthetic} is not a directory (write it with recipes/speech_digits/synth.py)")
    elif args.synthetic_share is None:
        args.synthetic_share = 0.5
    elif not 0.0 <= args.synthetic_share <= 1.0:
        p.error(f"--synthetic-share {args.synthetic_share} is not between 0 and 1")
    if args.corpus == "audiomnist":
        make_data.audiomnist_dir(args.data_dir)  # a wrong directory fails here, before anything is written
    speakers = make_data.SPEAKERS if args.loso else args.test_speaker
    try:
        if not speakers:
            r = run_one(args, args.out, None)
            print(f"\nval  WER {r['val']['wer']:.2f}%  CER {r['val']['cer']:.2f}%")
            test = r["test"]
            print(f"test WER {test['wer']:.2f}%  CER {test['cer']:.2f}%  ({test['utterances']} utterances)")
            for s, v in r["test"]["per_speaker"].items():
                print(f"  {s:9s} WER {v['wer']:6.2f}%  CER {v['cer']:6.2f}%")
            return 0
        rows = []
        for s in speakers:
            r = run_one(args, args.out / "loso" / s, s)
            rows.append((s, r["val"]["wer"], r["test"]["wer"], r["test"]["cer"]))
        print("\nheld-out speaker | val WER (4 seen speakers) | test WER | test CER")
        for s, v, w, c in rows:
            print(f"{s:16s} | {v:6.2f}% | {w:6.2f}% | {c:6.2f}%")
        if len(rows) > 1:
            print(f"{'mean':16s} |        | {sum(r[2] for r in rows) / len(rows):6.2f}% | "
                  f"{sum(r[3] for r in rows) / len(rows):6.2f}%")
        return 0
    except Seq2SeqError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
