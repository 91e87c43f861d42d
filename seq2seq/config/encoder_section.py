"""The `model.encoder` section (`EncoderConfig`) and the registry of encoder types.

`model.encoder` is polymorphic: `EncoderConfig.config_class` picks the subclass registered for its
`type`. The registry finds the built-in modalities and the entry-point plugins by importing modules
named in `BUILTIN_ENCODER_MODULES` and the `seq2seq.model.encoders` entry-point group, so this layer
never imports the model layer itself.
"""

from __future__ import annotations

import builtins
import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from seq2seq.config.schema import ConfigError


@dataclass
class EncoderConfig:
    """The `model.encoder` section: which encoder reads the source, and that encoder's settings.

    `type: text` (this class, no settings of its own: the text encoder uses the model's sizes) is the
    default. Each other modality registers a subclass with its own typed fields (see
    `seq2seq.model.encoders`), e.g. `{type: image, image_size: 64, patch_size: 8}`; the section is parsed
    into the subclass its `type` names (`config_class`, which the mapper calls), and unknown keys of that
    type are refused.
    """

    type: str = "text"

    @classmethod
    def config_class(cls, data: Mapping[str, object], key: str = "model.encoder") -> builtins.type[EncoderConfig]:
        """The class `data` is parsed into: the one registered for its `type` (read from the base class
        only; a subclass asked for by name is kept)."""
        if cls is not EncoderConfig:
            return cls
        return encoder_config_class(data.get("type", "text"), f"{key}.type" if key else "type")

    @property
    def shares_target_embedding(self) -> bool:
        """Can this encoder embed its source with the target embedding (model.share_embeddings)? Only
        the built-in text encoder (this class) can; a subclass (another encoder) cannot."""
        return type(self) is EncoderConfig


_ENCODER_CONFIGS: dict[str, type[EncoderConfig]] = {"text": EncoderConfig}

# Modules whose import registers the built-in encoder types, and the entry-point group through which
# installed packages add theirs (see `seq2seq.model.encoders.base.load_plugins`). Named, not imported
# here: the config layer sits below the model layer.
BUILTIN_ENCODER_MODULES = ("seq2seq.model.encoders",)
ENCODER_ENTRY_POINTS = "seq2seq.model.encoders"


def register_encoder_config(cls: type[EncoderConfig]) -> type[EncoderConfig]:
    """Class decorator: make `cls` (a dataclass whose `type` field defaults to its name) the config of
    `model.encoder.type: <name>`."""
    _ENCODER_CONFIGS[cls().type] = cls
    return cls


def discover_encoder_types(loaded: Iterable[str] | None = None) -> None:
    """Import the built-in encoder modules and the modules installed packages name in the
    `seq2seq.model.encoders` entry-point group, except those of names in `loaded` (default: the
    registered configs); importing them registers their configs (and modalities)."""
    for module in BUILTIN_ENCODER_MODULES:
        importlib.import_module(module)
    from importlib.metadata import entry_points

    skip = set(_ENCODER_CONFIGS if loaded is None else loaded)
    for entry in entry_points(group=ENCODER_ENTRY_POINTS):
        if entry.name not in skip:
            entry.load()


def encoder_types() -> list[str]:
    """Every registered encoder type, built-in and installed."""
    discover_encoder_types()
    return sorted(_ENCODER_CONFIGS)


def encoder_config_class(kind: object, key: str = "model.encoder.type") -> type[EncoderConfig]:
    """The config dataclass registered for encoder type `kind`; ConfigError naming the choices."""
    if kind not in _ENCODER_CONFIGS:
        discover_encoder_types()
    if not isinstance(kind, str) or kind not in _ENCODER_CONFIGS:
        raise ConfigError(f"config key '{key}': unknown encoder type {kind!r}; choose one of {sorted(_ENCODER_CONFIGS)}")
    return _ENCODER_CONFIGS[kind]
