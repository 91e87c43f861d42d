"""Benchmarks and recipes at their smallest (a few sentences, the session's tiny model, a few training
steps): they still run against the current API and print or write what they promise. (Others:
test_export.py for deploy.py and ctranslate2_agreement.py, test_terminology.py for terminology.py,
test_recipes_smoke.py for most recipes; SMOKE_TESTED at the end names the test of every script, and
a script without one fails the suite.)"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import MULTI30K, head_gz, run_benchmark, run_script

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"


@pytest.fixture(scope="session")
def bench_cache(tmp_path_factory) -> Path:
    """The --cache-dir of the benchmarks that train the joint 8000-piece Multi30K tokenizer
    (benchmarks/common.py `tokenizer`, a few seconds): trained by the first of them, shared by the rest."""
    return tmp_path_factory.mktemp("seq2seq-bench")


def test_the_ensemble_cost_benchmark_runs_at_its_smallest(tiny_model_dir):
    out = run_benchmark("ensemble_cost.py", "--model-dir", tiny_model_dir, "--data-dir", MULTI30K,
                        "--members", 1, 2, "--beam", 2, "--limit", 8, "--repeats", 1, "--threads", 1).stdout
    assert "beam 2, 8 sentences, the faster of 1 runs" in out
    rows = re.findall(r"^(\d) members?\s+([\d.]+) s\s+([\d.]+)x$", out, re.M)
    assert [n for n, _, _ in rows] == ["1", "2"] and rows[0][2] == "1.00"
    assert all(float(s) > 0 and float(x) > 0 for _, s, x in rows)


def test_the_ensemble_benchmark_runs_at_its_smallest(tiny_model_dir, tmp_path):
    member = tmp_path / "member"
    shutil.copytree(tiny_model_dir, member)  # the benchmark writes its averaged weights into the first member
    out = run_benchmark("ensemble.py", "--members", member, member, "--data-dir", MULTI30K, "--beam", 2,
                        "--last", 2, "--limit", 8, "--threads", 1).stdout
    assert "val 8 and test_2016_flickr 8 sentences" in out
    table = out.split("time\n", 1)[1].strip().splitlines()
    rows = {line[:48].strip(): line[48:].split() for line in table}
    assert list(rows) == ["member 1", "member 2", "ensemble of 2 (mean prob)",
                          "member 1, last 2 checkpoints averaged", "member 1, last 2 checkpoints as an ensemble"]
    assert rows["member 1"][2] == "1.00x"
    assert all(0.0 <= float(v) <= 100.0 for val, test, _ in rows.values() for v in (val, test))
    # identical members: the same probabilities, the same translations
    assert rows["member 1"][:2] == rows["member 2"][:2] == rows["ensemble of 2 (mean prob)"][:2]
    assert (member / "model.avg2.bench.safetensors").is_file()


def test_the_constraints_benchmark_runs_at_its_smallest(tiny_model_dir):
    out = run_benchmark("constraints.py", "--model-dir", tiny_model_dir, "--data-dir", MULTI30K, "--beam", 3,
                        "--limit", 8, "--threads", 1).stdout
    assert "test_2016_flickr en->de, 8 sentences, beam 3" in out and "unconstrained: BLEU" in out
    # the constrained beam meets every constraint it did not give up on at the length limit
    coverage = re.search(r"coverage [\d.]+% of all, ([\d.]+)% of the (\d+) satisfiable", out)
    assert coverage and (coverage[1] == "100.0" or coverage[2] == "0")
    assert "constrained:   BLEU" in out
    starts = re.findall(r"prefix of (\d) reference word\(s\).*; (\d+)/(\d+) outputs start with their prefix", out)
    assert [(k, n, of) for k, n, of in starts] == [("1", "8", "8"), ("2", "8", "8"), ("4", "8", "8")]
    glossary = re.search(r"glossary from the training data: (\d+) entries.*term accuracy ([\d.]+)% -> ([\d.]+)%",
                         out)
    assert glossary and int(glossary[1]) > 0 and 0.0 <= float(glossary[3]) <= 100.0


TERMINOLOGY_SYSTEMS = ["plain model", "plain model, constrained beam", "terms model, no terms",
                       "terms model, annotated", "terms model, constrained beam", "terms model, both"]


def test_the_terminology_recipe_runs_at_its_smallest(multi30k_small, tmp_path):
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()
    splits = {"train": (multi30k_small["train.en"], multi30k_small["train.de"]),
              "val": (multi30k_small["val.en"], multi30k_small["val.de"])}
    for split, (en, de) in splits.items():  # the benchmark reads .gz files
        for lang, path in (("en", en), ("de", de)):
            with gzip.open(data / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write(path.read_text(encoding="utf-8"))
    for lang in ("en", "de"):
        with gzip.open(data / f"test_2016_flickr.{lang}.gz", "wt", encoding="utf-8") as f:
            f.write("\n".join(head_gz(MULTI30K / f"test_2016_flickr.{lang}.gz", 30)) + "\n")
    tiny = ["model.d_model=32", "model.heads=2", "model.ffn_dim=64", "model.layers=1", "tokenizer.vocab_size=200",
            "training.valid_every=3", "training.checkpoint_every=3", "training.max_tokens=500",
            "training.best_metric=loss", "training.precision=fp32"]
    result = run_script(RECIPES / "terminology" / "run.py", data, "--output-dir", out, "--shares", 0.5, "--steps", 3,
                        "--limit", 8, "--jobs", 1, "--threads", 1, *(x for s in tiny for x in ("--set", s)),
                        "--terms-set", "data.terminology.resample=true")
    assert f"chosen on val: share0.5; report: {out / 'report.json'}" in result.stdout
    for name, share in (("plain", 0.0), ("share0.5", 0.5)):
        assert (out / name / "model.safetensors").is_file()
        config = yaml.safe_load((out / name / "config.yaml").read_text())
        assert config["data"]["terminology"]["share"] == share and config["training"]["max_steps"] == 3
        assert config["data"]["terminology"]["resample"] is (name != "plain")  # --terms-set: the terms models only
        assert config["model"]["d_model"] == 32
    report = json.loads((out / "report.json").read_text())
    assert report["steps"] == 3 and report["base_forms"] is False
    assert list(report["val"]) == ["share0.5"] and report["chosen"] == "share0.5"
    assert report["val"]["share0.5"]["split"] == "val" and report["test"]["split"] == "test_2016_flickr"
    assert report["test"] == json.loads((out / "share0.5.test.json").read_text())
    for table in (report["val"]["share0.5"], report["test"]):
        assert len(table["terms"]) == 8 and any(table["terms"])
        rows = {r["system"]: r for r in table["rows"]}
        assert list(rows) == TERMINOLOGY_SYSTEMS
        for r in rows.values():
            assert 0.0 <= float(r["BLEU"]) <= 100.0 and 0.0 <= float(r["chrF"]) <= 100.0
            assert 0.0 <= float(r["terms"].rstrip("%")) <= 100.0 and float(r["length"]) >= 0  # 3 steps: may be empty
            assert float(r["time"].rstrip("x")) > 0
        assert rows["plain model"]["terms"] == "0.0%"  # the terms are the words the plain model's output misses
        assert rows["plain model"]["time"] == "1.00x"
        accuracy = {name: float(r["terms"].rstrip("%")) for name, r in rows.items()}
        assert accuracy["terms model, constrained beam"] > accuracy["terms model, no terms"]


def test_the_decode_benchmark_runs_at_its_smallest(tiny_model_dir, bench_cache):
    out = run_benchmark("decode.py", "--skip-hf", "--model-dir", tiny_model_dir, "--limit", 8, "--batch-size", 4,
                        "--repeats", 1, "--threads", 1, "--cache-dir", bench_cache).stdout
    assert f"trained model {tiny_model_dir}: 8 sentences at natural lengths, batches of 4" in out
    assert "seq2seq decoder weights pre-packed" not in out  # --skip-hf: no equal-work part
    rows = re.findall(r"^(greedy|beam5)\s+(fp32|bf16|int8)\s+([\d.]+)\s+(\d+)\s+([\d.]+)x\s+([\d.]+)\s+([-+][\d.]+)",
                      out, re.M)
    assert [(mode, p) for mode, p, *_ in rows] == [(m, p) for m in ("greedy", "beam5") for p in ("fp32", "bf16", "int8")]
    for mode, precision, sentences_per_s, tokens_per_s, speed_up, bleu, delta in rows:
        assert float(sentences_per_s) > 0 and int(tokens_per_s) > 0 and float(speed_up) > 0
        assert 0.0 <= float(bleu) <= 100.0
        if precision == "fp32":
            assert speed_up == "1.00" and delta == "+0.00"
    assert "BLEU signature: nrefs:1|" in out
    assert (bench_cache / "m30k-joint-8000.model").is_file()


def test_the_beam_select_benchmark_runs_at_its_smallest(bench_cache):
    out = run_benchmark("beam_select.py", "--batch-sizes", 2, 4, "--beam", 2, "--repeats", 1, "--limit", 4,
                        "--threads", 1, "--cache-dir", bench_cache).stdout
    assert "beam 2, 4 sentences, median of 1 runs each" in out
    # the variants chose the same hypotheses (the benchmark exits otherwise), each timed
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x, ([\d.]+)x$", out, re.M)
    assert [(size, per_step) for size, per_step, *_ in rows] == [("2", "4"), ("4", "8")]
    assert all(float(v) >= 0 for row in rows for v in row[2:5]) and all(float(v) > 0 for row in rows for v in row[5:])


def test_the_train_speed_benchmark_runs_at_its_smallest(bench_cache):
    from seq2seq.accel.device import cpu_bf16_is_native

    out = run_benchmark("train_speed.py", "--skip-hf", "--steps", 1, "--warmup", 1, "--repeats", 1,
                        "--max-tokens", 200, "--curve-steps", 2, "--threads", 1, "--cache-dir", bench_cache).stdout
    batches = re.search(r"batches: 2 of ~(\d+) target tokens \(1 warm-up \+ 1 timed\), ([\d.]+) GFLOP per step", out)
    assert batches and 0 < int(batches[1]) <= 200 and float(batches[2]) > 0
    precisions = ["fp32", "bf16"] if cpu_bf16_is_native() else ["fp32"]
    assert re.search(r"matmul peak \(1024\^3\): " + ", ".join(rf"{p} \d+ GFLOP/s" for p in precisions) + "$", out, re.M)
    rows = re.findall(r"^ours (fp32|bf16)\s+([\d,]+)\s+([\d.]+)\s+(\d+)\s+(\d+)%\s+(-?\d+)$", out, re.M)
    assert [p for p, *_ in rows] == precisions and "HF Marian" not in out
    assert all(int(rate.replace(",", "")) > 0 and float(step) > 0 for _, rate, step, *_ in rows)
    if "bf16" in precisions:
        losses = re.findall(r"step\s+\d+: fp32 ([\d.]+)  bf16 ([\d.]+)", out)
        assert len(losses) == 2 and all(0 < float(v) < 20 for pair in losses for v in pair)
        assert "mean |bf16 - fp32| / fp32 over the last 1 steps" in out


def test_the_custom_encoder_recipe_runs_at_its_smallest(tmp_path):
    out = run_script(RECIPES / "custom_encoder" / "run.py", "--output-dir", tmp_path, "--steps", 2,
                     "--pairs", 100).stdout
    for how in ("registered", "injected"):
        for src in ("The man sees the dog.", "The small cat helps the woman."):
            assert re.search(rf"^{how}: {re.escape(src)} -> \S", out, re.M)
        assert (tmp_path / how / "model.safetensors").is_file()
    config = {how: yaml.safe_load((tmp_path / how / "config.yaml").read_text()) for how in ("registered", "injected")}
    assert config["registered"]["model"]["encoder"]["type"] == "bigru"
    assert config["injected"]["model"]["encoder"]["type"] == "text"  # the instance was given, not named
    assert all(c["training"]["max_steps"] == 2 for c in config.values())
    assert (tmp_path / "data" / "train.en").read_text().count("\n") == 100


def test_the_glossary_benchmark_runs_at_its_smallest():
    out = run_benchmark("glossary.py", "--entries", 300, "--sentences", 30, "--old-sentences", 10).stdout
    assert re.search(r"^300 entries, 30 sentences \(\d+ characters on average\)$", out, re.M)
    found = re.search(r"^the matchers agree on the 10 sentences both ran; (\d+) terms found in all 30", out, re.M)
    assert found and int(found[1]) > 0  # a quarter of the words start a term
    assert re.search(r"^build:  new [\d.]+ s, old [\d.]+ s \(compiling 300 expressions\)$", out, re.M)
    assert re.search(r"^match 30 sentences:  new [\d.]+ s .*\(measured on 10 sentences, [\d.]+ s, scaled to 30\)$",
                     out, re.M)
    assert re.search(r"^ratio \(old / new\), matching: [\d,]+x; build and match: [\d,.]+x$", out, re.M)


def test_the_refactor_benchmark_finds_a_checkout_decodes_as_itself(tiny_model_dir, m30k_tiny, tmp_path):
    out = tmp_path / "ab.json"
    result = run_benchmark("refactor_ab.py", "--base", ROOT, "--model-dir", tiny_model_dir, "--data-dir", m30k_tiny,
                           "--limit", 4, "--rounds", 1, "--json", out)
    assert "outputs and scores bit-identical between the checkouts" in result.stdout
    rows = [line for line in result.stdout.splitlines() if line.startswith(("| beam5", "| constrained", "| greedy"))]
    assert len(rows) == 3
    figures = json.loads(out.read_text())
    assert figures["identical"] is True and set(figures["modes"]) == {"beam5", "constrained", "greedy"}
    assert all(v > 0 for mode in figures["modes"].values() for v in mode.values())


def test_the_slow_core_benchmark_runs_a_command_on_its_core():
    """The command pinned to core 0 beside the busy loop, its exit status passed on. (--probe, which trains the
    quickstart's model alone and slowed, is left out: tests/test_slow_core.py checks its parts.)"""
    probe = "import os, sys; print(sorted(os.sched_getaffinity(0))); sys.exit(3)"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "slow_core.py"), "--slowdown", "1.5", "--core", "0",
                             "--", sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert result.returncode == 3, result.stderr
    assert result.stdout == "[0]\n"
    assert result.stderr == "core 0: a busy loop at nice 3 leaves the command 66.1% of it (a 1.51x slowdown)\n"


