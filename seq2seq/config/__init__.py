"""Typed configuration: plain dataclasses that round-trip to and from YAML/JSON, keys checked.

    diagnostics.py         `Seq2SeqError`, the base of every user-facing error, and `Diagnostic`: input, field, code
    schema.py              the generic dataclass <-> dict mapping (from_dict, to_dict, load, save, overrides)
    checks.py              the one style of a section's checks: `require(ok, message)`, `check_ranges` (bounds)
    json_reader.py         `loads`: user JSON, any failure a one-line JSONDecodeError
    encoder_section.py     the polymorphic `model.encoder` section: each encoder's config type, registered by its class
    model_section.py       the model section (`ModelConfig`), `check_fits_in_memory`
    data_section.py        the data section: corpora, validation sets, language codes, reserved pieces
    tokenizer_section.py   the tokenizer section
    training_section.py    the training section
    adapter_section.py     the training.adapter section (LoRA)
    search.py              the decoding section
    clean_section.py       the `clean` section: the filters of `seq2seq clean` and their thresholds
    terminology.py         the `data.terminology` section: training sources annotated with target terms
    root.py                the root `Config` of an experiment, `load_config`, `config_yaml`
"""

from seq2seq.config.diagnostics import Diagnostic, Seq2SeqError
from seq2seq.config.root import Config, config_yaml, load_config
from seq2seq.config.schema import ConfigError, apply_overrides, from_dict, load, load_dict, save, to_dict
from seq2seq.config.search import SearchConfig
from seq2seq.config.data_section import CorpusConfig, DataConfig, ValidSetConfig
from seq2seq.config.encoder_section import EncoderConfig, encoder_config_class, encoder_types, register_encoder_config
from seq2seq.config.model_section import ModelConfig
from seq2seq.config.tokenizer_section import TokenizerConfig
from seq2seq.config.training_section import TrainingConfig

__all__ = [
    "Config", "ConfigError", "CorpusConfig", "Diagnostic", "Seq2SeqError", "DataConfig", "EncoderConfig", "ModelConfig", "SearchConfig",
    "TokenizerConfig", "TrainingConfig", "ValidSetConfig", "apply_overrides", "config_yaml", "encoder_config_class",
    "encoder_types", "from_dict", "load", "load_config", "load_dict", "register_encoder_config", "save", "to_dict",
]
