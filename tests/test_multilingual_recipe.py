"""recipes/multilingual: the language each zero-shot output came out in (language_id.py) and its row in the report."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from conftest import MULTI30K, head_gz, require_data

RECIPE = Path(__file__).resolve().parents[1] / "recipes" / "multilingual"
sys.path.insert(0, str(RECIPE))

from language_id import UNKNOWN, guess_language, language_shares  # noqa: E402


def load_recipe():
    spec = importlib.util.spec_from_file_location("multilingual_recipe", RECIPE / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("lang", ["en", "de", "fr"])
def test_multi30k_validation_lines_are_told_apart_by_their_function_words(lang):
    require_data(MULTI30K)
    shares = language_shares(head_gz(MULTI30K / f"val.{lang}.gz", 1014))
    assert shares[lang] >= 97.0
    assert set(shares) <= {lang, UNKNOWN}  # never another of the three languages


@pytest.mark.parametrize("line", ["", "12 34", "Zwei Hunde", "the der le"])
def test_a_line_without_a_clear_majority_is_unknown(line):
    assert guess_language(line) == UNKNOWN


def test_shares_are_percentages_of_all_lines_largest_first():
    shares = language_shares(["the dog and the cat", "a man on a bike", "le chien et la femme", "42"])
    assert shares == {"en": 50.0, "fr": 25.0, UNKNOWN: 25.0}
    assert list(shares) == ["en", "fr", UNKNOWN]


def test_the_report_says_how_many_zero_shot_outputs_are_french(tmp_path):
    recipe = load_recipe()
    run, pivot = tmp_path / "multi", tmp_path / "pivot_multi"
    run.mkdir()
    pivot.mkdir()
    scores = {d: {"bleu": 1.0, "chrf": 2.0} for d in ("en-de", "en-fr", "de-en", "de-fr")}
    (run / "scores.json").write_text(json.dumps(scores))
    (pivot / "scores.json").write_text(json.dumps({"de-fr": {"bleu": 3.0, "chrf": 4.0}}))
    (run / "test.de-fr.hyp").write_text("A man on a bike.\nUn homme sur un vélo.\nThe dog and the cat.\nLe chien.\n")
    (pivot / "test.de-en-fr.hyp").write_text("Un homme sur un vélo.\nLe chien.\nLa femme et le chat.\nUne rue.\n")
    jobs = [recipe.Job(name, lambda: None, tmp_path / name / "scores.json") for name in ("multi", "pivot_multi")]
    recipe.report(tmp_path, jobs, {"multi": 60.0})
    row = [line for line in (tmp_path / "results.md").read_text().splitlines() if "outputs in French" in line]
    assert row == ["| de-fr outputs in French | 50.0% | 100.0% |"]
    languages = json.loads((tmp_path / "results.json").read_text())["zero_shot_languages"]
    assert languages == {"multi": {"en": 50.0, "fr": 50.0}, "multi pivot": {"fr": 100.0}}
