"""Typed configuration: plain dataclasses that round-trip to and from YAML/JSON, keys checked."""

from seq2seq.config.schema import (
    ConfigError, DataConfig, EncoderConfig, ModelConfig, TrainingConfig, apply_overrides, encoder_config_class,
    from_dict, load, load_dict, register_encoder_config, save, to_dict,
)

__all__ = [
    "ConfigError", "DataConfig", "EncoderConfig", "ModelConfig", "TrainingConfig", "apply_overrides",
    "encoder_config_class", "from_dict", "load", "load_dict", "register_encoder_config", "save", "to_dict",
]
