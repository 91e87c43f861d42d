"""configs/example.yaml lists every key (at its default unless its comment says otherwise), the shipped
configs cover every key of each encoder type, and `seq2seq config` prints the full resolved config."""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from seq2seq.cli import cli
from seq2seq.config import ConfigError, EncoderConfig, encoder_config_class, from_dict, to_dict
from seq2seq.config.root import Config, load_config

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "configs" / "example.yaml"


def section_class(cls: type, key: str, value: Any) -> type | None:
    """The dataclass of field `key` of `cls` (for model.encoder: the class its `type` registers), else None."""
    tp = typing.get_type_hints(cls)[key]
    if isinstance(tp, type) and issubclass(tp, EncoderConfig):
        return encoder_config_class((value or {}).get("type", "text"))
    return tp if dataclasses.is_dataclass(tp) else None


def missing_and_unknown(cls: type, data: dict[str, Any], prefix: str = "") -> tuple[list[str], list[str]]:
    """Dotted keys of dataclass `cls` (recursively) absent from `data`, and keys of `data` that `cls` lacks."""
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    missing = [prefix + k for k in names if k not in data]
    unknown = [prefix + k for k in data if k not in names]
    for key in names:
        sub = section_class(cls, key, data.get(key))
        if sub is not None and isinstance(data.get(key), dict):
            m, u = missing_and_unknown(sub, data[key], f"{prefix}{key}.")
            missing, unknown = missing + m, unknown + u
    return missing, unknown


def test_example_yaml_lists_every_key():
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    assert data["model"]["encoder"]["type"] == "text"
    missing, unknown = missing_and_unknown(Config, data)
    assert missing == [], f"configs/example.yaml lacks {missing}"
    assert unknown == []
    load_config(EXAMPLE)  # and it is a valid config


def test_a_missing_key_is_found():  # the walk above is not vacuous
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    del data["training"]["log_every"], data["model"]["encoder"]["type"]
    assert missing_and_unknown(Config, data)[0] == ["model.encoder.type", "training.log_every"]


def commented_leaves(text: str) -> list[tuple[str, Any, str]]:
    """(dotted key, value, comment) of every `key: value  # comment` line of a YAML file of nested mappings."""
    path: list[str] = []
    leaves = []
    for line in text.splitlines():
        match = re.match(r"^( *)([A-Za-z_]\w*):(.*)$", line)
        if not match:
            continue
        indent, key, rest = len(match[1]) // 2, match[2], match[3]
        value_text, _, comment = rest.partition(" #")
        path = path[:indent] + [key]
        if value_text.strip():
            leaves.append((".".join(path), yaml.safe_load(value_text), comment.strip()))
    return leaves


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in data.items():
        out.update(flatten(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key: value})
    return out


def default_of(dotted: str, data: dict[str, Any]) -> Any:
    cls, node, value = Config, data, None
    for key in dotted.split("."):
        sub = section_class(cls, key, node.get(key))
        if sub is None:
            field = next(f for f in dataclasses.fields(cls) if f.name == key)
            return field.default if field.default is not dataclasses.MISSING else field.default_factory()
        cls, node = sub, node[key]
    return value


def test_example_yaml_values_are_the_defaults_unless_its_comment_says_so():
    text = EXAMPLE.read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    leaves = commented_leaves(text)
    assert len({k for k, _, _ in leaves}) == len(leaves) == len(flatten(to_dict(load_config(EXAMPLE))))
    noted = []
    for key, value, comment in leaves:
        default = default_of(key, data)
        note = re.search(r"default: (.+?)(?:\. |\.?$)", comment)
        if value != default:
            assert note, f"{key}: {value!r} is not the default {default!r}; say so in its comment ('default: ...')"
        if note:
            assert yaml.safe_load(note[1]) == default, f"{key}: the comment says default {note[1]}, it is {default!r}"
            assert value != default, f"{key}: the comment notes a default the value equals"
            noted.append(key)
    assert "training.precision" in noted and "model.share_embeddings" in noted


def test_example_yaml_trains_on_the_files_the_quickstart_writes(tmp_path):
    """Its data paths are where `seq2seq quickstart` (default --output-dir) writes the corpus."""
    from seq2seq.data.synthetic import make_splits, write_splits

    default_out = next(p.default for p in cli.commands["quickstart"].params if p.name == "output_dir")
    write_splits(make_splits(n_train=5, n_valid=5, n_test=5), tmp_path / default_out / "data")  # as run_quickstart
    data = load_config(EXAMPLE).data
    for path in (data.train_src, data.train_tgt, data.valid_src, data.valid_tgt):
        assert not Path(path).is_absolute() and (tmp_path / path).is_file(), path


