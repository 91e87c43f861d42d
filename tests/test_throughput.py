"""The throughput probe (seq2seq.training.throughput) and the Multi30K recipe's choice of settings for a
slow machine from it. (How close its estimates come to the steps runs train: benchmarks/probe.py.)"""

from __future__ import annotations


import pytest

from seq2seq.config import Config, load_config
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


def test_the_probe_times_the_runs_own_steps_after_a_warm_up_then_a_validation_and_a_save():
    # a clock: 3 warm-up steps take 5 s in all, the 8 timed ones 2 s; a validation of the sampled
    # batches 1.5 s; a save 0.4 s
    ticks = iter([0.0, 5.0, 7.0, 10.0, 11.5, 20.0, 20.4])
    probe = throughput.probe_run(tiny_config(), steps=8, warmup=3, clock=ticks.__next__)
    assert probe.step == pytest.approx(0.25) and probe.warmup == pytest.approx(5.0 - 3 * 0.25)
    assert probe.save == pytest.approx(0.4)
    assert probe.validation > 1.5  # the sample's time, scaled up to the whole validation set


def test_the_probe_really_trains_the_model_it_times():
    probe = throughput.probe_run(tiny_config(), steps=2, warmup=1)
    assert 0.0 < probe.step < 60.0 and 0.0 < probe.validation < 600.0 and 0.0 < probe.save < 60.0


def test_the_estimate_is_the_budget_less_warm_up_over_steps_validations_and_saves():
    cfg = tiny_config("training.max_time_minutes=10", "training.max_steps=100000", "training.valid_every=100",
                      "training.checkpoint_every=50")
    plain = throughput.Probe(step=0.5, warmup=0.0, validation=0.0, save=0.0)
    assert throughput.estimate_steps(cfg, plain) == 1200
    costly = throughput.Probe(step=0.5, warmup=30.0, validation=20.0, save=1.0)
    # per step: 0.5 + 20 / 100 + 1 / 50 = 0.72 s, after 30 s of warm-up
    assert throughput.estimate_steps(cfg, costly) == int(570 / 0.72)
    capped = tiny_config("training.max_time_minutes=10", "training.max_steps=300")
    assert throughput.estimate_steps(capped, plain) == 300
    assert throughput.estimate_steps(tiny_config("training.max_time_minutes=null"), plain) is None


def test_the_probe_leaves_nothing_behind_but_the_data_cache(tmp_path, session_cache):
    cfg = tiny_config(f"training.output_dir={tmp_path / 'run'}")
    throughput.probe_run(cfg, steps=1, warmup=1)
    assert not (tmp_path / "run").exists()


MULTI30K = RECIPE.parents[2] / "configs" / "multi30k_en_de.yaml"
# The settings measured on the AVX2 stand-in at 2,240 steps of 3,200 tokens in 60 minutes (the recipe
# README's "Slow machines", row b): the function of the machine's speed must give them there.
MEASURED_AT_2240 = ["training.max_tokens=1600", "training.lr=0.002", "training.warmup_steps=800",
                    "training.valid_every=2000", "training.checkpoint_every=400", "data.subword_alpha=null"]


def adapted(overrides: list[str]) -> dict[str, str]:
    return dict(o.split("=", 1) for o in overrides)


@pytest.mark.parametrize("estimated", [3000, 4200, 6000, 9000])
def test_a_machine_fast_enough_trains_the_config_as_it_is(tmp_path, monkeypatch, estimated):
    recipe = load_recipe()
    monkeypatch.setattr(recipe, "estimate_steps", lambda cfg: estimated)
    machine = recipe.adapt_to_machine(MULTI30K, [], tmp_path / "run")
    assert machine == {"estimated_steps": estimated, "overrides": []}
    assert not (tmp_path / "run").exists()  # nothing is written before training starts


