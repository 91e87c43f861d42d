"""Pretrained Hugging Face backbones behind our decoder: `model.encoder.type: hf`.

    model:
      d_model: 256
      encoder: {type: hf, name_or_path: google/vit-base-patch16-224-in21k}   # a hub id or a local directory

The backbone's `config.json` says what it reads (`BACKBONES`, by its `model_type`):

    vit, deit, clip_vision_model (or a whole clip config: its vision tower)   images
    wav2vec2, hubert                                                          waveforms
    whisper (its encoder only)                                                log-mel features

When the section is read with `name_or_path` and no `backbone`, the backbone's config and its image
processor / feature extractor settings are read (from the directory, else the hub) into `backbone` and
`preprocessor`, which the model directory's config.yaml keeps: `seq2seq caption/transcribe/serve/export`
need neither `name_or_path` nor the network, and the backbone's weights are in model.safetensors with the
rest of the model. Training starts from the pretrained weights (`Modality.pretrained`); loading a model
directory builds the backbone from `backbone` and loads the saved weights into it. Without `name_or_path`,
`backbone` and `preprocessor` given in the config describe an architecture that a fresh run initialises
randomly and trains from scratch (the recipes' `config_hf.yaml`).

Sources, through the backbone's own preprocessing (its settings, transformers' PIL / numpy code):

* images: read like our image encoder's (Pillow, EXIF orientation, transparency on white, RGB), resized
  and cropped by the image processor at load (uint8 [C, H, W]), rescaled and normalised in `collate`
  exactly as the processor does -> float [B, C, H, W] -> memory [B, S, D], S = patches + class tokens.
* wav2vec2 / HuBERT: soundfile + soxr to the extractor's sampling rate (as our audio encoder), normalised
  per utterance when the extractor does -> (waveforms [B, T], lengths [B]) -> memory [B, S, D], S = the
  convolutional feature encoder's output length (`_get_feat_extract_output_lengths`), padding masked.
  Backbones whose first convolution normalises over time (`feat_extract_norm: group`, e.g. wav2vec2-base)
  would see the padding, so they run one utterance at a time; the others run batched with the mask.
* Whisper: the extractor's log-mel of the utterance padded to its window (30 s for real checkpoints;
  longer files are refused) -> (features [B, n_mels, 2 S], mel frames [B]) -> memory [B, S, D] with the
  positions past the real audio masked: ceil(frames / 2) of them are real.

Every row is computed as it would be alone: batch invariant (tests/test_hf_encoder.py).

Freezing (training settings, free to change when fine-tuning): `freeze: true` keeps the backbone's
weights fixed; with it, `unfreeze_top_layers: N` trains its top N layers (and what follows them, its
final norm), `unfreeze_after_steps: K` trains all of it from step K on. `training.encoder_lr` gives the
encoder's parameters their own learning rate.
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from seq2seq.config import ConfigError
from seq2seq.config.sections import EncoderConfig, ModelConfig, register_encoder_config
from seq2seq.model.encoders.base import Encoder, Modality, SourceError, SourceProcessor, register
from seq2seq.model.encoders.image import read_image

log = logging.getLogger(__name__)

EXTRA = "hf"
KEY = "model.encoder"


@dataclass(frozen=True)
class Backbone:
    """A supported kind of backbone: what it reads and which transformers class runs it."""

    modality: str  # "image" | "audio"
    inputs: str  # "pixels" | "waveform" | "log-mel"
    model_class: str  # transformers class built from the config (a dotted path below `transformers` if not top-level)
    pretrained_class: str  # the class whose from_pretrained reads a checkpoint of it
    class_tokens: int = 0  # positions an image backbone adds to its patches (CLS, distillation)
    kwargs: tuple[tuple[str, Any], ...] = ()  # constructor options (no pooling layer: it is never used)


BACKBONES = {
    "vit": Backbone("image", "pixels", "ViTModel", "ViTModel", 1, (("add_pooling_layer", False),)),
    "deit": Backbone("image", "pixels", "DeiTModel", "DeiTModel", 2, (("add_pooling_layer", False),)),
    "clip_vision_model": Backbone("image", "pixels", "CLIPVisionModel", "CLIPVisionModel", 1),
    "wav2vec2": Backbone("audio", "waveform", "Wav2Vec2Model", "Wav2Vec2Model"),
    "hubert": Backbone("audio", "waveform", "HubertModel", "HubertModel"),
    "whisper": Backbone("audio", "log-mel", "models.whisper.modeling_whisper.WhisperEncoder", "WhisperModel"),
}


def require_transformers() -> Any:
    """transformers, or a one-line ConfigError naming the extra that installs it."""
    try:
        return importlib.import_module("transformers")
    except ImportError:
        raise ConfigError(f"{KEY}.type hf needs the optional package 'transformers': "
                          f"pip install \"seq2seq[{EXTRA}]\"") from None


def transformers_class(name: str) -> Any:
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
        if spec.modality == "image":
            processor = transformers.AutoImageProcessor.from_pretrained(name_or_path, backend="pil")
        else:
            processor = transformers.AutoFeatureExtractor.from_pretrained(name_or_path)
    except (OSError, ValueError, KeyError) as e:
        what = "image processor" if spec.modality == "image" else "feature extractor"
        raise ConfigError(
            f"{KEY}.name_or_path {name_or_path!r}: cannot read the backbone's {what} settings "
            f"(preprocessor_config.json: {_reason(e)}); save the {what} beside the weights (save_pretrained) "
            f"or give its settings as {KEY}.preprocessor") from None
    backbone = json.loads(config.to_json_string(use_diff=False))
    backbone.pop("_name_or_path", None)  # where it was read from: not part of the architecture
    return backbone, json.loads(processor.to_json_string())


def image_size(settings: dict[str, Any]) -> tuple[int, int] | None:
    """(height, width) of the images an image processor with these settings makes (None: it depends on
    the image, e.g. a shortest-edge resize without a crop)."""
    for key, on in (("crop_size", "do_center_crop"), ("size", "do_resize")):
        size = settings.get(key)
        if settings.get(on) and isinstance(size, dict) and "height" in size and "width" in size:
            return int(size["height"]), int(size["width"])
    return None


def backbone_spec(model_type: Any) -> Backbone:
    if model_type not in BACKBONES:
        raise ConfigError(f"{KEY}: backbones of model_type {model_type!r} are not supported; "
                          f"supported: {', '.join(sorted(BACKBONES))} (and clip, for its vision tower)")
    return BACKBONES[model_type]


@register_encoder_config
@dataclass
class HFEncoderConfig(EncoderConfig):
    """`model.encoder` for `type: hf` (see the module docstring).

    name_or_path: a hub id or a directory written by `save_pretrained` (with the preprocessor's
        preprocessor_config.json); read once, when the config is, into `backbone` and `preprocessor`.
    freeze / unfreeze_top_layers / unfreeze_after_steps: which backbone weights train (see the module
        docstring); the unfreeze options need freeze: true.
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
        if self.name_or_path and not self.backbone:
            backbone, preprocessor = read_backbone(self.name_or_path)
            self.backbone, self.preprocessor = backbone, self.preprocessor or preprocessor
        if self.backbone:
            require_transformers()
            spec = backbone_spec(self.backbone.get("model_type"))
            if not self.preprocessor:
                raise ConfigError(f"{KEY}.preprocessor is empty: the backbone's image processor / feature "
                                  f"extractor settings are needed")
            if spec.modality == "image":
                size = image_size(self.preprocessor)
                expected = self.backbone.get("image_size")
                if size is not None and size != (expected, expected):
                    raise ConfigError(f"{KEY}: the image processor makes {size[0]}x{size[1]} images but the backbone "
                                      f"reads {expected}x{expected}")
            if spec.inputs == "log-mel":
                p, b = self.preprocessor, self.backbone
                frames = p.get("n_samples", 0) // max(p.get("hop_length", 1), 1)
                if frames != 2 * b.get("max_source_positions", 0) or p.get("feature_size") != b.get("num_mel_bins"):
                    raise ConfigError(
                        f"{KEY}: the feature extractor makes {p.get('feature_size')} x {frames} log-mel features but "
                        f"the Whisper encoder reads {b.get('num_mel_bins')} x {2 * b.get('max_source_positions', 0)}")

    @property
    def spec(self) -> Backbone:
        if not self.backbone:
            raise ConfigError(f"{KEY}.name_or_path is not set: name the backbone (a hub id or a directory)")
        return backbone_spec(self.backbone.get("model_type"))

    @property
    def source_kind(self) -> str:
        """"image" or "audio", from the backbone's model_type ("hf" before it is known)."""
        return self.spec.modality if self.backbone else self.type


