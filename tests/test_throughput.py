"""The throughput probe (seq2seq.training.throughput) and the Multi30K recipe's choice of settings for a
slow machine from it."""

from __future__ import annotations

import itertools

import pytest

from seq2seq.config import Config, ConfigError, load_config
from seq2seq.training import throughput
from test_recipe import RECIPE, load_recipe

TINY = ["model.d_model=32", "model.heads=2", "model.ffn_dim=64", "model.layers=1", "tokenizer.vocab_size=200",
        "training.max_tokens=256", "training.threads=1"]


def tiny_config(*overrides: str) -> Config:
    return load_config(RECIPE.parents[2] / "configs" / "multi30k_en_de.yaml", [*TINY, *overrides])


def resumable_run(out, cfg: Config) -> None:
    """A model directory holding a run to resume, trained with `cfg`."""
    from seq2seq.config.root import config_yaml
    from seq2seq.storage.model_dir import ModelDir

    model_dir = ModelDir(out)
    model_dir.config_path.write_text(config_yaml(cfg), encoding="utf-8")
    (out / model_dir.TRAIN_STATE).mkdir()
    (out / model_dir.TRAIN_STATE / "COMPLETE").write_text("")


def test_the_probe_times_steps_after_a_warm_up_step():
    # a clock whose first step takes 5 s (kernels being built) and the three timed ones 0.2, 0.3, 0.25 s
    ticks = itertools.accumulate([0.0, 5.0, 0.0, 0.2, 0.0, 0.3, 0.0, 0.25])
    seconds = throughput.probe_step_seconds(tiny_config(), steps=3, clock=ticks.__next__)
    assert seconds == pytest.approx(0.25)  # the median of the timed steps; the warm-up step is not one


def test_the_probe_really_trains_the_model_it_times():
    assert 0.0 < throughput.probe_step_seconds(tiny_config(), steps=1) < 60.0


def test_the_estimate_is_the_budget_over_the_step_time_capped_by_max_steps():
    cfg = tiny_config("training.max_time_minutes=10", "training.max_steps=100000")
    assert throughput.estimate_steps(cfg, step_seconds=0.5) == int(600 * throughput.STEP_SHARE / 0.5)
    capped = tiny_config("training.max_time_minutes=10", "training.max_steps=300")
    assert throughput.estimate_steps(capped, step_seconds=0.5) == 300
    assert throughput.estimate_steps(tiny_config("training.max_time_minutes=null"), step_seconds=0.5) is None


def test_the_probe_refuses_a_media_model_with_one_line():
    cfg = load_config(RECIPE.parents[2] / "recipes" / "captioning" / "config.yaml")
    with pytest.raises(ConfigError, match="text models only"):
        throughput.probe_step_seconds(cfg)


@pytest.mark.parametrize("estimated, slow", [(1800, True), (2999, True), (3000, False), (6000, False)])
def test_the_recipe_trains_a_slow_machine_with_the_slow_settings(tmp_path, monkeypatch, estimated, slow):
    recipe = load_recipe()
    monkeypatch.setattr(recipe, "estimate_steps", lambda cfg: estimated)
    machine = recipe.adapt_to_machine(recipe.ROOT / "configs" / "multi30k_en_de.yaml", [], tmp_path / "run")
    assert machine == {"estimated_steps": estimated, "overrides": list(recipe.SLOW_SETTINGS) if slow else []}
    assert not (tmp_path / "run").exists()  # nothing is written before training starts


def test_a_step_budget_keeps_the_config_whatever_the_machine(tmp_path):
    recipe = load_recipe()
    machine = recipe.adapt_to_machine(recipe.ROOT / "configs" / "multi30k_en_de.yaml",
                                      ["training.max_time_minutes=null", "training.max_steps=4200"], tmp_path)
    assert machine == {"estimated_steps": None, "overrides": []}


@pytest.mark.parametrize("was_slow", [True, False])
def test_a_resumed_run_keeps_the_settings_it_started_with(tmp_path, monkeypatch, was_slow):
    recipe = load_recipe()
    config = recipe.ROOT / "configs" / "multi30k_en_de.yaml"
    resumable_run(tmp_path, load_config(config, list(recipe.SLOW_SETTINGS) if was_slow else []))

    def no_probe(cfg):
        raise AssertionError("a resumed run must not probe the machine again")

    monkeypatch.setattr(recipe, "estimate_steps", no_probe)
    machine = recipe.adapt_to_machine(config, [], tmp_path)
    assert machine["overrides"] == (list(recipe.SLOW_SETTINGS) if was_slow else [])


