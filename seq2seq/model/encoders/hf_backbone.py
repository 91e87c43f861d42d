"""Hugging Face backbones: reading a backbone's config and preprocessor settings when a run
starts (`resolve_backbone`) and building the transformers module (`build_backbone`). The encoder is
seq2seq.model.encoders.hf, its sources seq2seq.model.encoders.hf_sources.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch

from seq2seq.config import ConfigError
from seq2seq.config.encoder_section import KEY, EncoderConfig, HFEncoderConfig, backbone_spec
from seq2seq.model.encoders.sources import AUDIO, IMAGE, SourceKind

if TYPE_CHECKING:  # an optional dependency (the hf extra)
    from transformers import PretrainedConfig, PreTrainedModel

log = logging.getLogger(__name__)

EXTRA = "hf"

def require_transformers() -> ModuleType:
    """transformers, or a one-line ConfigError naming the extra that installs it."""
    try:
        return importlib.import_module("transformers")
    except ImportError:
        raise ConfigError(f"{KEY}.type hf needs the optional package 'transformers': "
                          f"pip install \"seq2seq[{EXTRA}]\"") from None


def transformers_class(name: str) -> type[PreTrainedModel]:
    """A transformers class by its top-level name ("ViTModel") or its dotted path below the package
    ("models.whisper.modeling_whisper.WhisperEncoder": classes the package does not export)."""
    module, _, cls = name.rpartition(".")
    return getattr(importlib.import_module(f"transformers.{module}") if module else require_transformers(), cls)


def _reason(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def read_backbone(name_or_path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The backbone's config and its preprocessor's settings, as JSON-safe dicts (ConfigError naming the
    key when either cannot be read)."""
    transformers = require_transformers()
    try:
        config = transformers.AutoConfig.from_pretrained(name_or_path)
    except (OSError, ValueError, KeyError) as e:
        raise ConfigError(f"{KEY}.name_or_path {name_or_path!r}: cannot read the backbone's config ({_reason(e)})") from None
    if config.model_type == "clip":  # a whole CLIP model: its vision tower
        config = config.vision_config
    spec = backbone_spec(config.model_type)
    try:
        if spec.kind == IMAGE.name:
            processor = transformers.AutoImageProcessor.from_pretrained(name_or_path, backend="pil")
        else:
            processor = transformers.AutoFeatureExtractor.from_pretrained(name_or_path)
    except (OSError, ValueError, KeyError) as e:
        what = "image processor" if spec.kind == IMAGE.name else "feature extractor"
        raise ConfigError(
            f"{KEY}.name_or_path {name_or_path!r}: cannot read the backbone's {what} settings "
            f"(preprocessor_config.json: {_reason(e)}); save the {what} beside the weights (save_pretrained) "
            f"or give its settings as {KEY}.preprocessor") from None
    backbone = json.loads(config.to_json_string(use_diff=False))
    backbone.pop("_name_or_path", None)  # where it was read from: not part of the architecture
    return backbone, json.loads(processor.to_json_string())


def resolve_backbone(cfg: EncoderConfig) -> HFEncoderConfig:
    """At the start of a run (training, or building the encoder or processor): cfg with the backbone's
    config and preprocessor settings, read from `name_or_path`, as `backbone` and `preprocessor` where
    it does not hold them yet (a new config, checked as parsing checks one: `check_backbone`); checks
    that transformers is installed. ConfigError naming the key, in one line, when either cannot be read."""
    if not isinstance(cfg, HFEncoderConfig):
        raise ConfigError(f"the hf encoder needs {KEY}.type: hf, got {cfg.type!r}")
    if cfg.name_or_path and not cfg.backbone:
        backbone, preprocessor = read_backbone(cfg.name_or_path)
        cfg = dataclasses.replace(cfg, backbone=backbone, preprocessor=cfg.preprocessor or preprocessor)
    if cfg.backbone:
        require_transformers()
    return cfg


def source_kind_of(cfg: EncoderConfig) -> SourceKind:
    """IMAGE or AUDIO, after the backbone (read from name_or_path if the config does not hold it)."""
    return IMAGE if resolve_backbone(cfg).spec.kind == IMAGE.name else AUDIO


def backbone_config(cfg: HFEncoderConfig) -> PretrainedConfig:
    transformers = require_transformers()
    return transformers.CONFIG_MAPPING[cfg.backbone["model_type"]].from_dict(dict(cfg.backbone))


def build_backbone(cfg: HFEncoderConfig, pretrained: bool = False) -> PreTrainedModel:
    """The transformers module: from the saved config (its weights to be loaded), or with the pretrained
    weights of `cfg.name_or_path` (the start of training). At the start of training without a
    `name_or_path` (the backbone's config given in `backbone`), the weights are transformers' random
    initialisation of that config: the architecture trained from scratch."""
    spec = cfg.spec
    kwargs = dict(spec.kwargs)
    if not pretrained or not cfg.name_or_path:
        model = transformers_class(spec.model_class)(backbone_config(cfg), **kwargs)
        if pretrained:
            log.info("backbone: %s from model.encoder.backbone, randomly initialised (%s parameters)",
                     type(model).__name__, f"{sum(p.numel() for p in model.parameters()):,}")
        return model
    cls = transformers_class(spec.pretrained_class)
    try:
        model = cls.from_pretrained(cfg.name_or_path, dtype=torch.float32, **kwargs)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{KEY}.name_or_path {cfg.name_or_path!r}: cannot load the backbone's weights "
                          f"({_reason(e)})") from None
    if spec.model_class != spec.pretrained_class:  # Whisper: the encoder of the whole model
        model = model.get_encoder()
    log.info("backbone: %s from %s (%s parameters)", type(model).__name__, cfg.name_or_path,
             f"{sum(p.numel() for p in model.parameters()):,}")
    return model
