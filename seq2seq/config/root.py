"""The root config of an experiment, as written in a YAML file under configs/.

    Config = data + tokenizer + model + training + decoding

Each section is a dataclass of the config layer (data_section.py, tokenizer_section.py,
model_section.py, training_section.py; search.py: decoding); this module only assembles them and
imports nothing above the config package, so reading a model directory's config.yaml imports neither
the training loop nor the data pipeline
(a `model.encoder.type` other than text loads its modality's module, by name, when it is parsed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from seq2seq.config.schema import apply_overrides, from_dict, load_dict, to_dict
from seq2seq.config.search import SearchConfig
from seq2seq.config.clean_section import CleanConfig
from seq2seq.config.data_section import DataConfig
from seq2seq.config.model_section import ModelConfig
from seq2seq.config.tokenizer_section import TokenizerConfig
from seq2seq.config.training_section import TrainingConfig


@dataclass(frozen=True)
class Config:
    """The whole experiment, as written in a YAML file under configs/."""

    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    decoding: SearchConfig = field(default_factory=SearchConfig)
    clean: CleanConfig | None = None  # the filters of `seq2seq clean`, which `train` applies to its corpora (docs/cleaning.md)

    def __post_init__(self) -> None:
        self.decoding.check_ctc_head(self.training.ctc_weight)
        self.decoding.check_model(self.model)  # token ids within the vocabulary, min_len within the positions


def load_config(path: str | Path | None, overrides: Sequence[str] = ()) -> Config:
    """Read a YAML/JSON config, apply `section.key=value` overrides, validate every key."""
    data = load_dict(path) if path is not None else {}
    return from_dict(Config, apply_overrides(data, list(overrides)))


def config_yaml(cfg: Config) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)