def test_a_resumed_slow_run_keeps_its_settings_beside_the_users_own(tmp_path, monkeypatch):
    recipe = load_recipe()
    config = recipe.ROOT / "configs" / "multi30k_en_de.yaml"
    user = ["training.max_tokens=2000"]  # the user's --set wins over SLOW_SETTINGS' max_tokens
    resumable_run(tmp_path, load_config(config, [*recipe.SLOW_SETTINGS, *user]))
    monkeypatch.setattr(recipe, "estimate_steps", lambda cfg: pytest.fail("probed a resumed run"))
    assert recipe.adapt_to_machine(config, user, tmp_path)["overrides"] == list(recipe.SLOW_SETTINGS)


# What this machine's speed means for a recipe's result, said at its start
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("steps, expect", [
    (2100, "0.48x the steps, expect lower scores"),
    (3940, "0.90x the steps, expect about the same scores"),  # within NEAR of the README's steps
    (4376, "1.00x the steps, expect about the same scores"),
    (4813, "1.10x the steps, expect about the same scores"),
    (9000, "2.06x the steps, expect the same scores or better"),
])
def test_the_speed_note_compares_the_expected_steps_with_the_readmes(steps, expect):
    note = throughput.speed_note(steps, 60, 4376, "BLEU 39.6")
    assert note == (f"this machine: about {steps:,} steps in the 60-minute budget; the README's figures came "
                    f"from 4,376 steps (BLEU 39.6): {expect}")


def test_the_speed_note_of_a_step_budget_and_of_an_unprobed_machine():
    assert throughput.speed_note(4200, None, 6000, "BLEU 40.30").startswith(
        "this run: 4,200 steps (a step budget); the README's figures came from 6,000 steps (BLEU 40.30): 0.70x")
    unprobed = throughput.speed_note(None, 15, 5207, "exact match 97.8%")
    assert "not probed" in unprobed and "5,207 steps (exact match 97.8%)" in unprobed


@pytest.mark.parametrize("slow", [True, False])
def test_the_recipe_compares_a_machine_with_the_readme_figure_of_the_settings_it_trains_with(slow):
    recipe = load_recipe()
    overrides = list(recipe.SLOW_SETTINGS) if slow else []
    cfg = tiny_config("training.max_time_minutes=60", *overrides)
    line = recipe.machine_line(cfg, {"estimated_steps": 1380, "overrides": overrides})
    steps, result = recipe.SLOW_REFERENCE if slow else recipe.REFERENCE
    assert line.startswith("this machine: about 1,380 steps in the 60-minute budget")
    assert f"came from {steps:,} steps ({result})" in line and line.endswith("expect lower scores")
    step_budget = tiny_config("training.max_time_minutes=null", "training.max_steps=8400")
    assert recipe.machine_line(step_budget, {"estimated_steps": None, "overrides": []}).startswith(
        "this run: 8,400 steps (a step budget)")
    assert recipe.machine_line(cfg, {"estimated_steps": None, "overrides": []}) is None  # a resumed run


def test_the_quickstart_trains_longer_on_a_slow_machine_up_to_its_cap():
    from seq2seq.training.quickstart import (
        DEFAULT_MINUTES, LONGEST_MINUTES, NEEDED_SLOW_STEPS, budget_note, training_minutes,
    )

    needed = NEEDED_SLOW_STEPS
    assert training_minutes(None, needed=needed) == DEFAULT_MINUTES  # not probed: the default
    assert training_minutes(2 * needed, needed=needed) == DEFAULT_MINUTES  # fast enough: at least the default
    slower = training_minutes(needed * 2 // 3, needed=needed)  # 1.5x too slow: the steps' time
    assert slower == pytest.approx(DEFAULT_MINUTES * 1.5, rel=0.01)
    assert training_minutes(needed // 4, needed=needed) == LONGEST_MINUTES  # capped
    note = budget_note(needed * 2 // 3, slower)
    assert note.startswith("a slow machine: training a model of width 128 with batches of 1,000 tokens (more "
                           "updates a minute) for 5.2 minutes") and "whole quickstart about 6 minutes" in note
    assert budget_note(needed, DEFAULT_MINUTES, base_steps=300).startswith(
        "a slow machine (about 300 steps of the usual batches in 3.5 minutes, fewer than the 640 they need)")
    note = budget_note(needed // 4, LONGEST_MINUTES)
    assert note.endswith("at the longest budget: expect lower scores")
