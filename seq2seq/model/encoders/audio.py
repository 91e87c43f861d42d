"""The audio modality: waveforms -> log-mel filterbanks -> 4x convolutional subsampling -> Transformer.

    model:
      encoder: {type: audio, sample_rate: 16000, n_fft: 512, win_length: 400, hop_length: 160, n_mels: 80}

Pipeline, per utterance (every step works on real samples / frames only, so an utterance gives the
same memory alone as inside a padded batch, up to float rounding):

1. `AudioProcessor.load(path)`: soundfile reads any format libsndfile knows (WAV, FLAC, OGG, ...), at
   any sample rate; channels are averaged to mono and the signal is resampled to `sample_rate` with
   soxr (HQ). A missing, empty, unreadable, truncated or non-audio file, or one holding NaN or
   inf samples, raises `SourceError` naming the path.
2. `LogMel`: frames of `n_fft` samples every `hop_length` samples with a periodic Hann window of
   `win_length` samples (centred in the frame), no centre padding (`torch.stft(center=False)`): a
   frame exists only where the utterance has its samples, n_frames = 1 + (max(T, n_fft) - n_fft) //
   hop_length (an utterance shorter than one frame is zero-padded to one frame). Power spectrum
   |X|^2, then a mel filterbank on the HTK mel scale, mel(f) = 2595 log10(1 + f / 700), with
   `n_mels` triangles between f_min and f_max, peak 1, no area normalisation (the construction of
   `torchaudio.functional.melscale_fbanks(..., norm=None, mel_scale="htk")`), then
   log(mel + 1e-6). Per-utterance normalisation over the real frames (`normalize: global` = one
   mean and std per utterance, `per_bin` = mean and variance of each mel bin, `none`), or global
   CMVN (`corpus`: one mean and std per mel bin, computed over up to `corpus_utterances` training
   utterances before training and stored in the model's weights); padding frames are zero. Always
   computed in float32 (autocast is switched off for it). In training, a VTLP warp factor per
   utterance (`augment.vtlp`) evaluates the mel filters at warped frequencies.
3. SpecAugment (training mode only): `freq_masks` bands of up to `freq_mask_width` mel bins and
   `time_masks` spans of up to min(`time_mask_width`, `time_mask_max_frac` x real frames) frames
   set to 0 (the normalised mean), placed inside the utterance's real frames.
4. Subsampling 4x in time: two convolutions of kernel 3, stride 2, padding 1 in time (`conv2d`: over
   time x mel, 1 -> C -> C channels, as in ESPnet; `conv1d`: over time with the mel bins as
   channels, n_mels -> C -> C), each followed by ReLU and by zeroing the positions past the
   utterance's length, so padding never leaks into real positions. Frames F -> ceil(F/2) ->
   ceil(ceil(F/2)/2) positions (`subsampled_length`).
5. Linear to d_model, scaled by sqrt(d_model), plus sinusoidal positions computed for any length
   (no max_positions limit on the source), dropout, `model.encoder_layers` Transformer encoder
   layers (the text encoder's), final LayerNorm with pre-norm. Padded memory rows are zero.

The src batch is a tuple (waveforms [B, T] float, lengths [B] long) as `AudioProcessor.collate`
makes it; a bare [B, T] tensor means every row is full length. Training batches with VTLP are a dict
{"waveforms", "lengths", "warp" [B]} (`AudioProcessor.collate_augmented`; waveform augmentation,
`model.encoder.augment`, is in `seq2seq.model.encoders.augment`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.config import ConfigError
from seq2seq.config.encoder_section import AudioEncoderConfig, EncoderConfig
from seq2seq.config.model_section import ModelConfig
from seq2seq.model import sync
from seq2seq.model.layers import Dropout, EncoderLayer, sinusoidal_table
from seq2seq.model.encoders.audio_features import (
    LogMel, conv_length, log_mel, num_frames, padding_mask, spec_augment, subsampled_length,
)
from seq2seq.model.encoders.augment import augment_waveform
from seq2seq.model.encoders.base import Encoder, Modality, register
from seq2seq.model.encoders.media_io import AudioBatch, WaveformProcessor
from seq2seq.model.encoders.sources import AttentionView

log = logging.getLogger(__name__)




# --------------------------------------------------------------------------------------------
# Encoder
# --------------------------------------------------------------------------------------------


class ConvSubsampling(nn.Module):
    """[B, F, n_mels] features -> [B, ceil(ceil(F/2)/2), C * mel'] (conv2d) or [B, ..., C] (conv1d),
    with positions past each utterance's length zeroed after every convolution."""

    def __init__(self, cfg: AudioEncoderConfig) -> None:
        super().__init__()
        c = cfg.conv_channels
        self.two_d = cfg.subsampling == "conv2d"
        self.conv1: nn.Conv2d | nn.Conv1d
        self.conv2: nn.Conv2d | nn.Conv1d
        if self.two_d:
            self.conv1 = nn.Conv2d(1, c, 3, stride=2, padding=1)
            self.conv2 = nn.Conv2d(c, c, 3, stride=2, padding=1)
            self.out_dim = c * conv_length(conv_length(cfg.n_mels))
        else:
            self.conv1 = nn.Conv1d(cfg.n_mels, c, 3, stride=2, padding=1)
            self.conv2 = nn.Conv1d(c, c, 3, stride=2, padding=1)
            self.out_dim = c

    def forward(self, feats: Tensor, frames: Tensor) -> tuple[Tensor, Tensor]:
        lengths = frames
        if not torch.is_autocast_enabled(feats.device.type):
            feats = feats.to(self.conv1.weight.dtype)  # a model cast to bf16 takes float32 features
        if self.two_d:
            x = feats[:, None]  # [B, 1, F, M]: time is dim 2
            for conv in (self.conv1, self.conv2):
                x = F.relu(conv(x))
                lengths = conv_length(lengths)
                x = x.masked_fill(padding_mask(lengths, x.size(2))[:, None, :, None], 0.0)
            b, c, t, m = x.shape
            return x.permute(0, 2, 1, 3).reshape(b, t, c * m), lengths
        x = feats.transpose(1, 2)  # [B, M, F]: time is dim 2
        for conv in (self.conv1, self.conv2):
            x = F.relu(conv(x))
            lengths = conv_length(lengths)
            x = x.masked_fill(padding_mask(lengths, x.size(2))[:, None, :], 0.0)
        return x.transpose(1, 2), lengths


AudioSource = Union[Tensor, tuple[Tensor, Tensor], list[Tensor], dict[str, Tensor]]
"""What the audio encoder takes: an `AudioBatch`, a [waveforms, lengths] list, or bare waveforms [B, T] (or one [T])."""


def unpack_src(src: AudioSource) -> tuple[Tensor, Tensor]:
    """(waveforms, lengths) tuple/list, {"waveforms", "lengths"} dict, or a bare [B, T] tensor."""
    if isinstance(src, Tensor):
        if src.dim() == 1:
            src = src[None]
        return src, torch.full((src.size(0),), src.size(1), dtype=torch.long, device=src.device)
    if isinstance(src, dict):
        return src["waveforms"], src["lengths"]
    waveforms, lengths = src
    return waveforms, lengths


class AudioEncoder(Encoder[AudioSource]):
    """(waveforms [B, T], lengths [B]) -> (memory [B, S, D], pad mask [B, S]), S = subsampled frames."""

    positions: Tensor  # buffer [n, D], grown by position_table

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        enc = cfg.encoder
        if not isinstance(enc, AudioEncoderConfig):
            raise ConfigError(f"the audio encoder needs model.encoder.type: audio, got {enc.type!r}")
        self.cfg = enc
        self.d_model = cfg.d_model
        self.features = LogMel(enc)
        self.subsample = ConvSubsampling(enc)
        self.proj = nn.Linear(self.subsample.out_dim, cfg.d_model)
        self.scale = math.sqrt(cfg.d_model)
        self.register_buffer("positions", sinusoidal_table(256, cfg.d_model), persistent=False)
        self.dropout = Dropout(cfg.dropout)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers))
        self.final_norm = nn.LayerNorm(cfg.d_model) if cfg.norm == "pre" else nn.Identity()

    def position_table(self, n: int) -> Tensor:
        """Sinusoidal positions [n, D] for any n (the cached table grows when needed)."""
        if n > self.positions.size(0):
            size = max(n, 2 * self.positions.size(0))
            self.positions = sinusoidal_table(size, self.d_model).to(self.positions.device)
        return self.positions[:n]

    def fit_statistics(self, examples: Sequence[Tensor]) -> None:
        """normalize: corpus: the per-bin statistics from up to cfg.corpus_utterances of `examples`
        (training waveforms [T], evenly spaced through the list); nothing for the other settings."""
        if self.cfg.normalize != "corpus" or not examples:
            return
        n = min(len(examples), self.cfg.corpus_utterances)
        picked = [examples[i] for i in np.linspace(0, len(examples) - 1, n).round().astype(int)]
        frames = self.features.fit_corpus_statistics(picked)
        log.info("normalize: corpus: log-mel mean and std per bin from %d training utterances (%d frames)", n, frames)

    def forward(self, src: AudioSource) -> tuple[Tensor, Tensor]:
        waveforms, lengths = unpack_src(src)
        lengths = lengths.to(waveforms.device)
        warp = src.get("warp") if isinstance(src, dict) else None  # VTLP, training batches only
        feats, frames = self.features(waveforms, lengths, warp)
        if self.training:
            feats = spec_augment(feats, frames, self.cfg)
        x, out_lengths = self.subsample(feats, frames)
        pad_mask = padding_mask(out_lengths, x.size(1))
        x = self.proj(x) * self.scale + self.position_table(x.size(1)).to(x.dtype)
        x = self.dropout(x)
        mask = None if sync.host_reads_are_free(x.device) and not bool(pad_mask.any()) else pad_mask  # (as TextEncoder)
        for layer in self.layers:
            x = layer(x, mask)
        x = self.final_norm(x)
        if mask is not None:
            x = x.masked_fill(pad_mask[:, :, None], 0.0)
        return x, pad_mask


