"""Sources of `type: hf` models, through the backbone's own preprocessing (its saved settings,
transformers' PIL / numpy code), read by `seq2seq.model.encoders.media_io` as our own encoders read
them.

* images (`HFImageProcessor`, kind IMAGE): resized and cropped by the image processor at load (uint8
  [C, H, W]), rescaled and normalised in `collate` exactly as the processor does -> float [B, C, H, W].
* wav2vec2 / HuBERT (`HFAudioProcessor`, kind AUDIO): mono waveforms at the extractor's sampling rate
  (soxr); normalised per example in `collate` when the extractor does -> (waveforms [B, T], lengths [B]).
* Whisper: the extractor's log-mel of each example padded to its window (30 s for real checkpoints;
  a longer file is refused by `load`, and split into windows of at most that by `transcribe`) ->
  (features [B, n_mels, 2 S], mel frames [B]).

Audio examples are the raw waveform, so a long recording splits into windows at its pauses as with
the native audio encoder, each window normalised on its own like a training utterance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from seq2seq.config import ConfigError
from seq2seq.config.encoder_section import EncoderConfig
from seq2seq.model.encoders.audio_windows import Window
from seq2seq.model.encoders.sources import IMAGE, AttentionView, SourceError, SourceInfo, SourceProcessor
from seq2seq.config.encoder_section import KEY, HFEncoderConfig
from seq2seq.model.encoders.hf_backbone import require_transformers, resolve_backbone
from seq2seq.model.encoders.media_io import WaveformProcessor, probe_image, read_image


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


class HFImageProcessor(SourceProcessor[Tensor, Tensor]):
    """Image file -> uint8 [C, H, W], resized and cropped by the backbone's image processor (`load`);
    examples -> float [B, C, H, W] rescaled and normalised as that processor does (`collate`)."""

    kind = IMAGE

    def __init__(self, cfg: HFEncoderConfig) -> None:
        self.hf = hf_preprocessor(cfg)
        b = cfg.backbone
        self.channels = int(b.get("num_channels", 3))
        self.max_pixels = cfg.max_pixels
        self.grid = (b["image_size"] // b["patch_size"],) * 2
        self.class_tokens = cfg.spec.class_tokens
        self.positions = self.grid[0] * self.grid[1] + self.class_tokens
        self.scale = float(self.hf.rescale_factor) if self.hf.do_rescale else 1.0
        normalize = bool(self.hf.do_normalize)
        self.mean = torch.tensor(self.hf.image_mean if normalize else [0.0], dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(self.hf.image_std if normalize else [1.0], dtype=torch.float32).view(1, -1, 1, 1)

    def probe(self, path: str) -> SourceInfo | None:
        return probe_image(path)

    def load(self, path: str) -> Tensor:
        image = read_image(path, self.channels, self.max_pixels)
        pixels = self.hf(images=image, do_rescale=False, do_normalize=False, return_tensors="np").pixel_values[0]
        return torch.from_numpy(np.clip(np.rint(pixels), 0, 255).astype(np.uint8))

    def length(self, example: Tensor) -> int:
        return self.positions

    def collate(self, examples: Sequence[Tensor]) -> Tensor:
        """uint8 [C, H, W] examples -> float32 [B, C, H, W] = (pixel * rescale_factor - mean) / std, the
        product in float64 as transformers computes it."""
        if not examples:
            raise ValueError("collate needs at least one image")
        batch = torch.stack(list(examples)).to(torch.float64).mul_(self.scale).to(torch.float32)
        return batch.sub_(self.mean).div_(self.std)

    def attention_view(self, example: Tensor) -> AttentionView:
        """The cropped image under the backbone's patch grid (its class tokens are not on it)."""
        return AttentionView(image=example.permute(1, 2, 0).numpy(), grid=self.grid, skip=self.class_tokens)


class HFAudioProcessor(WaveformProcessor):
    """Audio file -> mono float32 waveform [T] at the extractor's sampling rate. Batches: (waveforms
    [B, T], lengths [B]) for wav2vec2 / HuBERT, each normalised on its own where the extractor does;
    (log-mel [B, n_mels, F], real mel frames [B]) from Whisper's feature extractor, whose window is
    `max_seconds`."""

    def __init__(self, cfg: HFEncoderConfig) -> None:
        self.hf = hf_preprocessor(cfg)
        self.sample_rate = int(self.hf.sampling_rate)
        self.log_mel = cfg.spec.inputs == "log-mel"
        b = cfg.backbone
        if self.log_mel:
            self.max_seconds = self.encoder_seconds = int(self.hf.n_samples) / self.sample_rate
            self.positions = int(b["max_source_positions"])
        else:
            self.kernels, self.strides = list(b["conv_kernel"]), list(b["conv_stride"])
            self.min_samples = self.samples_for_one_frame()
        self.normalize = not self.log_mel and bool(getattr(self.hf, "do_normalize", False))

    def samples_for_one_frame(self) -> int:
        n = 1
        for k, s in reversed(list(zip(self.kernels, self.strides))):
            n = (n - 1) * s + k
        return n

    def too_long(self, path: str, seconds: float) -> str:
        return f"audio file {path} lasts {seconds:.1f} s, more than the backbone's {self.max_seconds:g} s window"

    def load(self, path: str) -> Tensor:
        wave = self.read_waveform(path)
        if not self.log_mel and wave.numel() < self.min_samples:
            raise SourceError(f"audio file {path} is too short: {wave.numel()} samples, the backbone needs "
                              f"{self.min_samples}")
        return wave

    def crop(self, example: Tensor, window: Window) -> Tensor:
        piece = super().crop(example, window)
        if not self.log_mel and piece.numel() < self.min_samples:  # too short for one frame: padded with silence
            piece = torch.nn.functional.pad(piece, (0, self.min_samples - piece.numel()))
        return piece

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
            out = self.hf([e.numpy() for e in examples], sampling_rate=self.sample_rate, return_tensors="pt",
                          return_attention_mask=True)
            return out.input_features.float(), out.attention_mask.sum(dim=1).long()
        if self.normalize:
            examples = [torch.from_numpy(self.hf.zero_mean_unit_var_norm([e.numpy()], None)[0].astype(np.float32))
                        for e in examples]
        lengths = torch.tensor([int(e.numel()) for e in examples], dtype=torch.long)
        waveforms = torch.full((len(examples), int(lengths.max())), float(self.hf.padding_value))
        for i, e in enumerate(examples):
            waveforms[i, : e.numel()] = e.reshape(-1)
        return waveforms, lengths


def hf_processor(cfg: EncoderConfig) -> SourceProcessor:
    """The processor of a `type: hf` encoder: images or audio, after its backbone."""
    cfg = resolve_backbone(cfg)
    return HFImageProcessor(cfg) if cfg.spec.kind == IMAGE.name else HFAudioProcessor(cfg)
