"""The Multi30K recipe script (recipes/multi30k/run.py) on bad input: one readable line, exit code 1,
and no half-written download left behind. (Its training and scoring are the toolkit's, tested elsewhere.)"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import urllib.error
from pathlib import Path

import pytest

from seq2seq.data import DataError

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "multi30k" / "run.py"


def run_recipe(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(RECIPE), *args], capture_output=True, text=True, timeout=120, check=False)


def assert_one_line_error(result: subprocess.CompletedProcess, *expected: str) -> None:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ")
    for text in expected:
        assert text in last


def test_missing_data_dir_names_the_file(tmp_path):
    result = run_recipe("--data-dir", str(tmp_path / "nowhere"), "--output-dir", str(tmp_path / "run"))
    assert_one_line_error(result, "data file not found", str(tmp_path / "nowhere" / "train.en.gz"))
    assert not (tmp_path / "run" / "model.safetensors").exists()


def test_misspelt_override_names_the_key(tmp_path):
    result = run_recipe("--output-dir", str(tmp_path / "run"), "--set", "training.lrr=0.001")
    assert_one_line_error(result, "unknown config key 'training.lrr'", "Did you mean 'training.lr'?")


def test_failed_download_leaves_no_partial_file(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("multi30k_recipe", RECIPE)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)

    def broken_retrieve(url, filename):  # writes part of the file, then the connection drops
        Path(filename).write_bytes(b"\x1f\x8b partial")
        raise urllib.error.URLError("connection reset")

    monkeypatch.setattr(recipe.urllib.request, "urlretrieve", broken_retrieve)
    with pytest.raises(DataError, match=r"cannot download .*/train\.en\.gz: .*connection reset.*--data-dir"):
        recipe.download(tmp_path, ("en", "de"))
    assert list(tmp_path.iterdir()) == []  # no train.en.gz to be skipped as "already there" next time


def test_a_time_budget_and_a_step_budget_together_are_refused(tmp_path):
    result = run_recipe("--minutes", "5", "--steps", "100", "--output-dir", str(tmp_path / "run"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "give --minutes or --steps, not both" in result.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "run").exists()


def test_a_step_budget_below_one_is_refused(tmp_path):
    result = run_recipe("--steps", "0", "--output-dir", str(tmp_path / "run"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--steps must be >= 1, got 0" in result.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "run").exists()


def load_recipe():
    spec = importlib.util.spec_from_file_location("multi30k_recipe", RECIPE)
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    return recipe


@pytest.mark.parametrize("peak", [0.2, 1.0, 2.2, 4.6, 7.8])
def test_the_length_penalty_climb_finds_a_peak_beyond_any_fixed_range(peak):
    climb = load_recipe().climb
    asked = []

    def bleu_at(alpha):  # unimodal, peaked at `peak`
        asked.append(alpha)
        return 40 - (alpha - peak) ** 2

    assert climb(bleu_at, start=1.0, step=0.4, low=0.0, high=10.0) == pytest.approx(peak)
    assert len(asked) <= abs(peak - 1.0) / 0.4 + 4  # one look past the peak, not a grid search


def test_the_length_penalty_climb_stays_inside_its_bounds():
    climb = load_recipe().climb
    assert climb(lambda a: a, start=1.0, step=0.4, low=0.0, high=2.0) == pytest.approx(1.8)
    assert climb(lambda a: -a, start=1.0, step=0.4, low=0.0, high=2.0) == pytest.approx(0.2)