# --------------------------------------------------------------------------------------------
# Sources
# --------------------------------------------------------------------------------------------


class AudioProcessor(WaveformProcessor):
    """Audio file -> mono float32 waveform [T] at cfg.sample_rate (`media_io.read_audio`, resampled
    with soxr); batches of them -> (waveforms, lengths). A file that cannot be used (missing, not audio,
    truncated, holding NaN or inf samples, longer than `max_seconds`) raises SourceError naming it.
    A long recording splits into windows at its pauses (`split`)."""

    def __init__(self, cfg: EncoderConfig) -> None:
        if not isinstance(cfg, AudioEncoderConfig):
            raise ConfigError(f"the audio processor needs model.encoder.type: audio, got {cfg.type!r}")
        self.cfg = cfg
        self.sample_rate = cfg.sample_rate
        self.max_seconds = cfg.max_seconds

    def too_long(self, path: str, seconds: float) -> str:
        return f"audio file {path} lasts {seconds:.1f} s, more than model.encoder.max_seconds={self.max_seconds:g}"

    def length(self, example: Tensor) -> int:
        return int(subsampled_length(num_frames(int(example.numel()), self.cfg)))

    def collate_augmented(self, examples: Sequence[Tensor], rngs: Sequence[np.random.Generator]) -> AudioBatch:
        """Training: each waveform augmented with its generator (`augment.augment_waveform`), then
        collated; with VTLP a dict {"waveforms", "lengths", "warp" [B]}. Augmentation off: `collate`."""
        aug = self.cfg.augment
        if not aug.active:
            return self.collate(examples)
        pairs = [augment_waveform(e.reshape(-1), aug, self.cfg.sample_rate, rng) for e, rng in zip(examples, rngs)]
        waveforms, lengths = self.collate([wave for wave, _ in pairs])
        if not aug.warps:
            return waveforms, lengths
        return {"waveforms": waveforms, "lengths": lengths, "warp": torch.tensor([a for _, a in pairs])}

    def collate(self, examples: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
        lengths = torch.tensor([int(e.numel()) for e in examples], dtype=torch.long)
        size = max(int(lengths.max()) if len(examples) else 0, self.cfg.n_fft)
        waveforms = torch.zeros(len(examples), size, dtype=torch.float32)
        for i, e in enumerate(examples):
            waveforms[i, : e.numel()] = e.reshape(-1)
        return waveforms, lengths

    def attention_view(self, example: Tensor) -> AttentionView:
        """The utterance's log-mel spectrogram; each encoder position covers 4 feature frames."""
        frame_seconds = self.cfg.hop_length / self.cfg.sample_rate
        return AttentionView(spectrogram=log_mel(example, self.cfg).numpy(), frame_seconds=frame_seconds,
                             position_seconds=4 * frame_seconds)


register(Modality("audio", build_encoder=lambda cfg, shared: AudioEncoder(cfg), processor=AudioProcessor))
