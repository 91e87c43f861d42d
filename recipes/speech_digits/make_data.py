"""Build spoken digit-string utterances from the Free Spoken Digit Dataset (FSDD) or AudioMNIST.

Each utterance joins 1-7 recordings of ONE speaker (FSDD: `{digit}_{speaker}_{index}.wav`, 8 kHz
mono) with random pauses, a random gain and light white noise, and is transcribed "three one four".
Seeded: the same arguments write the same files. Recordings at another rate than --sample-rate
(the model's, 8 kHz in config.yaml) are resampled with soxr when read.

Splits never share a recording (FSDD's official split: indices 0-4 are test, 5-49 train):

* standard: train from indices 5-44, val from indices 45-49 (held-out train-split recordings, used to
  choose settings), test from indices 0-4; all five speakers in every split.
* --test-speaker S (leave one speaker out): train and val as above from the other four speakers,
  test from all 50 recordings per digit of speaker S, who is never heard in training.

--corpus audiomnist (a local copy of github.com/soerenab/AudioMNIST: `data/NN/{digit}_{NN}_{index}.wav`,
48 kHz, 60 speakers x 10 digits x 50 recordings, optional `data/audioMNIST_meta.txt`; --data-dir is
the repository root or its data/ folder): the split is by speaker, never by recording. A seeded
shuffle of the speakers, ordered by gender when the meta file gives it, hands --test-speakers (6)
and then --val-speakers (6) evenly spaced speakers to test and val (so each gets its share of the 12
women), the rest (48) to train; every recording of a speaker belongs to that speaker's split.

--synthetic DIR (recordings written by synth.py: the ten digits spoken by espeak-ng voices, in
FSDD's naming `{digit}_{voice}_{take}.wav`) builds --synthetic-share (default 0.5) of the TRAIN
utterances from those voices instead, one voice per utterance, the voices taking turns as the real
speakers do; the rest of train, and all of val and test, stay real recordings. Without it the
output is the same, byte for byte, as before the option existed.

Writes OUT/{train,val,test}.tsv (columns `audio`, `text`, `speaker` and `recordings`, the corpus files
used; audio paths relative to OUT)
and OUT/wav/<split>/*.wav (16-bit PCM, --sample-rate).

    python recipes/speech_digits/make_data.py --data-dir ../shared/data/fsdd/recordings --out runs/digits/data
    python recipes/speech_digits/make_data.py --corpus audiomnist --data-dir AudioMNIST --out runs/amnist/data
    python recipes/speech_digits/make_data.py --data-dir ... --out runs/synth/data --synthetic runs/synth/voices
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import re
import subprocess
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
AUDIOMNIST_NAME = re.compile(r"^(\d)_(\d+)_(\d+)\.wav$")
SYNTHETIC_NAME = re.compile(r"^(\d)_([A-Za-z0-9-]+)_(\d+)\.wav$")  # synth.py's {digit}_{voice}_{take}.wav
AUDIOMNIST_GIT = "https://github.com/soerenab/AudioMNIST.git"

log = logging.getLogger("make_data")


def read_wav(path: Path, rate: int) -> np.ndarray:
    """A recording as a mono float32 waveform [T] at `rate` (soxr HQ resampling when its rate differs)."""
    x, sr = sf.read(path, dtype="float32", always_2d=True)
    x = x.mean(axis=1)
    if sr != rate:
        import soxr

        x = soxr.resample(x, sr, rate, quality="HQ").astype(np.float32)
    return x


def read_recordings(data_dir: Path, rate: int = SAMPLE_RATE) -> dict[tuple[str, int, int], np.ndarray]:
    """FSDD: (speaker, digit, index) -> float32 waveform at `rate`."""
    pattern = re.compile(r"^(\d)_([a-z]+)_(\d+)\.wav$")
    out = {}
    for path in sorted(data_dir.glob("*.wav")):
        m = pattern.match(path.name)
        if m:
            out[(m.group(2), int(m.group(1)), int(m.group(3)))] = read_wav(path, rate)
    if not out:
        raise SystemExit(f"error: no FSDD recordings ({{digit}}_{{speaker}}_{{index}}.wav) in {data_dir}")
    return out


def read_synthetic(folder: Path, rate: int = SAMPLE_RATE) -> dict[tuple[str, int, int], np.ndarray]:
    """synth.py's output: (voice, digit, take) -> float32 waveform at `rate`."""
    if not folder.is_dir():
        raise SystemExit(f"error: --synthetic {folder} is not a directory "
                         "(write it with recipes/speech_digits/synth.py)")
    out = {}
    for path in sorted(folder.glob("*.wav")):
        m = SYNTHETIC_NAME.match(path.name)
        if m:
            out[(m.group(2), int(m.group(1)), int(m.group(3)))] = read_wav(path, rate)
    if not out:
        raise SystemExit(f"error: no synthetic recordings ({{digit}}_{{voice}}_{{take}}.wav) in {folder} "
                         "(write them with recipes/speech_digits/synth.py)")
    return out