# --------------------------------------------------------------------------------------------
# The encoder
# --------------------------------------------------------------------------------------------


def backbone_config(cfg: HFEncoderConfig) -> Any:
    transformers = require_transformers()
    return transformers.CONFIG_MAPPING[cfg.backbone["model_type"]].from_dict(dict(cfg.backbone))


def build_backbone(cfg: HFEncoderConfig, pretrained: bool = False) -> nn.Module:
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


def padding_mask(lengths: Tensor, size: int) -> Tensor:
    """[B, size], True at positions >= length."""
    return torch.arange(size, device=lengths.device)[None, :] >= lengths[:, None]


class HFEncoder(Encoder):
    """A transformers backbone as an `Encoder` (see the module docstring for the inputs).

    forward(src) -> (memory [B, S, D], pad_mask [B, S], True at padding), D = the backbone's width
    (the model adds `enc_to_dec_proj` when it differs from model.d_model); padded rows are zero.
    """

    def __init__(self, cfg: HFEncoderConfig, backbone: nn.Module | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.spec = cfg.spec
        self.backbone = backbone if backbone is not None else build_backbone(cfg)
        config = self.backbone.config
        self.d_model = config.output_hidden_size if getattr(config, "add_adapter", False) else config.hidden_size
        self.per_utterance = self.spec.inputs == "waveform" and config.feat_extract_norm == "group"
        self.frozen = False
        if cfg.freeze:
            self.freeze(cfg.unfreeze_top_layers)

    # ---- freezing ------------------------------------------------------------------------------

    def layer_stack(self) -> tuple[str, nn.ModuleList]:
        """(name, modules) of the backbone's Transformer layers: the ModuleList with one entry per
        layer (config.num_hidden_layers) holding the most parameters."""
        n = self.backbone.config.num_hidden_layers
        stacks = [(name, m) for name, m in self.backbone.named_modules() if isinstance(m, nn.ModuleList) and len(m) == n]
        if not stacks:
            raise ConfigError(f"{KEY}.unfreeze_top_layers: no stack of {n} layers found in {type(self.backbone).__name__}")
        return max(stacks, key=lambda s: sum(p.numel() for p in s[1].parameters()))

    def freeze(self, top_layers: int = 0) -> None:
        """Fix the backbone's weights, except its top `top_layers` layers and every parameter registered
        after them (the final norm)."""
        names = [name for name, _ in self.backbone.named_parameters()]
        keep: set[str] = set()
        if top_layers:
            stack_name, stack = self.layer_stack()
            if top_layers > len(stack):
                raise ConfigError(f"{KEY}.unfreeze_top_layers ({top_layers}) is more than the backbone's "
                                  f"{len(stack)} layers")
            top = tuple(f"{stack_name}.{i}." for i in range(len(stack) - top_layers, len(stack)))
            last = max(i for i, name in enumerate(names) if name.startswith(f"{stack_name}."))
            keep = {name for i, name in enumerate(names) if name.startswith(top) or i > last}
        for name, p in self.backbone.named_parameters():
            p.requires_grad_(name in keep)
        self.frozen = True

    def unfreeze(self) -> None:
        for p in self.backbone.parameters():
            p.requires_grad_(True)
        self.frozen = False

    def on_train_step(self, step: int) -> None:
        """Called by the trainer before each step (`step` = steps done): unfreezes the backbone at
        model.encoder.unfreeze_after_steps."""
        after = self.cfg.unfreeze_after_steps
        if self.frozen and after is not None and step >= after:
            self.unfreeze()
            log.info("step %d: the backbone's %s parameters train from now on (%s.unfreeze_after_steps)", step,
                     f"{sum(p.numel() for p in self.backbone.parameters()):,}", KEY)

    # ---- forward -------------------------------------------------------------------------------

    def _dtype(self, x: Tensor) -> Tensor:
        """Inputs in the backbone's dtype (a model cast to bf16 takes float32 pixels or samples)."""
        if torch.is_autocast_enabled(x.device.type):
            return x.float()
        return x.to(next(self.backbone.parameters()).dtype)

    def forward(self, src: Any) -> tuple[Tensor, Tensor]:
        inputs = self.spec.inputs
        if inputs == "pixels":
            memory = self.backbone(pixel_values=self._dtype(src)).last_hidden_state  # [B, S, D]
            return memory, torch.zeros(memory.shape[:2], dtype=torch.bool, device=memory.device)
        features, lengths = src
        lengths = lengths.to(features.device)
        if inputs == "log-mel":  # [B, n_mels, 2 S] over the whole window; ceil(frames / 2) positions are real
            memory = self.backbone(self._dtype(features)).last_hidden_state
            out_lengths = ((lengths - 1) // 2 + 1).clamp(min=1, max=memory.size(1))
        else:
            out_lengths = self.backbone._get_feat_extract_output_lengths(lengths).long()
            if self.per_utterance:  # group norm over time: each utterance alone, unpadded
                rows = [self.backbone(self._dtype(features[i: i + 1, : int(n)])).last_hidden_state[0]
                        for i, n in enumerate(lengths.tolist())]
                memory = nn.utils.rnn.pad_sequence(rows, batch_first=True)
            else:
                mask = ~padding_mask(lengths, features.size(1))
                memory = self.backbone(self._dtype(features), attention_mask=mask.long()).last_hidden_state
        pad_mask = padding_mask(out_lengths, memory.size(1))
        return memory.masked_fill(pad_mask[:, :, None], 0.0), pad_mask


# --------------------------------------------------------------------------------------------
# Reading sources
# --------------------------------------------------------------------------------------------


def hf_preprocessor(cfg: HFEncoderConfig) -> Any:
    """The transformers image processor (its PIL backend, where transformers has one) or feature extractor
    that the saved settings describe."""
    transformers = require_transformers()
    settings = dict(cfg.preprocessor)
    name = settings.get("image_processor_type") or settings.get("feature_extractor_type")
    cls = getattr(transformers, f"{name}Pil", None) or getattr(transformers, str(name), None)
    if cls is None:
        raise ConfigError(f"{KEY}.preprocessor: transformers has no processor class {name!r}")
    return cls.from_dict(settings)


class HFImageProcessor(SourceProcessor):
    """Image file -> uint8 [C, H, W], resized and cropped by the backbone's image processor (`load`);
    examples -> float [B, C, H, W] rescaled and normalised as that processor does (`collate`)."""

    def __init__(self, cfg: HFEncoderConfig) -> None:
        self.hf = hf_preprocessor(cfg)
        b = cfg.backbone
        self.channels = int(b.get("num_channels", 3))
        self.max_pixels = cfg.max_pixels
        size = b["image_size"]
        patch = b["patch_size"]
        self.positions = (size // patch) ** 2 + cfg.spec.class_tokens
        self.scale = float(self.hf.rescale_factor) if self.hf.do_rescale else 1.0
        normalize = bool(self.hf.do_normalize)
        self.mean = torch.tensor(self.hf.image_mean if normalize else [0.0], dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(self.hf.image_std if normalize else [1.0], dtype=torch.float32).view(1, -1, 1, 1)

    def load(self, path: str) -> Tensor:
        image = read_image(path, self.channels, self.max_pixels)
        pixels = self.hf(images=image, do_rescale=False, do_normalize=False, return_tensors="np").pixel_values[0]
        return torch.from_numpy(np.clip(np.rint(pixels), 0, 255).astype(np.uint8))

    def length(self, example: Tensor) -> int:
        return self.positions

    def collate(self, examples: list[Tensor]) -> Tensor:
        """uint8 [C, H, W] examples -> float32 [B, C, H, W] = (pixel * rescale_factor - mean) / std, the
        product in float64 as transformers computes it."""
        if not examples:
            raise ValueError("collate needs at least one image")
        batch = torch.stack(examples).to(torch.float64).mul_(self.scale).to(torch.float32)
        return batch.sub_(self.mean).div_(self.std)


class HFAudioProcessor(SourceProcessor):
    """Audio file -> mono float32 waveform [T] at the extractor's sampling rate (read and resampled by
    our `AudioProcessor`; normalised per utterance for wav2vec2-style extractors that do it).
    Batches: (waveforms [B, T], lengths [B]) for wav2vec2 / HuBERT; (log-mel [B, n_mels, F], real mel
    frames [B]) from Whisper's feature extractor."""

    def __init__(self, cfg: HFEncoderConfig) -> None:
        from seq2seq.model.encoders.audio import AudioEncoderConfig, AudioProcessor

        self.hf = hf_preprocessor(cfg)
        self.rate = int(self.hf.sampling_rate)
        self.reader = AudioProcessor(AudioEncoderConfig(sample_rate=self.rate, n_mels=20))
        self.log_mel = cfg.spec.inputs == "log-mel"
        b = cfg.backbone
        if self.log_mel:
            self.max_samples = int(self.hf.n_samples)
            self.positions = int(b["max_source_positions"])
        else:
            self.kernels, self.strides = list(b["conv_kernel"]), list(b["conv_stride"])
            self.min_samples = self.samples_for_one_frame()

    def samples_for_one_frame(self) -> int:
        n = 1
        for k, s in reversed(list(zip(self.kernels, self.strides))):
            n = (n - 1) * s + k
        return n

    def load(self, path: str) -> Tensor:
        wave = self.reader.load(path)
        n = wave.numel()
        if self.log_mel:
            if n > self.max_samples:
                raise SourceError(f"audio file {path} lasts {n / self.rate:.1f} s, more than the backbone's "
                                  f"{self.max_samples / self.rate:g} s window")
            return wave
        if n < self.min_samples:
            raise SourceError(f"audio file {path} is too short: {n} samples, the backbone needs {self.min_samples}")
        if getattr(self.hf, "do_normalize", False):
            wave = torch.from_numpy(self.hf.zero_mean_unit_var_norm([wave.numpy()], None)[0].astype(np.float32))
        return wave

    def length(self, example: Tensor) -> int:
        if self.log_mel:
            return self.positions  # the encoder computes the whole window
        n = int(example.numel())
        for k, s in zip(self.kernels, self.strides):
            n = (n - k) // s + 1
        return n

    def collate(self, examples: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
        if not examples:
            raise ValueError("collate needs at least one waveform")
        if self.log_mel:
            out = self.hf([e.numpy() for e in examples], sampling_rate=self.rate, return_tensors="pt",
                          return_attention_mask=True)
            return out.input_features.float(), out.attention_mask.sum(dim=1).long()
        lengths = torch.tensor([int(e.numel()) for e in examples], dtype=torch.long)
        waveforms = torch.full((len(examples), int(lengths.max())), float(self.hf.padding_value))
        for i, e in enumerate(examples):
            waveforms[i, : e.numel()] = e.reshape(-1)
        return waveforms, lengths


def hf_processor(cfg: EncoderConfig) -> SourceProcessor:
    if not isinstance(cfg, HFEncoderConfig):
        raise ConfigError(f"the hf processor needs {KEY}.type: hf, got {cfg.type!r}")
    return HFImageProcessor(cfg) if cfg.spec.modality == "image" else HFAudioProcessor(cfg)


def _encoder_config(cfg: ModelConfig) -> HFEncoderConfig:
    if not isinstance(cfg.encoder, HFEncoderConfig):
        raise ConfigError(f"the hf encoder needs {KEY}.type: hf, got {cfg.encoder.type!r}")
    return cfg.encoder


register(Modality(
    "hf",
    build_encoder=lambda cfg, shared: HFEncoder(_encoder_config(cfg)),
    processor=hf_processor,
    noun="source",
    pretrained=lambda cfg: HFEncoder(_encoder_config(cfg), build_backbone(_encoder_config(cfg), pretrained=True)),
))