def test_at_the_stand_ins_speed_the_settings_are_those_measured_there(tmp_path, monkeypatch):
    recipe = load_recipe()
    monkeypatch.setattr(recipe, "estimate_steps", lambda cfg: 2240)
    assert recipe.adapt_to_machine(MULTI30K, [], tmp_path) == {"estimated_steps": 2240, "overrides": MEASURED_AT_2240}


def test_a_slower_machine_validates_and_keeps_checkpoints_at_the_same_points_of_its_run():
    recipe = load_recipe()
    cfg = load_config(MULTI30K)
    for steps in range(2999, 199, -50):
        settings = adapted(recipe.machine_settings(steps, cfg, step_budget=True))
        updates = int(settings["training.max_steps"])
        assert int(settings["training.max_tokens"]) == cfg.training.max_tokens // 2 and updates == 2 * steps
        warmup, valid = int(settings["training.warmup_steps"]), int(settings["training.valid_every"])
        checkpoints = int(settings["training.checkpoint_every"])
        assert abs(warmup - min(cfg.training.warmup_steps, updates * 800 / 2240)) <= 50
        assert valid == pytest.approx(updates * 2000 / 4480, abs=50) and checkpoints == pytest.approx(
            updates * 400 / 4480, abs=25)  # in whole hundreds (fifties): the log reads the same points
        assert 0 < checkpoints <= valid < updates and 0 < warmup < updates
    # half the stand-in's speed (2,240 updates): still the config's 800; a third of that: a third of the run
    assert adapted(recipe.machine_settings(1120, cfg))["training.warmup_steps"] == "800"
    assert adapted(recipe.machine_settings(373, cfg))["training.warmup_steps"] == "300"


def test_a_step_budget_trains_what_a_machine_of_that_speed_would_without_probing(tmp_path, monkeypatch):
    recipe = load_recipe()
    monkeypatch.setattr(recipe, "estimate_steps", lambda cfg: pytest.fail("a step budget needs no probe"))
    budget = ["training.max_time_minutes=null", "training.max_steps=2240"]
    machine = recipe.adapt_to_machine(MULTI30K, budget, tmp_path, step_budget=2240)
    assert machine == {"estimated_steps": 2240, "overrides": [*MEASURED_AT_2240, "training.max_steps=4480"]}
    assert recipe.adapt_to_machine(MULTI30K, budget, tmp_path, step_budget=4200)["overrides"] == []


@pytest.mark.parametrize("started_with, updates", [([], 9000), (MEASURED_AT_2240, 18000),
                                                   (["training.valid_every=1000", "training.max_steps=2240"], 9000)])
def test_a_resumed_run_keeps_the_settings_it_started_with(tmp_path, monkeypatch, started_with, updates):
    recipe = load_recipe()
    started = load_config(MULTI30K, started_with)
    resumable_run(tmp_path, started)
    monkeypatch.setattr(recipe, "estimate_steps", lambda cfg: pytest.fail("a resumed run must not probe again"))
    user = ["training.max_tokens=2000"]  # a user's --set is applied after these, and wins
    machine = recipe.adapt_to_machine(MULTI30K, user, tmp_path)
    assert machine["estimated_steps"] is None
    resumed = load_config(MULTI30K, machine["overrides"])
    for key in recipe.ADAPTED:
        assert recipe.setting(resumed, key) == recipe.setting(started, key), key
    assert resumed.training.max_steps == load_config(MULTI30K).training.max_steps  # a time budget: not a step cap
    # a new --steps (a branch of the run) is its budget, counted in steps of the config's batch
    branch = recipe.adapt_to_machine(MULTI30K, [], tmp_path, step_budget=9000)["overrides"]
    assert load_config(MULTI30K, branch).training.max_steps == updates


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


@pytest.mark.parametrize("estimated, slow, reference", [(1380, False, 6000), (1380, True, 1120), (1700, True, 2240),
                                                       (2600, True, 2240)])
