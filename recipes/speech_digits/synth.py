"""Synthetic speakers for the spoken-digits recipe: the ten digit words spoken by espeak-ng voices.

A voice is an English espeak-ng base voice (those `espeak-ng --voices=en` lists with espeak's own
formant synthesiser, not MBROLA) + a variant (m1-m8, f1-f5, klatt-klatt6, where the installed
data has them) + a pitch (-p 20-80) and a speed (-s 130-200 words per minute), all drawn from
--seed. Each of the --takes takes of a digit moves the pitch and the speed a little. Every take
is trimmed of leading and trailing silence, resampled to --sample-rate with soxr and
peak-normalised, and written in FSDD's naming, `{digit}_{voice}_{take}.wav` with a voice name
such as `synth-en-us-m3-p45-s160` (no underscores), for make_data.py --synthetic DIR (training
utterances only; val and test stay real recordings). manifest.json records the arguments and the
voices; a second call with the same arguments reuses the files.

    apt-get install espeak-ng
    python recipes/speech_digits/synth.py --out runs/synth --voices 40 --takes 5
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
import tempfile
from itertools import product
from pathlib import Path

import numpy as np
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_data import WORDS  # noqa: E402

# Human-sounding variants of voices/!v (not the whisper, croak or robot ones): male, female, Klatt synthesiser.
VARIANTS = [f"m{i}" for i in range(1, 9)] + [f"f{i}" for i in range(1, 6)] + ["klatt", "klatt2", "klatt3", "klatt4",
                                                                                "klatt5", "klatt6"]
INSTALL = "error: espeak-ng is not installed (not on PATH); install it with `apt-get install espeak-ng`"

log = logging.getLogger("synth")


def espeak() -> str:
    """Path of the espeak-ng program; SystemExit with the command that installs it when missing."""
    exe = shutil.which("espeak-ng")
    if exe is None:
        raise SystemExit(INSTALL)
    return exe


def run_espeak(exe: str, *args: str) -> str:
    """espeak-ng's stdout; SystemExit with its message when it fails."""
    r = subprocess.run([exe, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"error: espeak-ng {' '.join(args)} failed: {r.stderr.strip() or r.returncode}")
    return r.stdout


def base_voices(exe: str) -> list[str]:
    """English voices of espeak-ng's own synthesiser (voice files gmw/...), e.g. en-gb, en-us, en-029."""
    names = set()
    for line in run_espeak(exe, "--voices=en").splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 5 and cols[1].startswith("en") and cols[4].startswith("gmw/"):
            names.add(cols[1].lower())
    return sorted(names)


def variants(exe: str) -> list[str]:
    """The VARIANTS found in espeak-ng's data folder (voices/!v)."""
    first = run_espeak(exe, "--version").strip()
    data = Path(first.split("Data at:")[-1].strip()) if "Data at:" in first else None
    return [v for v in VARIANTS if data is None or (data / "voices" / "!v" / v).is_file()]


def choose_voices(bases: list[str], variant_names: list[str], n: int, seed: int) -> list[dict]:
    """n distinct voices {name, voice, pitch, speed}: voice i takes the (i mod bases)-th base and the
    (i mod variants)-th variant of two seeded orders (so every base and every variant is used as
    evenly as n allows) and a seeded pitch and speed."""
    if not bases or not variant_names:
        raise SystemExit("error: espeak-ng lists no English voice or variant to use")
    rng = np.random.default_rng([seed, 101])
    bases = [bases[k] for k in rng.permutation(len(bases))]
    variant_names = [variant_names[k] for k in rng.permutation(len(variant_names))]
    voices, names = [], set()
    for i in range(n):
        base, variant = bases[i % len(bases)], variant_names[i % len(variant_names)]
        while True:  # a pair comes back after lcm(bases, variants) voices, with another pitch and speed
            pitch, speed = int(rng.integers(20, 81)), int(rng.integers(130, 201))
            name = f"synth-{base}-{variant.lower()}-p{pitch}-s{speed}"
            if name not in names:
                break
        names.add(name)
        voices.append({"name": name, "voice": f"{base}+{variant}", "pitch": pitch, "speed": speed})
    return voices


def trim(x: np.ndarray, rate: int, floor_db: float = -35.0) -> np.ndarray:
    """x without the leading and trailing 10 ms frames quieter than floor_db below the loudest one
    (one frame of margin kept on either side)."""
    hop = max(1, rate // 100)
    frames = len(x) // hop
    if frames == 0:
        return x
    rms = np.sqrt(np.mean(x[: frames * hop].reshape(frames, hop) ** 2, axis=1))
    loud = np.flatnonzero(rms > rms.max() * 10 ** (floor_db / 20))
    if len(loud) == 0:
        return x
    return x[max(0, (loud[0] - 1) * hop): min(len(x), (loud[-1] + 2) * hop)]


def speak(exe: str, voice: str, word: str, pitch: int, speed: int, rate: int, tmp: Path) -> np.ndarray:
    """`word` in `voice` at `rate` Hz: trimmed, peak at 0.9, float32."""
    run_espeak(exe, "-v", voice, "-p", str(pitch), "-s", str(speed), "-w", str(tmp), word)
    x, sr = sf.read(tmp, dtype="float32", always_2d=True)
    x = trim(x.mean(axis=1), sr)
    if sr != rate:
        import soxr

        x = soxr.resample(x, sr, rate, quality="HQ").astype(np.float32)
    peak = float(np.abs(x).max()) if len(x) else 0.0
    if peak == 0.0:
        raise SystemExit(f"error: espeak-ng -v {voice} said nothing for {word!r}")
    return (x * (0.9 / peak)).astype(np.float32)


def synthesize(out: Path, voices: int = 40, takes: int = 5, seed: int = 1, sample_rate: int = 8000) -> dict:
    """Write out/{digit}_{voice}_{take}.wav for `voices` voices x 10 digits x `takes` takes and
    out/manifest.json; reuse them when the manifest says the same arguments made them."""
    if voices < 1 or takes < 1:
        raise SystemExit("error: --voices and --takes must be at least 1")
    exe = espeak()
    version = run_espeak(exe, "--version").split("Data at:")[0].strip()
    args = {"voices": voices, "takes": takes, "seed": seed, "sample_rate": sample_rate, "espeak_ng": version}
    chosen = choose_voices(base_voices(exe), variants(exe), voices, seed)
    names = [f"{d}_{v['name']}_{t}.wav" for v in chosen for d in range(10) for t in range(takes)]
    manifest_path = out / "manifest.json"
    if manifest_path.is_file():
        old = json.loads(manifest_path.read_text())
        if old.get("args") == args and all((out / n).is_file() for n in names):
            log.info("%d synthetic recordings already in %s", len(names), out)
            return old
    out.mkdir(parents=True, exist_ok=True)
    manifest_path.unlink(missing_ok=True)  # written last: no manifest, no reuse of a half-written folder
    wanted = set(names)
    for stale in out.glob("[0-9]_synth-*_*.wav"):  # another call's voices would join the pools
        if stale.name not in wanted:
            stale.unlink()
    from tqdm import tqdm

    with tempfile.TemporaryDirectory() as tmp, tqdm(total=len(names), unit="wav", delay=2) as bar:
        for i, v in enumerate(chosen):
            for d, t in product(range(10), range(takes)):
                rng = np.random.default_rng([seed, i, d, t])  # this take's small change of pitch and speed
                pitch = int(np.clip(v["pitch"] + rng.integers(-5, 6), 0, 99))
                speed = max(80, int(round(v["speed"] * rng.uniform(0.92, 1.08))))
                x = speak(exe, v["voice"], WORDS[d], pitch, speed, sample_rate, Path(tmp) / "x.wav")
                sf.write(out / f"{d}_{v['name']}_{t}.wav", x, sample_rate, subtype="PCM_16")
                bar.update()
    manifest = {"args": args, "voices": chosen, "files": len(names)}
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    log.info("wrote %d recordings of %d voices to %s", len(names), voices, out)
    return manifest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path, help="output directory (WAVs + manifest.json)")
    p.add_argument("--voices", type=int, default=40, help="number of distinct synthetic voices")
    p.add_argument("--takes", type=int, default=5, help="recordings per digit per voice")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sample-rate", type=int, default=8000, help="rate of the written WAVs (the model's)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    synthesize(args.out, args.voices, args.takes, args.seed, args.sample_rate)
    return 0


if __name__ == "__main__":
    sys.exit(main())