def test_the_probe_benchmark_runs_at_its_smallest(tiny_model_dir):
    """The session model's config with a step budget of 4 inside a minute: the estimate is the step budget, which
    the run then trains (ratio 1.00, exit 0)."""
    out = run_benchmark("probe.py", "--config", tiny_model_dir / "config.yaml", "--minutes", 1, "--device", "cpu",
                        "--set", "training.max_steps=4").stdout
    assert f"run: {tiny_model_dir / 'config.yaml'} training.max_steps=4, 1 minutes, device cpu" in out
    assert re.search(r"^probe \([\d.]+ s\): a step [\d.]+ s, warm-up [\d.]+ s more, a validation [\d.]+ s, "
                     r"a save [\d.]+ s$", out, re.M)
    assert re.search(r"^estimated 4 steps; trained 4 in [\d.]+ min \(stopped: max_steps\): 1.00x the estimate$", out,
                     re.M)


TINY_MODEL = ["model.d_model=32", "model.heads=2", "model.ffn_dim=64", "model.layers=1", "tokenizer.vocab_size=200",
              "training.max_tokens=600", "training.precision=fp32"]


def sets(overrides: list[str]) -> list[str]:
    return [arg for override in overrides for arg in ("--set", override)]


def test_the_subword_sampling_benchmark_runs_at_its_smallest(m30k_tiny):
    out = run_benchmark("subword_sampling.py", "--data-dir", m30k_tiny, "--steps", 1, "--warmup", 0, "--threads", 1,
                        *sets(TINY_MODEL)).stdout
    for name in ("best segmentation", "sampled, alpha 0.3"):
        assert re.search(rf"^{name}: \d+ batches per epoch, [\d.]+ s to segment and batch it$", out, re.M)
        row = re.search(rf"^{name}\s+(\d+)\s+(\d+)$", out, re.M)
        assert row and int(row[1]) >= 0 and 0 < int(row[2]) <= 600
    assert re.search(r"^sampled / best: [\d.]+x the time per step, [\d.]+x the target tokens; a time budget trains "
                     r"[\d.]+x the steps$", out, re.M)


