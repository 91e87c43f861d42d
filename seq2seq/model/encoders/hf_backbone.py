"""Hugging Face backbones: which ones are supported (`BACKBONES`), the `model.encoder` section of
`type: hf` (`HFEncoderConfig`), reading a backbone's config and preprocessor settings when a run
starts (`resolve_backbone`) and building the transformers module (`build_backbone`). The encoder is
seq2seq.model.encoders.hf, its sources seq2seq.model.encoders.hf_sources.
"""

from __future__ import annotations

import importlib
import json
import logging
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Mapping

import torch

from seq2seq.config import ConfigError
from seq2seq.config.encoder_section import EncoderConfig, register_encoder_config
from seq2seq.model.encoders.sources import AUDIO, IMAGE, SourceKind

if TYPE_CHECKING:  # an optional dependency (the hf extra)
    from transformers import PretrainedConfig, PreTrainedModel

log = logging.getLogger(__name__)

EXTRA = "hf"
KEY = "model.encoder"


@dataclass(frozen=True)
class Backbone:
    """A supported kind of backbone: what it reads and which transformers class runs it."""

    kind: SourceKind  # IMAGE or AUDIO
    inputs: str  # "pixels" | "waveform" | "log-mel"
    model_class: str  # transformers class built from the config (a dotted path below `transformers` if not top-level)
    pretrained_class: str  # the class whose from_pretrained reads a checkpoint of it
    class_tokens: int = 0  # positions an image backbone adds to its patches (CLS, distillation)
    kwargs: tuple[tuple[str, Any], ...] = ()  # constructor options (no pooling layer: it is never used)


BACKBONES = {
    "vit": Backbone(IMAGE, "pixels", "ViTModel", "ViTModel", 1, (("add_pooling_layer", False),)),
    "deit": Backbone(IMAGE, "pixels", "DeiTModel", "DeiTModel", 2, (("add_pooling_layer", False),)),
    "clip_vision_model": Backbone(IMAGE, "pixels", "CLIPVisionModel", "CLIPVisionModel", 1),
    "wav2vec2": Backbone(AUDIO, "waveform", "Wav2Vec2Model", "Wav2Vec2Model"),
    "hubert": Backbone(AUDIO, "waveform", "HubertModel", "HubertModel"),
    "whisper": Backbone(AUDIO, "log-mel", "models.whisper.modeling_whisper.WhisperEncoder", "WhisperModel"),
}


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
        if spec.kind is IMAGE:
            processor = transformers.AutoImageProcessor.from_pretrained(name_or_path, backend="pil")
        else:
            processor = transformers.AutoFeatureExtractor.from_pretrained(name_or_path)
    except (OSError, ValueError, KeyError) as e:
        what = "image processor" if spec.kind is IMAGE else "feature extractor"
        raise ConfigError(
            f"{KEY}.name_or_path {name_or_path!r}: cannot read the backbone's {what} settings "
            f"(preprocessor_config.json: {_reason(e)}); save the {what} beside the weights (save_pretrained) "
            f"or give its settings as {KEY}.preprocessor") from None
    backbone = json.loads(config.to_json_string(use_diff=False))
    backbone.pop("_name_or_path", None)  # where it was read from: not part of the architecture
    return backbone, json.loads(processor.to_json_string())


def image_size(settings: Mapping[str, object]) -> tuple[int, int] | None:
    """(height, width) of the images an image processor with these settings makes (None: it depends on
    the image, e.g. a shortest-edge resize without a crop)."""
    for key, on in (("crop_size", "do_center_crop"), ("size", "do_resize")):
        size = settings.get(key)
        if settings.get(on) and isinstance(size, dict) and "height" in size and "width" in size:
            return int(size["height"]), int(size["width"])
    return None


def backbone_spec(model_type: object) -> Backbone:
    if not isinstance(model_type, str) or model_type not in BACKBONES:
        raise ConfigError(f"{KEY}: backbones of model_type {model_type!r} are not supported; "
                          f"supported: {', '.join(sorted(BACKBONES))} (and clip, for its vision tower)")
    return BACKBONES[model_type]