# --------------------------------------------------------------------------------------------
# AudioMNIST
# --------------------------------------------------------------------------------------------


def audiomnist_dir(path: Path) -> Path:
    """The folder of AudioMNIST's speaker folders: `path` itself (the corpus's data/ folder) or
    path/data (the repository root). SystemExit naming `path` and the layout otherwise."""
    for folder in (path / "data", path):
        if any(AUDIOMNIST_NAME.match(f.name) for f in folder.glob("[0-9]*/*.wav")):
            return folder
    raise SystemExit(f"error: {path} is not an AudioMNIST directory: expected speaker folders NN/ of "
                     f"{{digit}}_{{NN}}_{{index}}.wav files (e.g. 01/3_01_12.wav) in it or in its data/ folder "
                     f"(the root of a clone of {AUDIOMNIST_GIT})")


def audiomnist_files(folder: Path) -> dict[str, list[tuple[Path, int, int]]]:
    """speaker -> [(path, digit, index)], from the file names in folder/NN/ (other files ignored);
    a file named for another speaker than its folder's is an error."""
    files: dict[str, list[tuple[Path, int, int]]] = defaultdict(list)
    for path in sorted(folder.glob("[0-9]*/*.wav")):
        m = AUDIOMNIST_NAME.match(path.name)
        if not m:
            continue
        if m.group(2) != path.parent.name:
            raise SystemExit(f"error: {path} is named for speaker {m.group(2)} but lies in folder {path.parent.name}")
        files[m.group(2)].append((path, int(m.group(1)), int(m.group(3))))
    return dict(files)


def audiomnist_meta(folder: Path) -> dict[str, dict]:
    """audioMNIST_meta.txt (JSON: speaker -> accent, age, gender, ...) beside the speaker folders or
    one level up; {} when there is none or it cannot be read (a warning)."""
    for path in (folder / "audioMNIST_meta.txt", folder.parent / "audioMNIST_meta.txt"):
        if path.is_file():
            try:
                return json.loads(path.read_text(encoding="utf-8"))
            except (ValueError, OSError) as e:
                log.warning("ignoring %s: %s", path, e)
    return {}


def speaker_split(speakers: list[str], n_val: int, n_test: int, seed: int,
                  group: dict[str, str] | None = None) -> dict[str, list[str]]:
    """Speaker-disjoint {train, val, test} speaker lists: a seeded shuffle, ordered by `group`
    (e.g. gender) where known, from which test and then val take n_test / n_val evenly spaced
    speakers; the rest train."""
    if n_val < 1 or n_test < 1 or n_val + n_test >= len(speakers):
        raise SystemExit(f"error: cannot split {len(speakers)} speakers into train, {n_val} val and {n_test} test "
                         "speakers (each split needs at least one)")
    rng = np.random.default_rng([seed, 7])
    order = sorted((speakers[i] for i in rng.permutation(len(speakers))), key=lambda s: (group or {}).get(s, ""))
    test = [order[int((k + 0.5) * len(order) / n_test)] for k in range(n_test)]
    rest = [s for s in order if s not in test]
    val = [rest[int((k + 0.5) * len(rest) / n_val)] for k in range(n_val)]
    return {"train": sorted(s for s in rest if s not in val), "val": sorted(val), "test": sorted(test)}


def read_audiomnist(data_dir: Path, n_val: int, n_test: int, seed: int, rate: int):
    """-> (recordings {(speaker, digit, index): waveform at `rate`}, {split: speakers}, summary)."""
    folder = audiomnist_dir(data_dir)
    files = audiomnist_files(folder)
    meta = audiomnist_meta(folder)
    gender = {s: str(m.get("gender", "")).lower() for s, m in meta.items() if isinstance(m, dict)}
    split = speaker_split(sorted(files), n_val, n_test, seed, gender)
    log.info("AudioMNIST in %s: %d speakers, %d recordings; reading them at %d Hz", folder, len(files),
             sum(len(v) for v in files.values()), rate)
    recordings = {(s, d, i): read_wav(p, rate) for s in sorted(files) for p, d, i in files[s]}
    summary = {name: {"speakers": speakers, "recordings": sum(len(files[s]) for s in speakers),
                      "gender": {g: sum(gender.get(s, "unknown") == g for s in speakers)
                                 for g in sorted({gender.get(s, "unknown") for s in speakers})}}
               for name, speakers in split.items()}
    return recordings, split, summary