def test_the_augmentation_benchmark_runs_at_its_smallest(tmp_path):
    """8 utterances of 0.3 s (tones), 2 batches of a few (of the 4 or more their max_tokens makes), a one-layer
    model."""
    import numpy as np
    import soundfile as sf

    rows = ["audio\ttext"]
    for i in range(8):
        t = np.arange(2400) / 8000
        sf.write(tmp_path / f"{i}.wav", (0.3 * np.sin(2 * np.pi * (300 + 100 * (i % 4)) * t)).astype(np.float32), 8000)
        rows.append(f"{i}.wav\t{['zero', 'one', 'two', 'three'][i % 4]}")
    (tmp_path / "train.tsv").write_text("\n".join(rows) + "\n")
    tiny = ["training.max_tokens=12", "model.d_model=32", "model.heads=2", "model.ffn_dim=64", "model.encoder_layers=1",
            "model.decoder_layers=1", "model.encoder.conv_channels=8", "tokenizer.vocab_size=15"]
    out = run_benchmark("augmentation.py", "--train", tmp_path / "train.tsv", "--batches", 2, *sets(tiny)).stdout
    assert re.search(r"^2 batches of [\d.]+ utterances$", out, re.M)
    assert re.search(r"^collate, augmentation off: [\d.]+ ms/batch$", out, re.M)
    settings = re.findall(r"^collate, (.+): [\d.]+ ms/batch \(\+-?[\d.]+\)$", out, re.M)
    assert settings == ["speed [0.9, 1.0, 1.1]", "vtlp [0.9, 1.1]", "noise_prob 1 (white, pink)", "gain_prob 1",
                        "reverb_prob 1", "all: speed, vtlp, noise 0.5, gain 0.5, reverb 0.3"]
    steps = re.findall(r"^training step \((?:fp32|bf16), 1 thread\), augmentation (off|all): [\d.]+ ms/batch$", out, re.M)
    assert steps == ["off", "all"]


