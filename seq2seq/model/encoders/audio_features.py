"""Log-mel features of the audio modality: the maths behind `AudioEncoder`, no file I/O.

    mel_filterbank(cfg)            -> HTK-scale triangles [n_fft // 2 + 1, n_mels]
    LogMel(cfg)(waveforms, lengths) -> (normalised log-mel [B, F, n_mels], frames [B])
    num_frames / subsampled_length  -> frames of an utterance, encoder positions after 4x subsampling
    spec_augment(feats, frames, cfg) -> SpecAugment masks (training)

`cfg` is the `AudioEncoderConfig` (seq2seq.model.encoders.audio), whose module docstring states the
pipeline step by step; this module names only the fields it reads (the `MelSettings` protocol).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, overload

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.config.encoder_section import mel_band_edges
from seq2seq.model.encoders.augment import vtlp_warp



class MelSettings(Protocol):
    """What these functions read of their `cfg`: the fields of `seq2seq.config.encoder_section.AudioEncoderConfig`
    (the one config class, `model.encoder` of type audio), declared here by shape."""

    @property
    def sample_rate(self) -> int: ...
    @property
    def n_fft(self) -> int: ...
    @property
    def hop_length(self) -> int: ...
    @property
    def window(self) -> int: ...
    @property
    def n_mels(self) -> int: ...
    @property
    def f_min(self) -> float: ...
    @property
    def fmax(self) -> float: ...
    @property
    def normalize(self) -> str: ...
    @property
    def freq_masks(self) -> int: ...
    @property
    def freq_mask_width(self) -> int: ...
    @property
    def time_masks(self) -> int: ...
    @property
    def time_mask_width(self) -> int: ...
    @property
    def time_mask_max_frac(self) -> float: ...

LOG_EPS = 1e-6  # log(mel power + LOG_EPS)
NORM_EPS = 1e-5  # variance floor of the per-utterance normalisation


# --------------------------------------------------------------------------------------------
# Mel filterbank
# --------------------------------------------------------------------------------------------


def mel_filterbank(cfg: MelSettings, warp: np.ndarray | None = None) -> np.ndarray:
    """HTK-scale triangular filters [n_fft // 2 + 1, n_mels] (float64), peak 1, no area normalisation.

    warp: VTLP factors [B] -> [B, n_fft // 2 + 1, n_mels], each evaluated at the FFT bins' warped
    frequencies (`augment.vtlp_warp`): the energy at f counts in the filters at alpha f."""
    freqs = np.linspace(0.0, cfg.sample_rate / 2, cfg.n_fft // 2 + 1)
    if warp is not None:
        freqs = vtlp_warp(freqs[None, :], np.asarray(warp, dtype=np.float64)[:, None], cfg.sample_rate / 2)
    hz = mel_band_edges(cfg.f_min, cfg.fmax, cfg.n_mels)
    lower, center, upper = hz[:-2], hz[1:-1], hz[2:]
    up = (freqs[..., None] - lower) / (center - lower)
    down = (upper - freqs[..., None]) / (upper - center)
    return np.maximum(0.0, np.minimum(up, down))


# --------------------------------------------------------------------------------------------
# Lengths
# --------------------------------------------------------------------------------------------


@overload
def num_frames(n_samples: int, cfg: MelSettings) -> int: ...
@overload
def num_frames(n_samples: Tensor, cfg: MelSettings) -> Tensor: ...
def num_frames(n_samples: int | Tensor, cfg: MelSettings) -> int | Tensor:
    """Frames of an utterance of n_samples (>= 1) samples: 1 + (max(n, n_fft) - n_fft) // hop."""
    if isinstance(n_samples, Tensor):
        return (n_samples.clamp(min=cfg.n_fft) - cfg.n_fft) // cfg.hop_length + 1
    return (max(int(n_samples), cfg.n_fft) - cfg.n_fft) // cfg.hop_length + 1


@overload
def conv_length(n: int) -> int: ...
@overload
def conv_length(n: Tensor) -> Tensor: ...
def conv_length(n: int | Tensor) -> int | Tensor:
    """Output length of a kernel 3, stride 2, padding 1 convolution: floor((n + 2 - 3) / 2) + 1."""
    return (n - 1) // 2 + 1


@overload
def subsampled_length(n_frames: int) -> int: ...
@overload
def subsampled_length(n_frames: Tensor) -> Tensor: ...
def subsampled_length(n_frames: int | Tensor) -> int | Tensor:
    """Encoder positions of n_frames feature frames after the two stride-2 convolutions."""
    return conv_length(conv_length(n_frames))


def padding_mask(lengths: Tensor, size: int) -> Tensor:
    """[B, size], True at positions >= length."""
    return torch.arange(size, device=lengths.device)[None, :] >= lengths[:, None]


# --------------------------------------------------------------------------------------------
# Features
# --------------------------------------------------------------------------------------------


class LogMel(nn.Module):
    """(waveforms [B, T], lengths [B], optional VTLP warp [B]) -> (normalised log-mel [B, F, n_mels],
    frame lengths [B]).

    Frames past an utterance's length are zero; samples past it are ignored (zeroed first). With
    `normalize: corpus` the per-bin statistics are the buffers corpus_mean, corpus_std [n_mels]
    (saved with the weights; 0 and 1, i.e. no normalisation, until `fit_corpus_statistics`)."""

    def __init__(self, cfg: MelSettings) -> None:
        super().__init__()
        self.cfg = cfg
        self.register_buffer("window", torch.hann_window(cfg.window, periodic=True), persistent=False)
        self.register_buffer("mel", torch.from_numpy(mel_filterbank(cfg)).float(), persistent=False)
        if cfg.normalize == "corpus":
            self.register_buffer("corpus_mean", torch.zeros(cfg.n_mels))
            self.register_buffer("corpus_std", torch.ones(cfg.n_mels))

    def _apply(self, fn, *args, **kwargs):
        """Moves follow the model (device), but the window, mel matrix and corpus statistics stay exact
        float32 even when the model is cast to bf16/fp16: features are always computed in float32."""
        stats = {name: getattr(self, name) for name in ("corpus_mean", "corpus_std") if hasattr(self, name)}
        super()._apply(fn, *args, **kwargs)
        device = self.mel.device
        self.window = torch.hann_window(self.cfg.window, periodic=True, device=device)
        self.mel = torch.from_numpy(mel_filterbank(self.cfg)).float().to(device)
        for name, value in stats.items():
            setattr(self, name, value.float().to(device))
        return self

    def raw(self, waveforms: Tensor, lengths: Tensor, warp: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Unnormalised log-mel [B, F, n_mels] (float32, autocast off by the caller), frame lengths [B],
        real-frame mask [B, F, 1]. warp [B]: VTLP factors, one filterbank per utterance."""
        cfg = self.cfg
        x = waveforms.float()
        x = x.masked_fill(padding_mask(lengths, x.size(1)), 0.0)
        if x.size(1) < cfg.n_fft:
            x = F.pad(x, (0, cfg.n_fft - x.size(1)))
        spec = torch.stft(x, cfg.n_fft, cfg.hop_length, cfg.window, self.window, center=False,
                          return_complex=True)  # [B, n_freq, F]
        power = spec.real.square() + spec.imag.square()
        mel = self.mel if warp is None else torch.from_numpy(
            mel_filterbank(cfg, warp.detach().cpu().double().numpy())).float().to(x.device)  # [B, n_freq, n_mels]
        feats = torch.log(torch.matmul(power.transpose(1, 2), mel) + LOG_EPS)  # [B, F, n_mels]
        frames = num_frames(lengths, cfg).clamp(max=feats.size(1))
        real = ~padding_mask(frames, feats.size(1))[:, :, None]  # [B, F, 1]
        return feats, frames, real

    def forward(self, waveforms: Tensor, lengths: Tensor, warp: Tensor | None = None) -> tuple[Tensor, Tensor]:
        with torch.autocast(waveforms.device.type, enabled=False):
            feats, frames, real = self.raw(waveforms, lengths, warp)
            stats = (self.corpus_mean, self.corpus_std) if self.cfg.normalize == "corpus" else None
            feats = normalize(feats, real, frames, self.cfg.normalize, stats)
        return feats, frames

    @torch.no_grad()
    def fit_corpus_statistics(self, waveforms: Sequence[Tensor], batch_size: int = 32) -> int:
        """Set corpus_mean / corpus_std [n_mels] to the mean and sqrt(variance + 1e-5) of each mel bin's
        unnormalised log-mel over every real frame of `waveforms` ([T] each). Returns the frame count."""
        device = self.mel.device
        total = torch.zeros(self.cfg.n_mels, dtype=torch.float64)
        squares = torch.zeros(self.cfg.n_mels, dtype=torch.float64)
        count = 0
        for start in range(0, len(waveforms), batch_size):
            chunk = [w.reshape(-1) for w in waveforms[start:start + batch_size]]
            lengths = torch.tensor([w.numel() for w in chunk])
            batch = torch.nn.utils.rnn.pad_sequence(chunk, batch_first=True)
            with torch.autocast(device.type, enabled=False):
                feats, frames, real = self.raw(batch.to(device), lengths.to(device))
            feats = feats.double().masked_fill(~real, 0.0).cpu()
            total += feats.sum(dim=(0, 1))
            squares += feats.square().sum(dim=(0, 1))
            count += int(frames.sum())
        mean = total / max(count, 1)
        var = (squares / max(count, 1) - mean.square()).clamp(min=0.0)
        self.corpus_mean = mean.float().to(device)
        self.corpus_std = torch.sqrt(var + NORM_EPS).float().to(device)
        return count


def normalize(feats: Tensor, real: Tensor, frames: Tensor, how: str,
              corpus: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """Per-utterance mean/variance normalisation over real frames, or with `corpus` = (mean, std)
    [n_mels] for how="corpus"; padding frames set to 0."""
    feats = feats.masked_fill(~real, 0.0)
    if how == "none":
        return feats
    if how == "corpus":
        assert corpus is not None, 'how="corpus" takes the corpus statistics'
        mean, std = corpus
        return ((feats - mean) / std).masked_fill(~real, 0.0)
    n = frames.clamp(min=1).to(feats.dtype)[:, None, None]  # [B, 1, 1]
    if how == "global":
        n = n * feats.size(2)
        mean = feats.sum(dim=(1, 2), keepdim=True) / n
        var = ((feats - mean).masked_fill(~real, 0.0).square().sum(dim=(1, 2), keepdim=True)) / n
    else:
        mean = feats.sum(dim=1, keepdim=True) / n
        var = ((feats - mean).masked_fill(~real, 0.0).square().sum(dim=1, keepdim=True)) / n
    return ((feats - mean) * torch.rsqrt(var + NORM_EPS)).masked_fill(~real, 0.0)


def log_mel(waveform: Tensor, cfg: MelSettings) -> Tensor:
    """One waveform [T] -> its normalised log-mel features [F, n_mels] (what the encoder sees)."""
    with torch.no_grad():
        feats, _ = LogMel(cfg)(waveform[None].float(), torch.tensor([waveform.numel()]))
    return feats[0]


def spec_augment(feats: Tensor, frames: Tensor, cfg: MelSettings) -> Tensor:
    """SpecAugment frequency and time masks on [B, F, n_mels]; time masks lie inside each utterance's
    real frames. Uses torch's global RNG (seeded by training)."""
    b, n_frames, n_mels = feats.shape
    device = feats.device
    keep = torch.ones(b, n_frames, n_mels, dtype=torch.bool, device=device)
    if cfg.freq_masks and cfg.freq_mask_width:
        width = (torch.rand(b, cfg.freq_masks, device=device) * (cfg.freq_mask_width + 1)).long()
        start = (torch.rand(b, cfg.freq_masks, device=device) * (n_mels - width + 1)).long()
        bins = torch.arange(n_mels, device=device)[None, None, :]
        masked = ((bins >= start[..., None]) & (bins < (start + width)[..., None])).any(dim=1)  # [B, n_mels]
        keep &= ~masked[:, None, :]
    if cfg.time_masks and cfg.time_mask_width:
        max_width = torch.minimum(torch.full_like(frames, cfg.time_mask_width),
                                  (frames.to(torch.float64) * cfg.time_mask_max_frac).floor().long())
        width = (torch.rand(b, cfg.time_masks, device=device) * (max_width[:, None] + 1)).long()
        start = (torch.rand(b, cfg.time_masks, device=device) * (frames[:, None] - width + 1)).long()
        steps = torch.arange(n_frames, device=device)[None, None, :]
        masked = ((steps >= start[..., None]) & (steps < (start + width)[..., None])).any(dim=1)  # [B, F]
        keep &= ~masked[:, :, None]
    return feats * keep.to(feats.dtype)

