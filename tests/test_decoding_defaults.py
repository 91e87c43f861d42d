"""A model directory's decoding defaults set after training (`ModelDir.set_decoding`, what recipes
write after choosing on val), weights installed in place of training's best (`install_weights`),
and `seq2seq config MODEL_DIR` showing both."""

from __future__ import annotations

import re
import shutil

import pytest
import torch
import yaml
from click.testing import CliRunner

from seq2seq.cli import cli
from seq2seq.config import ConfigError, load_dict, to_dict
from seq2seq.storage import atomic
from seq2seq.storage.model_dir import ModelDir
from seq2seq.storage.weights import load_weights, save_weights

# A config.yaml as a user might have written it: a few keys, the rest defaults.
RAW = {"model": {"d_model": 64, "heads": 2}, "training": {"lr": 0.003}, "decoding": {"beam": 4, "max_len_b": 10}}


@pytest.fixture
def model_dir(tmp_path) -> ModelDir:
    directory = ModelDir(tmp_path / "model")
    directory.path.mkdir()
    directory.config_path.write_text(yaml.safe_dump(RAW, sort_keys=False), encoding="utf-8")
    directory.write_metadata({"step": 60})
    return directory


def test_set_decoding_changes_only_the_keys_it_is_given_and_records_who_chose_them(model_dir):
    decoding = model_dir.set_decoding("recipes/x/run.py", weights="avg5", lenpen=1.4, beam=6)
    assert (decoding.lenpen, decoding.beam) == (1.4, 6)
    assert model_dir.config().decoding == decoding  # read back as every decoding command reads it
    written = load_dict(model_dir.config_path)
    assert written == {**RAW, "decoding": {"beam": 6, "max_len_b": 10, "lenpen": 1.4}}  # everything else kept
    assert model_dir.decoding_choice() == {"values": {"lenpen": 1.4, "beam": 6}, "chosen_on": "val",
                                           "chosen_by": "recipes/x/run.py", "weights": "avg5"}
    assert model_dir.metadata()["step"] == 60  # the rest of metadata.json kept


def test_set_decoding_writes_the_typed_value(model_dir):
    model_dir.set_decoding("test", lenpen=2)  # an int where a float belongs, converted as a config file's is
    assert load_dict(model_dir.config_path)["decoding"]["lenpen"] == 2.0
    assert isinstance(model_dir.config().decoding.lenpen, float)


@pytest.mark.parametrize("values, key", [
    ({"beam": 0}, "decoding.beam"),
    ({"lenpenn": 1.4}, "decoding.lenpenn"),
    ({"lenpen": "long"}, "decoding.lenpen"),
    ({"nbest": 9}, "nbest (9) must be <= beam (4)"),
    ({"ctc_weight": 0.5}, "decoding.ctc_weight"),  # the model has no CTC head
])
def test_a_value_the_config_refuses_names_its_key_and_nothing_is_written(model_dir, values, key):
    config, metadata = model_dir.config_path.read_bytes(), model_dir.metadata_path.read_bytes()
    with pytest.raises(ConfigError, match=re.escape(key)):
        model_dir.set_decoding("test", **values)
    assert model_dir.config_path.read_bytes() == config
    assert model_dir.metadata_path.read_bytes() == metadata


def test_a_write_that_fails_leaves_the_old_config(model_dir, monkeypatch):
    config, metadata = model_dir.config_path.read_bytes(), model_dir.metadata_path.read_bytes()

    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "replace", fail)  # the moment the new file would take the old one's place
    with pytest.raises(OSError, match="disk full"):
        model_dir.set_decoding("test", lenpen=1.4)
    monkeypatch.undo()
    assert model_dir.config_path.read_bytes() == config
    assert model_dir.metadata_path.read_bytes() == metadata  # no note of a choice that did not happen
    assert sorted(p.name for p in model_dir.path.iterdir()) == ["config.yaml", "metadata.json"]  # no temp file


def test_installed_weights_replace_model_safetensors_and_training_best_is_kept(model_dir):
    best, average = {"w": torch.zeros(3)}, {"w": torch.ones(3)}
    save_weights(best, model_dir.weights_path)
    save_weights(average, model_dir.path / "model.avg5.safetensors")
    assert model_dir.trained_weights_path() == model_dir.weights_path

    model_dir.install_weights(model_dir.path / "model.avg5.safetensors")
    assert torch.equal(load_weights(model_dir.weights_path)["w"], average["w"])
    assert model_dir.trained_weights_path() == model_dir.best_weights_path
    assert torch.equal(load_weights(model_dir.best_weights_path)["w"], best["w"])

    model_dir.install_weights(model_dir.path / "model.avg5.safetensors")  # again (a recipe run twice)
    assert torch.equal(load_weights(model_dir.best_weights_path)["w"], best["w"])  # still training's best
    model_dir.install_weights(model_dir.trained_weights_path())  # back to training's best
    assert torch.equal(load_weights(model_dir.weights_path)["w"], best["w"])


