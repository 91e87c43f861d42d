"""Every recipe script at its smallest (a few sentences, a few training steps, models of one tiny layer):
it still runs against the current API and writes the report it promises. (Others: test_benchmarks.py for
recipes/terminology and recipes/custom_encoder, test_digit_strings.py for recipes/digit_strings/run.py,
test_audio.py for recipes/speech_digits/run.py and make_data.py; test_benchmarks.py's SMOKE_TESTED names
the test of every script.)

The experiment recipes (recipes/jobs.py: each step a `seq2seq` command in a subprocess) run here as a
script in one subprocess whose `seq2seq` commands run in that process (`run_in_process`): a command
costs what it does, not a Python and torch start-up each. The recipes' own subprocess path is run by
test_benchmarks.py's terminology recipe test."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import MULTI30K, head_gz, require_data, run_script

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"

# A recipe script run as `__main__` (its argv after the script's path), with recipes/jobs.py's `seq2seq`
# (one `seq2seq` command in a subprocess) replaced by the same command run by the CLI in this process.
IN_PROCESS = r"""
import contextlib, io, runpy, sys, traceback
script, argv = sys.argv[1], sys.argv[2:]
sys.path.insert(0, RECIPES)
import jobs
from seq2seq.cli import cli


def seq2seq(*args, threads=None):
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            cli.main([str(a) for a in args], prog_name="seq2seq", standalone_mode=False)
    except SystemExit as e:
        if e.code:
            raise RuntimeError(f"`seq2seq {args[0]}` failed (exit {e.code})") from None
    except Exception as e:
        traceback.print_exc()
        raise RuntimeError(f"`seq2seq {args[0]}` failed: {e}") from None
    return out.getvalue()