def download_audiomnist(target: Path, url: str = AUDIOMNIST_GIT) -> Path:
    """Clone AudioMNIST (about 1 GB; needs git and the network) into `target` unless it holds a copy
    already; returns its data/ folder. SystemExit with the command to run by hand when it fails."""
    if target.is_dir() and any(target.iterdir()):
        return audiomnist_dir(target)
    command = ["git", "clone", "--depth", "1", url, str(target)]
    log.info("cloning AudioMNIST (about 1 GB): %s", " ".join(command))
    try:
        subprocess.run(command, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"error: cannot clone {url} ({e}); run `{' '.join(command)}` where the network is "
                         f"reachable and pass --data-dir {target}") from None
    return audiomnist_dir(target)


def make_utterance(rng: np.random.Generator, pool: dict[int, list[tuple[str, np.ndarray]]], args: argparse.Namespace):
    """Random digit string from one speaker's `pool` (digit -> (name, recording)) -> (waveform, text, names)."""
    rate = args.sample_rate
    n = int(rng.integers(args.min_digits, args.max_digits + 1))
    digits = rng.integers(0, 10, size=n)
    pieces = [np.zeros(int(rng.uniform(0.05, 0.3) * rate), np.float32)]
    names = []
    for i, d in enumerate(digits):
        recs = pool[int(d)]
        name, rec = recs[int(rng.integers(len(recs)))]
        names.append(name)
        pieces.append(rec / (np.abs(rec).max() + 1e-8) * rng.uniform(0.6, 1.0))  # per-digit level varies
        if i < n - 1:
            pieces.append(np.zeros(int(rng.uniform(args.min_pause, args.max_pause) * rate), np.float32))
    pieces.append(np.zeros(int(rng.uniform(0.05, 0.3) * rate), np.float32))
    x = np.concatenate(pieces).astype(np.float32)
    speech_rms = float(np.sqrt(np.mean(np.concatenate(pieces[1:-1:2]) ** 2)))
    snr_db = rng.uniform(args.min_snr, args.max_snr)
    x = x + rng.normal(0.0, speech_rms / 10 ** (snr_db / 20), size=x.shape).astype(np.float32)
    x *= rng.uniform(0.1, 0.9) / (np.abs(x).max() + 1e-8)  # overall level
    return x, " ".join(WORDS[int(d)] for d in digits), names