def test_the_recipe_compares_a_machine_with_the_nearest_readme_figure_of_its_settings(estimated, slow, reference):
    recipe = load_recipe()
    overrides = MEASURED_AT_2240 if slow else []
    cfg = tiny_config("training.max_time_minutes=60", *overrides)
    line = recipe.machine_line(cfg, {"estimated_steps": estimated, "overrides": overrides})
    steps, result = next(r for r in (recipe.REFERENCE, *recipe.SLOW_REFERENCES) if r[0] == reference)
    assert line.startswith(f"this machine: about {estimated:,} steps in the 60-minute budget")
    assert f"came from {steps:,} steps ({result}): {estimated / steps:.2f}x the steps" in line
    # a step budget counts the steps of the config's batch it stands for, not the smaller batch's updates
    step_budget = tiny_config("training.max_time_minutes=null", "training.max_steps=4480", *overrides)
    assert recipe.machine_line(step_budget, {"estimated_steps": 2240, "overrides": overrides}).startswith(
        "this run: 2,240 steps (a step budget)")
    assert recipe.machine_line(cfg, {"estimated_steps": None, "overrides": overrides}) is None  # a resumed run


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
                           f"updates a minute) for {slower:.1f} minutes") and "whole quickstart about 6 minutes" in note
    assert 5.2 <= slower <= 5.3
    assert budget_note(needed, DEFAULT_MINUTES, base_steps=300).startswith(
        "a slow machine (about 300 steps of the usual batches in 3.5 minutes, fewer than the 690 they need)")
    note = budget_note(needed // 4, LONGEST_MINUTES)
    assert note.endswith("at the longest budget: expect lower scores")


@pytest.mark.parametrize("argv, tokens, max_steps, lr", [
    (["--steps", "1120"], 1600, 2240, 0.002),  # half the stand-in's speed: half the batch, the same tokens
    (["--steps", "1120", "--set", "training.lr=0.001"], 1600, 2240, 0.001),  # --set wins
    (["--steps", "1120", "--no-adapt"], 3200, 1120, 0.0025),  # the config as it is
    (["--steps", "6000"], 3200, 6000, 0.0025),  # a fast machine: the config as it is
])
def test_the_recipes_step_budget_stands_for_a_machine_of_that_speed(tmp_path, argv, tokens, max_steps, lr):
    recipe = load_recipe()
    p = recipe.argument_parser()
    args = p.parse_args([*argv, "--output-dir", str(tmp_path / "run")])
    cfg, machine = recipe.run_config(p, args, RECIPE.parents[2] / "data", tmp_path / "run")
    assert (cfg.training.max_tokens, cfg.training.max_steps, cfg.training.lr) == (tokens, max_steps, lr)
    assert cfg.training.max_time_minutes is None and machine["estimated_steps"] == int(argv[1])


def test_one_validations_time_is_estimated_from_the_sampled_batches_alone():
    """The probe times a validation of a sample of the batches and scales it up by their share of the
    target tokens: timing the whole set instead would overestimate it by the inverse of that share."""
    from types import SimpleNamespace

    import torch

    from seq2seq.config.search import SearchConfig
    from seq2seq.training.validation import ValidData

    batches = [SimpleNamespace(src=torch.ones(2, 5, dtype=torch.long), n_tgt_tokens=10) for _ in range(12)]
    now = [0.0]

    class Trainer:  # a validation takes one second per batch it validates
        valid = ValidData(batches, [], lambda ids: [])
        search_cfg = SearchConfig()

        def validate(self) -> None:
            now[0] += len(self.valid.batches)

    trainer = Trainer()
    seconds = throughput._validation_seconds(trainer, 3, lambda: now[0])
    assert now[0] == 3  # three batches validated, not twelve
    assert seconds == pytest.approx(12.0)  # scaled up to the whole set
    assert trainer.valid.batches is batches and trainer.search_cfg == SearchConfig()  # restored