jobs.seq2seq = seq2seq
sys.argv = [script, *argv]
runpy.run_path(script, run_name="__main__")
"""


def run_in_process(script: Path, *argv) -> subprocess.CompletedProcess:
    """`run_script` of a recipe built on recipes/jobs.py, its `seq2seq` commands run in its own process."""
    code = IN_PROCESS.replace("RECIPES", repr(str(RECIPES)))
    result = subprocess.run([sys.executable, "-c", code, str(script), *map(str, argv)], capture_output=True, text=True,
                            cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


# One tiny layer, a small vocabulary and batch, validation and checkpoints every 2 steps: the --set
# overrides of every recipe training below (configs/multi30k_en_de.yaml and configs/student_fast.yaml).
TINY = ["model.d_model=32", "model.heads=2", "model.ffn_dim=64", "model.layers=1", "tokenizer.vocab_size=200",
        "training.max_tokens=600", "training.warmup_steps=2", "training.valid_every=2", "training.checkpoint_every=2",
        "training.precision=fp32", "training.best_metric=loss", "data.subword_alpha=null"]


def sets(*overrides: str) -> list[str]:
    return [arg for override in (*TINY, *overrides) for arg in ("--set", override)]


def scores_in_range(scores: dict) -> bool:
    return set(scores) == {"bleu", "chrf"} and all(0.0 <= v <= 100.0 for v in scores.values())


# --------------------------------------------------------------------------------------------
# recipes/backtranslation
# --------------------------------------------------------------------------------------------

def test_the_backtranslation_recipe_runs_at_its_smallest(m30k_tiny, tmp_path):
    plain = {}
    for split, lang in (("train", "en"), ("train", "de"), ("val", "en"), ("val", "de"), ("test_2016_flickr", "en"),
                        ("test_2016_flickr", "de")):
        plain[split, lang] = tmp_path / f"{split}.{lang}"
        plain[split, lang].write_bytes(gzip.decompress((m30k_tiny / f"{split}.{lang}.gz").read_bytes()))
    mono = tmp_path / "mono.de"
    mono.write_text("\n".join(head_gz(MULTI30K / "val.de.gz", 20)[8:]) + "\n")  # 12 lines the models never saw
    out = tmp_path / "out"
    run_in_process(RECIPES / "backtranslation" / "run.py", "--train", plain["train", "en"], plain["train", "de"],
                   "--mono", mono, "--valid", plain["val", "en"], plain["val", "de"], "--test",
                   plain["test_2016_flickr", "en"], plain["test_2016_flickr", "de"], "--output-dir", out,
                   "--steps", 2, *sets())
    report = json.loads((out / "report.json").read_text())
    assert report["method"] == "beam" and report["tagged"] is True
    assert report["synthetic_pairs"]["input_lines"] == 12 and 0 <= report["synthetic_pairs"]["pairs"] <= 12
    assert list(report["test"]) == ["forward+bt", "baseline"]
    assert all(scores_in_range(s) for s in report["test"].values())
    assert set(report["seconds"]) == {"reverse", "back-translate", "forward+bt", "baseline"}
    for name in ("reverse", "forward_bt", "baseline"):
        assert (out / name / "model.safetensors").is_file()
    for name in ("forward_bt", "baseline"):
        assert len((out / f"test.{name}.hyp").read_text().splitlines()) == 8


def test_the_low_resource_backtranslation_experiment_runs_at_its_smallest(m30k_tiny, tmp_path):
    out = tmp_path / "out"
    run_in_process(RECIPES / "backtranslation" / "multi30k_low_resource.py", m30k_tiny, "--output-dir", out,
                   "--pairs", 100, "--mono-lines", 12, "--steps", 2, "--small-steps", 2, "--only", "beam", "--jobs", 1,
                   *sets())
    assert [len((out / "data" / name).read_text().splitlines()) for name in ("parallel.en", "parallel.de", "mono.de")] \
        == [100, 100, 12]
    results = json.loads((out / "results.json").read_text())
    assert list(results["runs"]) == ["5k", "reverse", "29k", "fwd_beam"]
    for name, run in results["runs"].items():
        assert set(run) == {"val", "test", "train_and_score_seconds"}
        assert scores_in_range(run["val"]) and scores_in_range(run["test"])
        assert yaml.safe_load((out / name / "config.yaml").read_text())["training"]["max_steps"] == 2
    assert list(results["synthetic"]) == ["bt_beam"] and results["synthetic"]["bt_beam"]["input_lines"] == 12
    assert results["chosen_on_val"] == "fwd_beam"
    table = (out / "results.md").read_text().splitlines()
    assert table[0] == "| run | val BLEU | val chrF | test BLEU | test chrF | minutes |"
    assert [row.split(" | ")[0] for row in table[2:6]] == ["| 5k", "| reverse", "| 29k", "| fwd_beam"]


# --------------------------------------------------------------------------------------------
# recipes/distillation
# --------------------------------------------------------------------------------------------

def test_the_distillation_recipe_runs_at_its_smallest(tiny_model_dir, m30k_tiny, tmp_path):
    """The session's tiny model teaches a student of one tiny layer on 24 sentences, 2 steps."""
    train_src = tmp_path / "train.en"
    train_src.write_text("\n".join(head_gz(m30k_tiny / "train.en.gz", 24)) + "\n")
    out = tmp_path / "out"
    run_in_process(RECIPES / "distillation" / "run.py", "--teacher", tiny_model_dir, "--train-src", train_src,
                   "--valid", m30k_tiny / "val.en.gz", m30k_tiny / "val.de.gz", "--test",
                   m30k_tiny / "test_2016_flickr.en.gz", m30k_tiny / "test_2016_flickr.de.gz", "--output-dir", out,
                   "--steps", 2, "--distill-option=--beam=2", *sets("model.encoder_layers=1", "model.decoder_layers=1"))
    report = json.loads((out / "report.json").read_text())
    assert list(report["test"]) == ["teacher beam 5", "student beam 5", "student greedy"]
    for r in report["test"].values():
        assert 0.0 <= r["bleu"] <= 100.0 and 0.0 <= r["chrf"] <= 100.0
        assert r["sentences_per_second"] > 0 and r["sentences_per_second_with_loading"] > 0
    assert report["student_speedup_beam5"] > 0 and set(report["seconds"]) == {"distill", "student_training"}
    assert report["distilled_pairs"]["input_lines"] == 24
    config = yaml.safe_load((out / "student" / "config.yaml").read_text())
    assert config["training"]["max_steps"] == 2 and config["model"]["d_model"] == 32
    for name in ("teacher", "student", "student_greedy"):
        assert len((out / f"test.{name}.hyp").read_text().splitlines()) == 8


# --------------------------------------------------------------------------------------------
# recipes/multilingual
# --------------------------------------------------------------------------------------------

