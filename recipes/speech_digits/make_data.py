"""Build spoken digit-string utterances from the Free Spoken Digit Dataset (FSDD).

Each utterance joins 1-7 recordings of ONE speaker (FSDD: `{digit}_{speaker}_{index}.wav`, 8 kHz
mono) with random pauses, a random gain and light white noise, and is transcribed "three one four".
Seeded: the same arguments write the same files.

Splits never share a recording (FSDD's official split: indices 0-4 are test, 5-49 train):

* standard: train from indices 5-44, val from indices 45-49 (held-out train-split recordings, used to
  choose settings), test from indices 0-4; all five speakers in every split.
* --test-speaker S (leave one speaker out): train and val as above from the other four speakers,
  test from all 50 recordings per digit of speaker S, who is never heard in training.

Writes OUT/{train,val,test}.tsv (columns `audio`, `text`, `speaker` and `recordings`, the FSDD files
used; audio paths relative to OUT)
and OUT/wav/<split>/*.wav (16-bit PCM, 8 kHz).

    python recipes/speech_digits/make_data.py --data-dir ../shared/data/fsdd/recordings --out runs/digits/data
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import soundfile as sf

WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
SPEAKERS = ["george", "jackson", "lucas", "nicolas", "yweweler"]
SAMPLE_RATE = 8000
TEST_INDICES = range(5)
TRAIN_INDICES = range(5, 45)
VAL_INDICES = range(45, 50)


def read_recordings(data_dir: Path) -> dict[tuple[str, int, int], np.ndarray]:
    """(speaker, digit, index) -> float32 waveform at 8 kHz."""
    pattern = re.compile(r"^(\d)_([a-z]+)_(\d+)\.wav$")
    out = {}
    for path in sorted(data_dir.glob("*.wav")):
        m = pattern.match(path.name)
        if not m:
            continue
        x, sr = sf.read(path, dtype="float32", always_2d=True)
        if sr != SAMPLE_RATE:
            raise SystemExit(f"error: {path} has {sr} Hz, expected {SAMPLE_RATE}")
        out[(m.group(2), int(m.group(1)), int(m.group(3)))] = x.mean(axis=1)
    if not out:
        raise SystemExit(f"error: no FSDD recordings ({{digit}}_{{speaker}}_{{index}}.wav) in {data_dir}")
    return out


def make_utterance(rng: np.random.Generator, pool: dict[int, list[tuple[str, np.ndarray]]], args: argparse.Namespace):
    """Random digit string from one speaker's `pool` (digit -> (name, recording)) -> (waveform, text, names)."""
    n = int(rng.integers(args.min_digits, args.max_digits + 1))
    digits = rng.integers(0, 10, size=n)
    pieces = [np.zeros(int(rng.uniform(0.05, 0.3) * SAMPLE_RATE), np.float32)]
    names = []
    for i, d in enumerate(digits):
        recs = pool[int(d)]
        name, rec = recs[int(rng.integers(len(recs)))]
        names.append(name)
        pieces.append(rec / (np.abs(rec).max() + 1e-8) * rng.uniform(0.6, 1.0))  # per-digit level varies
        if i < n - 1:
            pieces.append(np.zeros(int(rng.uniform(args.min_pause, args.max_pause) * SAMPLE_RATE), np.float32))
    pieces.append(np.zeros(int(rng.uniform(0.05, 0.3) * SAMPLE_RATE), np.float32))
    x = np.concatenate(pieces).astype(np.float32)
    speech_rms = float(np.sqrt(np.mean(np.concatenate(pieces[1:-1:2]) ** 2)))
    snr_db = rng.uniform(args.min_snr, args.max_snr)
    x = x + rng.normal(0.0, speech_rms / 10 ** (snr_db / 20), size=x.shape).astype(np.float32)
    x *= rng.uniform(0.1, 0.9) / (np.abs(x).max() + 1e-8)  # overall level
    return x, " ".join(WORDS[int(d)] for d in digits), names


def write_split(name: str, count: int, speakers: list[str], indices, recordings, out: Path, rng, args) -> dict:
    pools = {s: defaultdict(list) for s in speakers}
    for (speaker, digit, index), x in recordings.items():
        if speaker in pools and index in indices:
            pools[speaker][digit].append((f"{digit}_{speaker}_{index}", x))
    for s in speakers:
        missing = [d for d in range(10) if not pools[s][d]]
        if missing:
            raise SystemExit(f"error: speaker {s} has no {name} recordings of digits {missing}")
    wav_dir = out / "wav" / name
    wav_dir.mkdir(parents=True, exist_ok=True)
    seconds = 0.0
    with open(out / f"{name}.tsv", "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(["audio", "text", "speaker", "recordings"])
        for i in range(count):
            speaker = speakers[i % len(speakers)]  # balanced speakers
            x, text, names = make_utterance(rng, pools[speaker], args)
            rel = f"wav/{name}/{name}_{i:05d}_{speaker}.wav"
            sf.write(out / rel, x, SAMPLE_RATE, subtype="PCM_16")
            w.writerow([rel, text, speaker, " ".join(names)])
            seconds += len(x) / SAMPLE_RATE
    return {"utterances": count, "hours": round(seconds / 3600, 3), "speakers": speakers}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", required=True, type=Path, help="FSDD recordings/ directory")
    p.add_argument("--out", required=True, type=Path, help="output directory (WAVs + TSVs)")
    p.add_argument("--test-speaker", choices=SPEAKERS, default=None, help="leave this speaker out of training")
    p.add_argument("--n-train", type=int, default=6000)
    p.add_argument("--n-val", type=int, default=300)
    p.add_argument("--n-test", type=int, default=500)
    p.add_argument("--min-digits", type=int, default=1)
    p.add_argument("--max-digits", type=int, default=7)
    p.add_argument("--min-pause", type=float, default=0.05, help="seconds between digits")
    p.add_argument("--max-pause", type=float, default=0.4)
    p.add_argument("--min-snr", type=float, default=20.0, help="white-noise SNR (dB) range")
    p.add_argument("--max-snr", type=float, default=40.0)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    if not args.data_dir.is_dir():
        raise SystemExit(f"error: --data-dir {args.data_dir} is not a directory")
    recordings = read_recordings(args.data_dir)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.test_speaker is None:
        train_speakers = test_speakers = SPEAKERS
        test_indices = TEST_INDICES
    else:
        train_speakers = [s for s in SPEAKERS if s != args.test_speaker]
        test_speakers = [args.test_speaker]
        test_indices = range(50)
    summary = {"args": {k: str(v) for k, v in vars(args).items()}}
    # One generator per split, so that e.g. --n-train does not change the val and test sets.
    for k, (name, count, speakers, indices) in enumerate([
        ("train", args.n_train, train_speakers, TRAIN_INDICES),
        ("val", args.n_val, train_speakers, VAL_INDICES),
        ("test", args.n_test, test_speakers, test_indices),
    ]):
        rng = np.random.default_rng([args.seed, k])
        summary[name] = write_split(name, count, speakers, indices, recordings, args.out, rng, args)
        print(f"{name}: {summary[name]['utterances']} utterances, {summary[name]['hours']} h", file=sys.stderr)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


if __name__ == "__main__":
    main()