def test_a_new_training_run_forgets_the_choices_made_for_earlier_weights(model_dir):
    save_weights({"w": torch.zeros(3)}, model_dir.weights_path)
    save_weights({"w": torch.ones(3)}, model_dir.path / "model.avg5.safetensors")
    model_dir.install_weights(model_dir.path / "model.avg5.safetensors")
    model_dir.set_decoding("test", lenpen=1.4)
    model_dir.forget_choices()  # what training does when it starts (write_static_files)
    assert model_dir.decoding_choice() is None and not model_dir.best_weights_path.exists()
    assert model_dir.metadata()["step"] == 60


def test_a_translator_loaded_afterwards_decodes_with_the_new_lenpen(tiny_model_dir, tmp_path):
    from seq2seq.inference.translator import Translator

    path = tmp_path / "model"
    shutil.copytree(tiny_model_dir, path)
    sources = ["A man in a blue shirt is standing on a ladder.", "Two dogs play in the snow."]
    assert Translator.load(path, device="cpu").defaults.lenpen == 1.0
    ModelDir(path).set_decoding("test", lenpen=3.0)
    translator = Translator.load(path, device="cpu")
    assert translator.defaults.lenpen == 3.0 and translator.search_config().lenpen == 3.0
    assert translator.translate(sources) == translator.translate(sources, lenpen=3.0)


def test_the_multi30k_recipe_leaves_its_choices_as_the_directorys_defaults(tiny_model_dir, tmp_path):
    from seq2seq.inference.translator import Translator
    from test_recipe import load_recipe

    recipe = load_recipe()
    path = tmp_path / "model"
    shutil.copytree(tiny_model_dir, path)
    directory = ModelDir(path)
    save_weights(directory.average(2)[0], path / "model.avg2.safetensors")
    trained = load_weights(directory.weights_path)
    candidates = {"best": directory.trained_weights_path(), "avg2": path / "model.avg2.safetensors"}
    recipe.install_choices(path, candidates, "avg2", beam=3, lenpen=1.4)

    translator = Translator.load(path, device="cpu")  # as `seq2seq translate/test DIR` load it
    assert (translator.defaults.beam, translator.defaults.lenpen) == (3, 1.4)
    averaged = load_weights(path / "model.avg2.safetensors")
    assert all(torch.equal(averaged[k], v) for k, v in load_weights(directory.weights_path).items())
    assert all(torch.equal(trained[k], v) for k, v in load_weights(directory.best_weights_path).items())
    choice = directory.decoding_choice()
    assert choice["chosen_by"] == "recipes/multi30k/run.py" and choice["values"] == {"beam": 3, "lenpen": 1.4}
    assert choice["weights"].startswith("avg2 (model.avg2.safetensors), installed as model.safetensors")
    # run again (--skip-train): "best" is still training's best, and choosing it puts it back
    assert recipe.ModelDir(path).trained_weights_path() == directory.best_weights_path
    recipe.install_choices(path, {"best": directory.trained_weights_path()}, "best", beam=5, lenpen=1.0)
    assert all(torch.equal(trained[k], v) for k, v in load_weights(directory.weights_path).items())


def test_seq2seq_config_of_a_model_dir_shows_its_decoding_and_where_it_came_from(model_dir):
    def config_of(directory: ModelDir) -> str:
        result = CliRunner().invoke(cli, ["config", str(directory.path)])
        assert result.exit_code == 0, result.output
        assert yaml.safe_load(result.stdout) == to_dict(directory.config())  # still a config file
        return result.stdout

    assert "# decoding: the defaults of decoding commands, as training's config set them\ndecoding:\n" \
        in config_of(model_dir)
    model_dir.set_decoding("recipes/x/run.py", weights="avg5 (model.avg5.safetensors)", lenpen=1.4)
    shown = config_of(model_dir)
    assert ("# decoding: the defaults of decoding commands; lenpen 1.4 set by recipes/x/run.py from its choice on val\n"
            "# with the weights avg5 (model.avg5.safetensors)\ndecoding:\n") in shown
    assert "  lenpen: 1.4\n" in shown
    raw = load_dict(model_dir.config_path)
    raw["decoding"]["lenpen"] = 1.0  # edited by hand afterwards
    model_dir.config_path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    assert "# (config.yaml has changed since: lenpen)\n" in config_of(model_dir)


def test_seq2seq_config_of_a_directory_without_a_config_says_so_in_one_line(tmp_path):
    result = CliRunner().invoke(cli, ["config", str(tmp_path)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"{tmp_path} is not a model directory: config.yaml is missing" in result.output