def test_the_data_scale_benchmark_runs_at_its_smallest(tmp_path):
    """One corpus of 500 pairs (300 distinct, repeated), 2 steps of a one-layer model: the cold run only, no peer
    run (each run is a `seq2seq train` process of ~10 s)."""
    work = tmp_path / "work"
    out = run_benchmark("data_scale.py", "--sizes", 0.0005, "--steps", 2, "--distinct", 300, "--peer-pairs", 0,
                        "--cold-only", "--work", work, *sets([*TINY_MODEL, "training.threads=1"])).stdout
    rows = re.findall(r"^\| 0.0005M \| 0 \| (cold|warm) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|.* \| ([\d.]+) \| - \|$",
                      out, re.M)
    assert [kind for kind, *_ in rows] == ["cold"]
    for _, ready, first, rss, speed in rows:
        assert 0 < float(ready) <= float(first) and 0 < float(rss) < 2 and float(speed) > 0
    assert re.search(r"^peak RSS of the training process, largest: [\d.]+ GiB \(target < 2 GiB\)$", out, re.M)
    lines = (work / "train-0.0005M-300.en").read_text().splitlines()
    assert len(lines) == 500 and lines[300:] == lines[:200]
    assert not list(work.glob("run-*"))  # the training runs are removed, the corpora kept