def test_the_multilingual_recipe_runs_at_its_smallest(m30k_tiny, tmp_path):
    out = tmp_path / "out"
    run_in_process(RECIPES / "multilingual" / "run.py", m30k_tiny, "--output-dir", out, "--steps", 2, "--jobs", 1,
                   *sets())
    results = json.loads((out / "results.json").read_text())
    directions = ["en-de", "en-fr", "de-en", "de-fr"]
    assert set(results["scores"]) == {"multi", "bi_en-de", "bi_en-fr", "bi_de-en", "pivot_bi", "pivot_multi"}
    assert list(results["scores"]["multi"]) == directions
    assert all(scores_in_range(s) for run in results["scores"].values() for s in run.values())
    assert set(results["zero_shot_languages"]) == {"bilingual", "multi", "multi pivot"}
    assert all(abs(sum(shares.values()) - 100.0) < 0.2 for shares in results["zero_shot_languages"].values())
    config = yaml.safe_load((out / "multi" / "config.yaml").read_text())
    assert config["training"]["max_steps"] == 6 and [c["tgt_lang"] for c in config["data"]["corpora"]] == ["de", "fr", "en"]
    table = (out / "results.md").read_text().splitlines()
    assert table[0] == "| test_2016_flickr | bilingual BLEU / chrF | multi BLEU / chrF | multi pivot |"
    assert [row.split(" | ")[0] for row in table[2:7]] == \
        ["| en-de", "| en-fr", "| de-en", "| de-fr (zero-shot)", "| de-fr outputs in French"]
    assert len((out / "multi" / "test.de-fr.hyp").read_text().splitlines()) == 8


# --------------------------------------------------------------------------------------------
# recipes/multi30k
# --------------------------------------------------------------------------------------------

def test_the_multi30k_recipe_runs_at_its_smallest(m30k_tiny, tmp_path):
    """A step budget of 2 (as a slow machine's: the adapted settings, then --set), the weights and the
    length penalty chosen on val, installed, and val and test scored with them."""
    out = tmp_path / "out"
    result = run_script(RECIPES / "multi30k" / "run.py", "--data-dir", m30k_tiny, "--output-dir", out, "--steps", 2,
                        "--beam", 2, *sets())
    report = json.loads((out / "recipe_results.json").read_text())
    assert report["pair"] == "en-de" and report["weights"] == "best" and report["beam"] == 2
    assert report["val_search"] and all(0.0 <= v <= 100.0 for v in report["val_search"].values())
    assert f"best lenpen={report['lenpen']:g}" in report["val_search"]
    assert report["machine"]["estimated_steps"] == 2 and "training.max_steps=4" in report["machine"]["overrides"]
    assert report["steps"] == 4  # the adapted budget: 2 steps of the config's batch, as updates of half of it
    for split in ("val", "test_2016_flickr"):
        assert set(report[split]) == {"bleu", "chrf", "ter"} and report[split]["bleu"]["signature"].startswith("nrefs:1")
        assert len((out / f"{split}.hyp.de").read_text().splitlines()) == 8
        assert f"== {split} (en->de, 8 sentences) ==" in result.stdout
    decoding = yaml.safe_load((out / "config.yaml").read_text())["decoding"]
    assert (decoding["beam"], decoding["lenpen"]) == (2, report["lenpen"])


# --------------------------------------------------------------------------------------------
# recipes/captioning
# --------------------------------------------------------------------------------------------

def test_the_captioning_recipe_runs_at_its_smallest(tmp_path):
    """16 training scenes and 4 of each evaluation split, 2 steps of a one-layer model."""
    out = tmp_path / "out"
    tiny = ["model.d_model=32", "model.heads=2", "model.ffn_dim=64", "model.encoder_layers=1", "model.decoder_layers=1",
            "model.encoder.stem_channels=8", "training.max_steps=2", "training.max_time_minutes=null",
            "training.valid_every=2", "training.warmup_steps=2", "training.precision=fp32"]
    result = run_script(RECIPES / "captioning" / "run.py", "--output-dir", out, "--train-images", 16, "--eval-images", 4,
                        "--beam", 2, *(x for s in tiny for x in ("--set", s)))
    report = json.loads((out / "recipe_results.json").read_text())
    assert report["steps"] == 2 and report["sizes"] == {"train": 16, "val": 4, "test": 4, "compositional": 4}
    assert list(report["val_search"]) == ["beam 2, early_stopping false", "greedy", "beam 2, early_stopping true"]
    assert report["decoding"] in report["val_search"]
    for split in ("val", "test", "compositional"):
        r = report[split]
        assert r["images"] == 4 and len((out / f"{split}.hyp.txt").read_text().splitlines()) == 4
        assert all(0.0 <= r[k] <= 100.0 for k in ("exact_match", "canonical_exact_match", "object_accuracy", "bleu",
                                                  "chrf"))
        assert any(line.startswith(f"{split} ") and line.split()[1] == "4" for line in result.stdout.splitlines())
    assert "decoding (chosen on val): " + report["decoding"] in result.stdout
    choice = yaml.safe_load((out / "model" / "config.yaml").read_text())["decoding"]
    assert choice["beam"] == (1 if report["decoding"] == "greedy" else 2)