# --------------------------------------------------------------------------------------------
# Image and audio encoders: their keys appear in the shipped configs
# --------------------------------------------------------------------------------------------


def shipped_configs() -> dict[Path, dict[str, Any]]:
    paths = sorted(ROOT.glob("configs/**/*.yaml")) + sorted(ROOT.glob("recipes/**/*.yaml"))
    return {p: yaml.safe_load(p.read_text(encoding="utf-8")) or {} for p in paths}


def encoder_types() -> list[str]:
    import seq2seq.model.encoders  # noqa: F401 - registers the built-in encoder types
    from seq2seq.config.encoder_section import _ENCODER_CONFIGS

    return sorted(t for t in _ENCODER_CONFIGS if t != "text")


@pytest.mark.parametrize("kind", encoder_types() or ["(none registered)"])
def test_every_key_of_each_encoder_type_is_in_a_shipped_config(kind):
    if kind not in encoder_types():
        pytest.skip("no encoder type besides text is registered")
    configs = {p: d for p, d in shipped_configs().items()
               if isinstance(d.get("model"), dict) and (d["model"].get("encoder") or {}).get("type") == kind}
    if not configs:
        pytest.skip(f"no shipped config (configs/, recipes/) uses model.encoder.type {kind} yet")
    for path, data in configs.items():
        try:
            from_dict(Config, data)
        except Exception as e:  # noqa: BLE001 - report which file
            pytest.fail(f"{path.relative_to(ROOT)}: {e}")
    fields = {f.name for f in dataclasses.fields(encoder_config_class(kind)) if f.init}
    listed = set().union(*(d["model"]["encoder"] for d in configs.values()))
    assert fields - listed == set(), f"model.encoder keys of type {kind} in no shipped config: {sorted(fields - listed)}"


# --------------------------------------------------------------------------------------------
# seq2seq config
# --------------------------------------------------------------------------------------------


def run(*args: Any):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_config_prints_the_full_resolved_config_with_overrides():
    result = run("config", EXAMPLE, "--set", "model.layers=4", "--set", "data.train_src=my.en",
                 "--set", "data.train_tgt=my.de")
    assert result.exit_code == 0, result.output
    printed = yaml.safe_load(result.stdout)
    expected = load_config(EXAMPLE, ["model.layers=4", "data.train_src=my.en", "data.train_tgt=my.de"])
    assert printed == to_dict(expected)  # every key, the overrides applied
    assert printed["model"]["layers"] == 4 and printed["data"]["train_src"] == "my.en"
    assert missing_and_unknown(Config, printed) == ([], [])
    assert from_dict(Config, printed) == expected  # the output is itself a config


def test_config_without_a_file_prints_the_defaults_and_the_encoder_keys_of_its_type():
    defaults = run("config", "--json")
    assert defaults.exit_code == 0, defaults.output
    assert json.loads(defaults.stdout) == to_dict(Config())
    for kind in encoder_types():
        result = run("config", "--set", f"model.encoder.type={kind}")
        assert result.exit_code == 0, result.output
        encoder = yaml.safe_load(result.stdout)["model"]["encoder"]
        assert encoder == to_dict(encoder_config_class(kind)())


def test_config_refuses_a_misspelt_key_in_one_line(tmp_path):
    result = run("config", "--set", "training.lrr=0.1")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "unknown config key 'training.lrr'" in result.output and "Did you mean 'training.lr'?" in result.output
    missing = run("config", tmp_path / "nope.yaml")
    assert missing.exit_code == 1 and "config file not found" in missing.output


def test_a_config_is_pure_data_the_same_on_every_machine(tmp_path):
    """Parsing reads no file and asks nothing of this machine: a model too large for its memory, or a
    backbone directory that is not there, is a config like any other; the run refuses it when it starts
    (tests/test_bad_input.py, tests/test_hf_encoder.py)."""
    from seq2seq.config.model_section import check_fits_in_memory

    huge = load_config(None, ["model.layers=10000000000"])
    assert huge.model.layers == 10_000_000_000 and run("config", "--set", "model.layers=10000000000").exit_code == 0
    with pytest.raises(ConfigError, match=r"parameters, whose weights alone exceed this machine's 1 GiB of memory"):
        check_fits_in_memory(huge.model, memory=2**30)
    check_fits_in_memory(load_config(None).model, memory=2**30)  # the default model fits in 1 GiB
    hf = load_config(None, ["model.encoder.type=hf", f"model.encoder.name_or_path={tmp_path / 'nowhere'}"])
    assert hf.model.encoder.backbone == {}