def test_the_kill_soak_benchmark_runs_at_its_smallest(tmp_path):
    """One kill (during the first checkpoint write) of a 4-step run on 100 generated pairs, its resume compared with
    the reference run: three `seq2seq train` processes of ~10 s."""
    out = run_benchmark("kill_soak.py", "--kills", 1, "--steps", 4, "--valid-every", 4, "--checkpoint-every", 1,
                        "--n-train", 100, "--work-dir", tmp_path / "soak").stdout
    assert re.search(r"^reference run: 4 steps in [\d.]+ s", out, re.M)
    assert re.search(r"^kill  1 \(checkpoint write, +[\d.]+ s after the start\): train_state at step (-|\d+)$", out,
                     re.M)
    # (a round whose saves were all too quick to catch ends unkilled, and another one starts)
    rounds = re.findall(r"^round done after ([01]) kills: final training loss (\S+) \(reference (\S+)\), largest "
                        r"weight difference (\S+), 0 failures$", out, re.M)
    assert rounds and rounds[-1][0] == "1" and all(loss == ref and float(diff) <= 1e-6 for _, loss, ref, diff in rounds)
    assert re.search(rf"^1 kills in {len(rounds)} rounds \({len(rounds) + 1} starts\); 0 failures$", out, re.M)


def test_the_serve_hold_benchmark_runs_at_its_smallest(tmp_path):
    """A 2-step text model, 2 clients for 2 s per phase, a 1 s budget: the pathological request is cut at it, and
    SIGTERM with it in flight exits 0 in time."""
    out = run_benchmark("serve_hold.py", "--clients", 2, "--seconds", 2, "--budget", 1, "--steps", 2,
                        "--work-dir", tmp_path / "hold").stdout
    assert re.search(r"^with the pathological request: \d+ client requests \(2 clients\), latency p50 \d+ ms, p99 \d+ ms, "
                     r"max \d+ ms; /health p50 \d+ ms, p99 \d+ ms", out, re.M), out
    assert re.search(r"^the pathological request: 504 after 1\.\d\d s \(budget 1 s\)$", out, re.M), out
    assert re.search(r"^SIGTERM with the pathological request in flight: exit 0 after", out, re.M), out
    assert out.rstrip().endswith("0 failures")