def write_split(name: str, count: int, speakers: list[str], indices, recordings, out: Path, rng, args,
                synthetic: dict | None = None, share: float = 0.0) -> dict:
    """`count` utterances from the recordings of `speakers` whose index is in `indices` (None: all);
    with `synthetic` ({(voice, digit, take): waveform}), round(count * share) of them, spread evenly,
    from its voices (all takes) instead. The speakers, and the voices, take turns."""
    voices = sorted({v for v, _, _ in synthetic}) if synthetic else []
    if set(voices) & set(speakers):
        raise SystemExit(f"error: synthetic voices named as real speakers: {sorted(set(voices) & set(speakers))}")
    pools = {s: defaultdict(list) for s in [*speakers, *voices]}
    real_speakers = set(speakers)
    for (speaker, digit, index), x in recordings.items():
        if speaker in real_speakers and (indices is None or index in indices):
            pools[speaker][digit].append((f"{digit}_{speaker}_{index}", x))
    for (voice, digit, take), x in (synthetic or {}).items():
        pools[voice][digit].append((f"{digit}_{voice}_{take}", x))
    for s in pools:
        missing = [d for d in range(10) if not pools[s][d]]
        if missing:
            raise SystemExit(f"error: speaker {s} has no {name} recordings of digits {missing}")
    n_synthetic = round(count * share) if voices else 0
    wav_dir = out / "wav" / name
    wav_dir.mkdir(parents=True, exist_ok=True)
    seconds = 0.0
    with open(out / f"{name}.tsv", "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f, delimiter="\t", lineterminator="\n")
        w.writerow(["audio", "text", "speaker", "recordings"])
        real = synth = 0
        for i in range(count):
            if (i + 1) * n_synthetic // count > i * n_synthetic // count:  # n_synthetic of count, evenly spread
                speaker = voices[synth % len(voices)]
                synth += 1
            else:
                speaker = speakers[real % len(speakers)]  # balanced speakers
                real += 1
            x, text, names = make_utterance(rng, pools[speaker], args)
            rel = f"wav/{name}/{name}_{i:05d}_{speaker}.wav"
            sf.write(out / rel, x, args.sample_rate, subtype="PCM_16")
            w.writerow([rel, text, speaker, " ".join(names)])
            seconds += len(x) / args.sample_rate
    result = {"utterances": count, "hours": round(seconds / 3600, 3), "speakers": speakers}
    if voices:
        result.update(synthetic_utterances=n_synthetic, synthetic_voices=voices)
    return result


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", required=True, type=Path,
                   help="FSDD recordings/ directory, or AudioMNIST's repository root or data/ folder")
    p.add_argument("--corpus", choices=["fsdd", "audiomnist"], default="fsdd")
    p.add_argument("--out", required=True, type=Path, help="output directory (WAVs + TSVs)")
    p.add_argument("--test-speaker", choices=SPEAKERS, default=None, help="FSDD: leave this speaker out of training")
    p.add_argument("--val-speakers", type=int, default=6, help="AudioMNIST: speakers held out for validation")
    p.add_argument("--test-speakers", type=int, default=6, help="AudioMNIST: speakers held out for test")
    p.add_argument("--sample-rate", type=int, default=SAMPLE_RATE, help="rate of the written WAVs (the model's)")
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
    p.add_argument("--synthetic", type=Path, default=None, metavar="DIR",
                   help="synth.py's output: build part of the TRAIN utterances from its voices")
    p.add_argument("--synthetic-share", type=float, default=None, metavar="F",
                   help="share of the train utterances from --synthetic voices (default 0.5)")
    args = p.parse_args(argv)
    if not args.data_dir.is_dir():
        raise SystemExit(f"error: --data-dir {args.data_dir} is not a directory")
    if args.synthetic is None:
        if args.synthetic_share is not None:
            raise SystemExit("error: --synthetic-share needs --synthetic DIR")
    elif args.synthetic_share is None:
        args.synthetic_share = 0.5
    elif not 0.0 <= args.synthetic_share <= 1.0:
        raise SystemExit(f"error: --synthetic-share {args.synthetic_share} is not between 0 and 1")
    skip = () if args.synthetic else ("synthetic", "synthetic_share")  # summary.json as before without them
    summary = {"args": {k: str(v) for k, v in vars(args).items() if k not in skip}}
    if args.corpus == "audiomnist":
        if args.test_speaker is not None:
            raise SystemExit("error: --test-speaker is for FSDD; AudioMNIST's test speakers come from --test-speakers")
        recordings, split, summary["speakers"] = read_audiomnist(
            args.data_dir, args.val_speakers, args.test_speakers, args.seed, args.sample_rate)
        plan = [("train", args.n_train, split["train"], None), ("val", args.n_val, split["val"], None),
                ("test", args.n_test, split["test"], None)]
    else:
        recordings = read_recordings(args.data_dir, args.sample_rate)
        if args.test_speaker is None:
            train_speakers = test_speakers = SPEAKERS
            test_indices = TEST_INDICES
        else:
            train_speakers = [s for s in SPEAKERS if s != args.test_speaker]
            test_speakers = [args.test_speaker]
            test_indices = range(50)
        plan = [("train", args.n_train, train_speakers, TRAIN_INDICES), ("val", args.n_val, train_speakers, VAL_INDICES),
                ("test", args.n_test, test_speakers, test_indices)]
    synthetic = None
    if args.synthetic is not None:
        synthetic = read_synthetic(args.synthetic, args.sample_rate)
        voices = sorted({v for v, _, _ in synthetic})
        summary["synthetic"] = {"dir": str(args.synthetic), "share": args.synthetic_share, "voices": voices,
                                "recordings": len(synthetic)}
        print(f"synthetic: {len(voices)} voices, {len(synthetic)} recordings from {args.synthetic} for "
              f"{args.synthetic_share:.0%} of train", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    # One generator per split, so that e.g. --n-train does not change the val and test sets.
    for k, (name, count, speakers, indices) in enumerate(plan):
        rng = np.random.default_rng([args.seed, k])
        extra = {"synthetic": synthetic, "share": args.synthetic_share} if synthetic and name == "train" else {}
        summary[name] = write_split(name, count, speakers, indices, recordings, args.out, rng, args, **extra)
        print(f"{name}: {summary[name]['utterances']} utterances, {summary[name]['hours']} h", file=sys.stderr)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


if __name__ == "__main__":
    main()