@register_encoder_config
@dataclass
class HFEncoderConfig(EncoderConfig):
    """`model.encoder` for `type: hf` (see seq2seq.model.encoders.hf). Pure data: nothing is read when
    it is parsed; `resolve_backbone` fills `backbone` and `preprocessor` from `name_or_path` when a
    run starts.

    name_or_path: a hub id or a directory written by `save_pretrained` (with the preprocessor's
        preprocessor_config.json); read once, when a run starts, into `backbone` and `preprocessor`.
    freeze / unfreeze_top_layers / unfreeze_after_steps: which backbone weights train (see
        seq2seq.model.encoders.hf); the unfreeze options need freeze: true.
    max_pixels: image backbones: larger images (width x height, from the file's header) are refused
        before they are decoded, as by our image encoder; None = no limit.
    backbone: the backbone's config.json (filled from name_or_path; kept in the model directory).
    preprocessor: its image processor / feature extractor settings (likewise; give them here to
        override or supply them).
    """

    type: str = "hf"
    name_or_path: str | None = None
    freeze: bool = False
    unfreeze_top_layers: int = 0
    unfreeze_after_steps: int | None = None
    max_pixels: int | None = 40_000_000
    backbone: dict[str, Any] = field(default_factory=dict)
    preprocessor: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.type != "hf":
            raise ConfigError(f"{KEY}.type must be 'hf' for an HFEncoderConfig, got {self.type!r}")
        if self.unfreeze_top_layers < 0:
            raise ConfigError(f"{KEY}.unfreeze_top_layers must be >= 0, got {self.unfreeze_top_layers}")
        if self.max_pixels is not None and self.max_pixels < 1:
            raise ConfigError(f"{KEY}.max_pixels must be positive (or null: no limit), got {self.max_pixels}")
        if self.unfreeze_after_steps is not None and self.unfreeze_after_steps < 1:
            raise ConfigError(f"{KEY}.unfreeze_after_steps must be >= 1, got {self.unfreeze_after_steps}")
        if (self.unfreeze_top_layers or self.unfreeze_after_steps is not None) and not self.freeze:
            raise ConfigError(f"{KEY}.unfreeze_top_layers and {KEY}.unfreeze_after_steps need {KEY}.freeze: true")
        if self.backbone:
            check_backbone(self)

    @property
    def spec(self) -> Backbone:
        if not self.backbone:
            raise ConfigError(f"{KEY}.name_or_path is not set: name the backbone (a hub id or a directory)")
        return backbone_spec(self.backbone.get("model_type"))


def check_backbone(cfg: HFEncoderConfig) -> None:
    """ConfigError naming the key when `backbone` and `preprocessor` do not fit each other."""
    spec = backbone_spec(cfg.backbone.get("model_type"))
    if not cfg.preprocessor:
        raise ConfigError(f"{KEY}.preprocessor is empty: the backbone's image processor / feature "
                          f"extractor settings are needed")
    if spec.kind is IMAGE:
        size = image_size(cfg.preprocessor)
        expected = cfg.backbone.get("image_size")
        if size is not None and size != (expected, expected):
            raise ConfigError(f"{KEY}: the image processor makes {size[0]}x{size[1]} images but the backbone "
                              f"reads {expected}x{expected}")
    if spec.inputs == "log-mel":
        p, b = cfg.preprocessor, cfg.backbone
        frames = p.get("n_samples", 0) // max(p.get("hop_length", 1), 1)
        if frames != 2 * b.get("max_source_positions", 0) or p.get("feature_size") != b.get("num_mel_bins"):
            raise ConfigError(
                f"{KEY}: the feature extractor makes {p.get('feature_size')} x {frames} log-mel features but "
                f"the Whisper encoder reads {b.get('num_mel_bins')} x {2 * b.get('max_source_positions', 0)}")


def resolve_backbone(cfg: EncoderConfig) -> None:
    """At the start of a run (training, or building the encoder or processor): read the backbone's
    config and preprocessor settings from `name_or_path` into `backbone` and `preprocessor` where the
    config does not hold them yet, and check that transformers is installed. ConfigError naming the
    key, in one line, when either cannot be read."""
    if not isinstance(cfg, HFEncoderConfig):
        raise ConfigError(f"the hf encoder needs {KEY}.type: hf, got {cfg.type!r}")
    if cfg.name_or_path and not cfg.backbone:
        backbone, preprocessor = read_backbone(cfg.name_or_path)
        cfg.backbone, cfg.preprocessor = backbone, cfg.preprocessor or preprocessor
        check_backbone(cfg)
    if cfg.backbone:
        require_transformers()


def source_kind_of(cfg: EncoderConfig) -> SourceKind:
    """IMAGE or AUDIO, after the backbone (read from name_or_path if the config does not hold it)."""
    resolve_backbone(cfg)
    assert isinstance(cfg, HFEncoderConfig)
    return cfg.spec.kind


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