def test_the_serve_soak_benchmark_runs_at_its_smallest(tmp_path):
    """The audio model (2 training steps) served to 2 clients for 2 s, valid and invalid requests mixed. (The text
    and image models differ in their model's config and requests only; a soak of each would cost ~15 s more.)"""
    out = run_benchmark("serve_soak.py", "--models", "audio", "--seconds", 2, "--clients", 2, "--steps", 2,
                        "--rss-growth", 1.0, "--work-dir", tmp_path / "soak").stdout
    line = re.search(r"^audio: \d+ s, 2 clients: (\d+) valid requests answered \([\d.]+/s\), (\d+) invalid ones "
                     r"refused; 5xx other than 503: 0; latency p50 \d+ ms, p99 \d+ ms; RSS \d+ MB after warm-up", out, re.M)
    assert line and int(line[1]) > 0 and int(line[2]) > 0
    statuses = re.search(r"^  statuses: (.+)$", out, re.M)[1].split(", ")
    assert all(re.fullmatch(r"(valid 200|valid 503|invalid (403|404|415|422)): \d+", s) for s in statuses), statuses
    assert out.rstrip().endswith("0 failures")
    config = yaml.safe_load((tmp_path / "soak" / "audio_model" / "config.yaml").read_text())
    assert config["training"]["max_steps"] == 2 and config["model"]["encoder"]["type"] == "audio"


def test_the_real_text_benchmark_runs_at_its_smallest(tiny_model_dir, multi30k_small):
    out = run_benchmark("real_text.py", tiny_model_dir, "--data-dir", multi30k_small["val.en"].parent,
                        "--split", "val", "--limit", 6, "--beam", 2, "--threads", 1).stdout
    assert "val (6 sentences), beam 2" in out
    rows = dict(re.findall(r"^(\S.*?)\s{2,}(\S+(?: of \d+)?)\s{2,}\S+(?: of \d+)?$", out, re.M))
    assert re.fullmatch(r"\d+ of 6", rows["paragraphs of 3: sentences dropped"])
    for name in ("paragraphs of 3 (2 lines)", "UPPER CASE", "Title Case", "typos in 1-2 words", "looped outputs",
                 "time of the rows"):
        assert any(row.startswith(name) for row in rows), (name, out)


def test_the_real_text_spans_benchmark_runs_at_its_smallest(tiny_model_dir):
    out = run_benchmark("real_text_spans.py", tiny_model_dir, "--data-dir", MULTI30K,
                        "--split", "val", "--limit", 6, "--beam", 2, "--align-pairs", 200).stdout
    assert "(6 sentences of val)" in out
    rows = dict(re.findall(r"^(engine alone|spans, layer -1L?) +(\S+%)", out, re.M))
    assert set(rows) == {"engine alone", "spans, layer -1", "spans, layer -1L"}, out
    # masked spans come back verbatim, whatever the model writes, with or without the word lexicon
    assert rows["spans, layer -1"] == rows["spans, layer -1L"] == "100.0%", out


