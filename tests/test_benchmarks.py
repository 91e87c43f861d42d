"""Benchmarks and recipes at their smallest (a few sentences, the session's tiny model, a few training
steps): they still run against the current API and print or write what they promise. (Others:
test_export.py for deploy.py and ctranslate2_agreement.py, test_terminology.py, test_throughput.py for
probe.py.)"""

from __future__ import annotations

import gzip
import json
import re
import shutil
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
                        "--limit", 8, "--jobs", 1, "--threads", 1, *(x for s in tiny for x in ("--set", s)))
    assert f"chosen on val: share0.5; report: {out / 'report.json'}" in result.stdout
    for name, share in (("plain", 0.0), ("share0.5", 0.5)):
        assert (out / name / "model.safetensors").is_file()
        config = yaml.safe_load((out / name / "config.yaml").read_text())
        assert config["data"]["terminology"]["share"] == share and config["training"]["max_steps"] == 3
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