def test_the_scene_generator_runs_at_its_smallest(tmp_path):
    result = run_script(RECIPES / "captioning" / "scenes.py", tmp_path / "scenes", "--train", 3, "--val", 2, "--test", 2,
                        "--compositional", 2, "--canvas", 32)
    assert result.stdout.strip() == f"wrote 9 scenes to {tmp_path / 'scenes'}"
    for split, n in (("train", 3), ("val", 2), ("test", 2), ("compositional", 2)):
        rows = [json.loads(line) for line in (tmp_path / "scenes" / f"{split}.jsonl").read_text().splitlines()]
        assert len(rows) == n and all((tmp_path / "scenes" / row["image"]).is_file() for row in rows)
        assert all(len(row["caption"]) == 4 and row["objects"] for row in rows)
    assert json.loads((tmp_path / "scenes" / "manifest.json").read_text())


# --------------------------------------------------------------------------------------------
# recipes/digit_strings/strings.py, recipes/speech_digits/synth.py
# --------------------------------------------------------------------------------------------

def test_the_digit_string_generator_runs_at_its_smallest(tmp_path):
    from conftest import DATA

    require_data(DATA / "mnist")
    out = tmp_path / "strings"
    run_script(RECIPES / "digit_strings" / "strings.py", "--mnist", DATA / "mnist", "--out", out, "--train", 4, "--val",
               2, "--test", 3)
    for split, n in (("train", 4), ("val", 2), ("test", 3)):
        header, *rows = (out / f"{split}.tsv").read_text().splitlines()
        assert header == "image\ttext" and len(rows) == n
        for row in rows:
            image, text = row.split("\t")
            assert (out / image).is_file() and text.isdigit() and 1 <= len(text) <= 8
    assert json.loads((out / "manifest.json").read_text())["sizes"] == {"train": 4, "val": 2, "test": 3}


# A stand-in for espeak-ng (not installed on CI): its voice list, its version line (naming DATA, where the
# variants are), and for `-w FILE WORD` a 22,050 Hz WAV of 0.1 s of silence, a tone and silence.
FAKE_ESPEAK = """#!PYTHON
import math, struct, sys, wave
args = sys.argv[1:]
if args == ["--voices=en"]:
    print("Pty Language       Age/Gender VoiceName          File                 Other Languages")
    print(" 5  en-gb           --/M      English_(Great_Britain) gmw/en")
    print(" 5  en-us           --/M      English_(America)  gmw/en-US")
elif args == ["--version"]:
    print("eSpeak NG text-to-speech: 1.51  Data at: DATA")
else:
    rate = 22050
    tone = [int(8000 * math.sin(2 * math.pi * 440 * i / rate)) for i in range(rate // 10)]
    with wave.open(args[args.index("-w") + 1], "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(struct.pack(f"<{len(tone) + rate // 5}h", *([0] * (rate // 10) + tone + [0] * (rate // 10))))
"""


def test_the_synthetic_speaker_script_runs_at_its_smallest(tmp_path):
    """Two voices, one take: 20 WAVs at 8 kHz, trimmed of the stand-in espeak-ng's silence."""
    import soundfile as sf

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    espeak = bin_dir / "espeak-ng"
    data = tmp_path / "espeak-ng-data"
    (data / "voices" / "!v").mkdir(parents=True)
    for variant in ("m3", "f2", "whisper"):  # whisper: not one of the human-sounding variants synth.py uses
        (data / "voices" / "!v" / variant).write_text("")
    espeak.write_text(FAKE_ESPEAK.replace("PYTHON", sys.executable).replace("DATA", str(data)))
    espeak.chmod(0o755)
    out = tmp_path / "voices"
    run_script(RECIPES / "speech_digits" / "synth.py", "--out", out, "--voices", 2, "--takes", 1,
               env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["files"] == 20 and manifest["args"]["espeak_ng"] == "eSpeak NG text-to-speech: 1.51"
    names = [v["name"] for v in manifest["voices"]]
    assert len(set(names)) == 2 and all(n.startswith("synth-en-") for n in names)
    assert sorted(v["voice"].split("+")[1] for v in manifest["voices"]) == ["f2", "m3"]
    files = sorted(out.glob("*.wav"))
    assert len(files) == 20 and {f.name.split("_")[1] for f in files} == set(names)
    x, rate = sf.read(files[0])
    assert rate == 8000 and 0.1 <= len(x) / rate < 0.2  # the 0.1 s tone and a 10 ms frame of margin either side