def test_the_sentence_splitting_benchmark_runs_at_its_smallest():
    out = run_benchmark("sentence_splitting.py", "--data-dir", MULTI30K, "--limit", 30, "--repeats", 1,
                        "--langs", "en").stdout
    line = re.search(r"^en +documents\.split +(\d+) of 10 .* (\d+) of 12 ", out, re.M)
    assert line and int(line[2]) == 12  # every hand-made case split as written


# --------------------------------------------------------------------------------------------
# Every benchmark and recipe script has a smoke test
# --------------------------------------------------------------------------------------------

# script -> the test that runs it at its smallest (as a subprocess, or its main()) and checks what it writes.
SMOKE_TESTED = {
    "benchmarks/augmentation.py": "tests/test_benchmarks.py::test_the_augmentation_benchmark_runs_at_its_smallest",
    "benchmarks/beam_select.py": "tests/test_benchmarks.py::test_the_beam_select_benchmark_runs_at_its_smallest",
    "benchmarks/constraints.py": "tests/test_benchmarks.py::test_the_constraints_benchmark_runs_at_its_smallest",
    "benchmarks/clean.py": "tests/test_filters.py::test_the_benchmark_runs_at_its_smallest",
    "benchmarks/score.py": "tests/test_scoring.py::test_the_score_benchmark_runs_at_its_smallest",
    "benchmarks/dcce_noise.py": "tests/test_scoring.py::test_the_dcce_noise_benchmark_runs_at_its_smallest",
    "benchmarks/refactor_ab.py": "tests/test_benchmarks.py::test_the_refactor_benchmark_finds_a_checkout_decodes_as_itself",
    "benchmarks/ctranslate2_agreement.py":
        "tests/test_export.py::test_the_ctranslate2_agreement_benchmark_runs_at_its_smallest",
    "benchmarks/data_scale.py": "tests/test_benchmarks.py::test_the_data_scale_benchmark_runs_at_its_smallest",
    "benchmarks/decode.py": "tests/test_benchmarks.py::test_the_decode_benchmark_runs_at_its_smallest",
    "benchmarks/deploy.py": "tests/test_export.py::test_the_deploy_benchmark_runs_at_its_smallest",
    "benchmarks/documents.py": "tests/test_document_formats.py::test_the_documents_benchmark_runs_at_its_smallest",
    "benchmarks/elastic_soak.py":
        "tests/test_elastic.py::test_a_killed_worker_is_restarted_and_the_job_ends_with_the_weights_of_an_uninterrupted_run",
    "benchmarks/ensemble.py": "tests/test_benchmarks.py::test_the_ensemble_benchmark_runs_at_its_smallest",
    "benchmarks/ensemble_cost.py": "tests/test_benchmarks.py::test_the_ensemble_cost_benchmark_runs_at_its_smallest",
    "benchmarks/glossary.py": "tests/test_benchmarks.py::test_the_glossary_benchmark_runs_at_its_smallest",
    "benchmarks/hf_import_nllb.py": "tests/test_hf_import_m2m100.py::test_the_nllb_benchmark_runs_at_its_smallest",
    "benchmarks/kill_soak.py": "tests/test_benchmarks.py::test_the_kill_soak_benchmark_runs_at_its_smallest",
    "benchmarks/lora.py": "tests/test_adapters.py::test_the_lora_benchmark_runs_at_its_smallest",
    "benchmarks/lora_domain.py": "tests/test_adapters.py::test_the_lora_domain_benchmark_runs_at_its_smallest",
    "benchmarks/probe.py": "tests/test_benchmarks.py::test_the_probe_benchmark_runs_at_its_smallest",
    "benchmarks/real_text.py": "tests/test_benchmarks.py::test_the_real_text_benchmark_runs_at_its_smallest",
    "benchmarks/real_text_spans.py":
        "tests/test_benchmarks.py::test_the_real_text_spans_benchmark_runs_at_its_smallest",
    "benchmarks/sentence_splitting.py":
        "tests/test_benchmarks.py::test_the_sentence_splitting_benchmark_runs_at_its_smallest",
    "benchmarks/serve_hold.py": "tests/test_benchmarks.py::test_the_serve_hold_benchmark_runs_at_its_smallest",
    "benchmarks/serve_soak.py": "tests/test_benchmarks.py::test_the_serve_soak_benchmark_runs_at_its_smallest",
    "benchmarks/slow_core.py": "tests/test_benchmarks.py::test_the_slow_core_benchmark_runs_a_command_on_its_core",
    "benchmarks/subword_sampling.py":
        "tests/test_benchmarks.py::test_the_subword_sampling_benchmark_runs_at_its_smallest",
    "benchmarks/terminology.py": "tests/test_terminology.py::test_the_benchmark_runs_at_its_smallest",
    "benchmarks/train_speed.py": "tests/test_benchmarks.py::test_the_train_speed_benchmark_runs_at_its_smallest",
    "recipes/backtranslation/multi30k_low_resource.py":
        "tests/test_recipes_smoke.py::test_the_low_resource_backtranslation_experiment_runs_at_its_smallest",
    "recipes/backtranslation/run.py": "tests/test_recipes_smoke.py::test_the_backtranslation_recipe_runs_at_its_smallest",
    "recipes/captioning/run.py": "tests/test_recipes_smoke.py::test_the_captioning_recipe_runs_at_its_smallest",
    "recipes/captioning/scenes.py": "tests/test_recipes_smoke.py::test_the_scene_generator_runs_at_its_smallest",
    "recipes/custom_encoder/run.py": "tests/test_benchmarks.py::test_the_custom_encoder_recipe_runs_at_its_smallest",
    "recipes/digit_strings/run.py": "tests/test_digit_strings.py::test_recipe_runs_end_to_end_and_reports_per_length",
    "recipes/digit_strings/strings.py":
        "tests/test_recipes_smoke.py::test_the_digit_string_generator_runs_at_its_smallest",
    "recipes/distillation/run.py": "tests/test_recipes_smoke.py::test_the_distillation_recipe_runs_at_its_smallest",
    "recipes/multi30k/run.py": "tests/test_recipes_smoke.py::test_the_multi30k_recipe_runs_at_its_smallest",
    "recipes/multilingual/run.py": "tests/test_recipes_smoke.py::test_the_multilingual_recipe_runs_at_its_smallest",
    "recipes/speech_digits/make_data.py":
        "tests/test_audio.py::test_digit_utterances_keep_the_official_split_and_one_speaker",
    "recipes/speech_digits/run.py":
        "tests/test_audio.py::test_speech_recipe_runs_end_to_end_and_chooses_the_ctc_weight_on_val",
    "recipes/speech_digits/synth.py":
        "tests/test_recipes_smoke.py::test_the_synthetic_speaker_script_runs_at_its_smallest",
    "recipes/terminology/run.py": "tests/test_benchmarks.py::test_the_terminology_recipe_runs_at_its_smallest",
}


