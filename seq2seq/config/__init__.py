"""Typed configuration: plain dataclasses that round-trip to and from YAML/JSON, keys checked.

    schema.py       the generic dataclass <-> dict mapping (from_dict, to_dict, load, save, overrides)
    sections.py     data, tokenizer, model (with its polymorphic encoder) and training sections
    search.py       the decoding section
    terminology.py  the `data.terminology` section: training sources annotated with target terms
    root.py         the root `Config` of an experiment, `load_config`, `config_yaml`
"""

from seq2seq.config.root import Config, config_yaml, load_config
from seq2seq.config.schema import ConfigError, apply_overrides, from_dict, load, load_dict, save, to_dict
from seq2seq.config.search import SearchConfig
from seq2seq.config.sections import (
    CorpusConfig, DataConfig, EncoderConfig, ModelConfig, TokenizerConfig, TrainingConfig, ValidSetConfig,
    encoder_config_class, encoder_types, register_encoder_config,
)

__all__ = [
    "Config", "ConfigError", "CorpusConfig", "DataConfig", "EncoderConfig", "ModelConfig", "SearchConfig",
    "TokenizerConfig", "TrainingConfig", "ValidSetConfig", "apply_overrides", "config_yaml", "encoder_config_class",
    "encoder_types", "from_dict", "load", "load_config", "load_dict", "register_encoder_config", "save", "to_dict",
]