def runnable_scripts() -> set[str]:
    """Every benchmark (but common.py and __init__.py) and every recipe script: each recipe's run.py and any other
    file under recipes/ run as a script (an `if __name__ == "__main__":` block; not recipes/jobs.py or a module a
    recipe imports, such as language_id.py)."""
    benchmarks = {p for p in (ROOT / "benchmarks").glob("*.py") if p.name not in ("common.py", "__init__.py")}
    recipes = {p for p in RECIPES.rglob("*.py")
               if p.name == "run.py" or re.search(r'^if __name__ == "__main__":', p.read_text(encoding="utf-8"), re.M)}
    return {p.relative_to(ROOT).as_posix() for p in benchmarks | recipes}


def test_every_benchmark_and_recipe_script_has_a_smoke_test():
    import ast

    scripts = runnable_scripts()
    assert scripts == set(SMOKE_TESTED), (
        f"scripts without a smoke test in SMOKE_TESTED: {sorted(scripts - set(SMOKE_TESTED))}; "
        f"named there but not on disk: {sorted(set(SMOKE_TESTED) - scripts)}")
    for script, test in SMOKE_TESTED.items():
        path, _, name = test.partition("::")
        source = (ROOT / path).read_text(encoding="utf-8")
        functions = {node.name: node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)}
        assert name in functions, f"{script}: {test} does not exist"
        body = ast.get_source_segment(source, functions[name])
        where = Path(script)
        assert where.name in body, f"{script}: {test} does not name {where.name}"
        folder = "benchmark" if where.parts[0] == "benchmarks" else where.parent.name  # (run_benchmark: benchmarks/)
        assert folder in body or folder in source, f"{script}: {test} does not name {where.parent}"
