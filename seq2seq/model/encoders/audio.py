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
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from seq2seq.config import ConfigError
from seq2seq.config.sections import EncoderConfig, ModelConfig, register_encoder_config
from seq2seq.model.layers import Dropout, EncoderLayer, sinusoidal_table
from seq2seq.model.encoders.augment import AudioAugmentConfig, augment_waveform, vtlp_warp
from seq2seq.model.encoders.base import Encoder, Modality, SourceError, SourceProcessor, register

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)

LOG_EPS = 1e-6  # log(mel power + LOG_EPS)
NORM_EPS = 1e-5  # variance floor of the per-utterance normalisation


# --------------------------------------------------------------------------------------------
# Mel filterbank
# --------------------------------------------------------------------------------------------


def _hz_to_mel(f: float | np.ndarray) -> Any:
    return 2595.0 * np.log10(1.0 + np.asarray(f, dtype=np.float64) / 700.0)


def _mel_to_hz(m: float | np.ndarray) -> Any:
    return 700.0 * (10.0 ** (np.asarray(m, dtype=np.float64) / 2595.0) - 1.0)


def mel_filterbank(cfg: AudioEncoderConfig, warp: np.ndarray | None = None) -> np.ndarray:
    """HTK-scale triangular filters [n_fft // 2 + 1, n_mels] (float64), peak 1, no area normalisation.

    warp: VTLP factors [B] -> [B, n_fft // 2 + 1, n_mels], each evaluated at the FFT bins' warped
    frequencies (`augment.vtlp_warp`): the energy at f counts in the filters at alpha f."""
    freqs = np.linspace(0.0, cfg.sample_rate / 2, cfg.n_fft // 2 + 1)
    if warp is not None:
        freqs = vtlp_warp(freqs[None, :], np.asarray(warp, dtype=np.float64)[:, None], cfg.sample_rate / 2)
    mel_points = np.linspace(_hz_to_mel(cfg.f_min), _hz_to_mel(cfg.fmax), cfg.n_mels + 2)
    hz = _mel_to_hz(mel_points)
    lower, center, upper = hz[:-2], hz[1:-1], hz[2:]
    up = (freqs[..., None] - lower) / (center - lower)
    down = (upper - freqs[..., None]) / (upper - center)
    return np.maximum(0.0, np.minimum(up, down))


def _empty_mel_filters(cfg: AudioEncoderConfig) -> list[int]:
    fb = mel_filterbank(cfg)
    return [int(i) for i in np.flatnonzero(fb.max(axis=0) <= 0.0)]


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------


@register_encoder_config
@dataclass
class AudioEncoderConfig(EncoderConfig):
    """`model.encoder` for `type: audio`. Sizes in samples (n_fft, win_length, hop_length) at
    `sample_rate`; the Transformer sizes (d_model, heads, encoder_layers, ...) are the model's.

    win_length: None = n_fft. f_max: None = sample_rate / 2.
    normalize: feature normalisation over real frames: global (per utterance, one mean/std over all
        bins; the default), per_bin (per utterance, mean/variance of each bin: this hides which bins
        hold the energy; on the tone task of tests/test_audio.py it got 5/12 right after 500 steps,
        global 12/12), corpus (global CMVN: one mean/std per mel bin over the training set, computed
        before training from up to `corpus_utterances` utterances evenly spread over the training
        table, unaugmented, and saved with the weights; level differences between utterances stay)
        or none.
    corpus_utterances: how many training utterances give the `corpus` statistics (at most).
    subsampling: conv2d (ESPnet-style) | conv1d; conv_channels: C of both convolutions.
    freq_masks / freq_mask_width: SpecAugment frequency masks (count, max width in mel bins).
    time_masks / time_mask_width / time_mask_max_frac: time masks (count, max width in frames, and
        at most this fraction of the utterance's frames). Counts of 0 turn a kind off.
    max_seconds: longer audio files are refused (SourceError) when loaded; None = no limit.
    augment: on-the-fly waveform augmentation of training utterances and VTLP (speed, vtlp, noise,
        gain, reverb; off by default): `seq2seq.model.encoders.augment.AudioAugmentConfig`,
        docs/augmentation.md.
    """

    type: str = "audio"
    sample_rate: int = 16000
    n_fft: int = 512
    win_length: int | None = 400
    hop_length: int = 160
    n_mels: int = 80
    f_min: float = 0.0
    f_max: float | None = None
    normalize: Literal["per_bin", "global", "corpus", "none"] = "global"
    corpus_utterances: int = 2000
    subsampling: Literal["conv2d", "conv1d"] = "conv2d"
    conv_channels: int = 64
    freq_masks: int = 2
    freq_mask_width: int = 15
    time_masks: int = 2
    time_mask_width: int = 20
    time_mask_max_frac: float = 0.1
    max_seconds: float | None = None
    augment: AudioAugmentConfig = field(default_factory=AudioAugmentConfig)

    def __post_init__(self) -> None:
        def fail(key: str, message: str) -> None:
            raise ConfigError(f"model.encoder.{key} {message}")

        for key in ("sample_rate", "n_fft", "hop_length", "n_mels", "conv_channels", "corpus_utterances"):
            if getattr(self, key) <= 0:
                fail(key, f"must be positive, got {getattr(self, key)}")
        if self.win_length is not None and not 0 < self.win_length <= self.n_fft:
            fail("win_length", f"must be in [1, n_fft={self.n_fft}], got {self.win_length}")
        nyquist = self.sample_rate / 2
        if not 0.0 <= self.f_min < nyquist:
            fail("f_min", f"must be in [0, sample_rate/2={nyquist:g}), got {self.f_min}")
        if self.f_max is not None and not self.f_min < self.f_max <= nyquist:
            fail("f_max", f"must be in (f_min={self.f_min:g}, sample_rate/2={nyquist:g}], got {self.f_max}")
        for key in ("freq_masks", "freq_mask_width", "time_masks", "time_mask_width"):
            if getattr(self, key) < 0:
                fail(key, f"must be >= 0, got {getattr(self, key)}")
        if self.freq_mask_width > self.n_mels:
            fail("freq_mask_width", f"must be at most n_mels={self.n_mels}, got {self.freq_mask_width}")
        if not 0.0 <= self.time_mask_max_frac <= 1.0:
            fail("time_mask_max_frac", f"must be in [0, 1], got {self.time_mask_max_frac}")
        if self.max_seconds is not None and self.max_seconds <= 0:
            fail("max_seconds", f"must be positive, got {self.max_seconds}")
        empty = _empty_mel_filters(self)
        if empty:
            fail("n_mels", f"({self.n_mels}) is too large for n_fft={self.n_fft} between f_min={self.f_min:g} and "
                 f"f_max={self.fmax:g} Hz: mel filters {empty[:5]} contain no FFT bin; lower n_mels or raise n_fft")

    @property
    def window(self) -> int:
        return self.n_fft if self.win_length is None else self.win_length

    @property
    def fmax(self) -> float:
        return self.sample_rate / 2 if self.f_max is None else self.f_max


# --------------------------------------------------------------------------------------------
# Lengths
# --------------------------------------------------------------------------------------------


def num_frames(n_samples: int | Tensor, cfg: AudioEncoderConfig) -> int | Tensor:
    """Frames of an utterance of n_samples (>= 1) samples: 1 + (max(n, n_fft) - n_fft) // hop."""
    if isinstance(n_samples, Tensor):
        return (n_samples.clamp(min=cfg.n_fft) - cfg.n_fft) // cfg.hop_length + 1
    return (max(int(n_samples), cfg.n_fft) - cfg.n_fft) // cfg.hop_length + 1


def conv_length(n: int | Tensor) -> int | Tensor:
    """Output length of a kernel 3, stride 2, padding 1 convolution: floor((n + 2 - 3) / 2) + 1."""
    return (n - 1) // 2 + 1


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

    def __init__(self, cfg: AudioEncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.register_buffer("window", torch.hann_window(cfg.window, periodic=True), persistent=False)
        self.register_buffer("mel", torch.from_numpy(mel_filterbank(cfg)).float(), persistent=False)
        if cfg.normalize == "corpus":
            self.register_buffer("corpus_mean", torch.zeros(cfg.n_mels))
            self.register_buffer("corpus_std", torch.ones(cfg.n_mels))

    def _apply(self, fn, *args, **kwargs):  # type: ignore[no-untyped-def]
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


def log_mel(waveform: Tensor, cfg: AudioEncoderConfig) -> Tensor:
    """One waveform [T] -> its normalised log-mel features [F, n_mels] (what the encoder sees)."""
    with torch.no_grad():
        feats, _ = LogMel(cfg)(waveform[None].float(), torch.tensor([waveform.numel()]))
    return feats[0]


def spec_augment(feats: Tensor, frames: Tensor, cfg: AudioEncoderConfig) -> Tensor:
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


def unpack_src(src: Any) -> tuple[Tensor, Tensor]:
    """(waveforms, lengths) tuple/list, {"waveforms", "lengths"} dict, or a bare [B, T] tensor."""
    if isinstance(src, Tensor):
        if src.dim() == 1:
            src = src[None]
        return src, torch.full((src.size(0),), src.size(1), dtype=torch.long, device=src.device)
    if isinstance(src, dict):
        return src["waveforms"], src["lengths"]
    waveforms, lengths = src
    return waveforms, lengths


class AudioEncoder(Encoder):
    """(waveforms [B, T], lengths [B]) -> (memory [B, S, D], pad mask [B, S]), S = subsampled frames."""

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

    def fit_statistics(self, examples: Sequence[Any]) -> None:
        """normalize: corpus: the per-bin statistics from up to cfg.corpus_utterances of `examples`
        (training waveforms [T], evenly spaced through the list); nothing for the other settings."""
        if self.cfg.normalize != "corpus" or not examples:
            return
        n = min(len(examples), self.cfg.corpus_utterances)
        picked = [examples[i] for i in np.linspace(0, len(examples) - 1, n).round().astype(int)]
        frames = self.features.fit_corpus_statistics(picked)
        log.info("normalize: corpus: log-mel mean and std per bin from %d training utterances (%d frames)", n, frames)

    def forward(self, src: Any) -> tuple[Tensor, Tensor]:
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
        mask = pad_mask if bool(pad_mask.any()) else None
        for layer in self.layers:
            x = layer(x, mask)
        x = self.final_norm(x)
        if mask is not None:
            x = x.masked_fill(pad_mask[:, :, None], 0.0)
        return x, pad_mask


# --------------------------------------------------------------------------------------------
# Reading audio files
# --------------------------------------------------------------------------------------------


_CHUNK_SIZES = re.compile(r"^\s*(?:data|SSND)\s*:\s*(\d+)\s*\(should be (\d+)\)", re.MULTILINE)
_UNKNOWN_SIZES = {0xFFFFFFFF, 0x7FFFFFFF}  # written by streaming encoders that could not seek back


def truncation(sndfile_log: str) -> tuple[int, int] | None:
    """(announced, present) bytes of samples when libsndfile's log of an uncompressed file (WAV,
    AIFF: a sample chunk "data : N (should be M)") shows a file cut short; None otherwise.
    libsndfile itself reads such a file silently, up to where it ends."""
    for match in _CHUNK_SIZES.finditer(sndfile_log):
        announced, present = int(match.group(1)), int(match.group(2))
        if present < announced and announced not in _UNKNOWN_SIZES:
            return announced, present
    return None


class AudioProcessor(SourceProcessor):
    """Audio file -> mono float32 waveform [T] at cfg.sample_rate; batches of them -> (waveforms, lengths).
    A file that cannot be used (missing, not audio, truncated, holding NaN or inf samples, longer than
    `max_seconds`) raises SourceError naming it."""

    def __init__(self, cfg: EncoderConfig) -> None:
        if not isinstance(cfg, AudioEncoderConfig):
            raise ConfigError(f"the audio processor needs model.encoder.type: audio, got {cfg.type!r}")
        self.cfg = cfg

    def load(self, path: str) -> Tensor:
        import soundfile

        p = Path(path)
        if not p.exists():
            raise SourceError(f"audio file not found: {path}")
        if not p.is_file():
            raise SourceError(f"not an audio file (not a regular file): {path}")
        # Any failure to decode is the file's; libsndfile's own words ("Format not recognised") are kept.
        try:
            with soundfile.SoundFile(str(p)) as f:
                data, rate, sndfile_log = f.read(dtype="float32", always_2d=True), f.samplerate, f.extra_info
        except Exception as e:  # noqa: BLE001
            reason = str(e).replace(f"Error opening {str(p)!r}: ", "").strip() or type(e).__name__
            raise SourceError(f"cannot read audio file {path}: {reason}") from None
        short = truncation(sndfile_log)
        if short:
            raise SourceError(f"audio file {path} is truncated: its header announces {short[0]} bytes of "
                              f"samples, the file holds {short[1]}")
        if data.shape[0] == 0:
            raise SourceError(f"audio file {path} is empty (0 samples)")
        wave = data.mean(axis=1, dtype=np.float32) if data.shape[1] > 1 else data[:, 0]
        if not np.isfinite(wave).all():
            raise SourceError(f"audio file {path} holds non-finite samples (NaN or inf)")
        if self.cfg.max_seconds is not None and wave.shape[0] / rate > self.cfg.max_seconds:
            raise SourceError(f"audio file {path} lasts {wave.shape[0] / rate:.1f} s, more than "
                              f"model.encoder.max_seconds={self.cfg.max_seconds:g}")
        wave = self.resample(wave, rate)
        if wave.shape[0] == 0:
            raise SourceError(f"audio file {path} is empty after resampling to {self.cfg.sample_rate} Hz")
        return torch.from_numpy(np.ascontiguousarray(wave, dtype=np.float32))

    def resample(self, wave: np.ndarray, rate: int) -> np.ndarray:
        """Mono float32 [T] at `rate` -> [T'] at cfg.sample_rate (soxr, high quality)."""
        if rate == self.cfg.sample_rate:
            return wave
        import soxr

        return soxr.resample(wave, rate, self.cfg.sample_rate, quality="HQ").astype(np.float32, copy=False)

    def length(self, example: Tensor) -> int:
        return int(subsampled_length(num_frames(int(example.numel()), self.cfg)))

    def collate_augmented(self, examples: Sequence[Tensor], rngs: Sequence[np.random.Generator]) -> Any:
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


# --------------------------------------------------------------------------------------------
# Attention plot
# --------------------------------------------------------------------------------------------


def draw_audio_attention(encoder_cfg: EncoderConfig, example: Tensor, attention: Sequence[Sequence[float]],
                         words: list[str]) -> Figure:
    """The utterance's log-mel spectrogram over seconds, and under it each generated word's
    cross-attention over the (4x subsampled) encoder positions on the same time axis."""
    assert isinstance(encoder_cfg, AudioEncoderConfig)
    from matplotlib.figure import Figure

    cfg = encoder_cfg
    feats = log_mel(example, cfg).numpy()  # [F, M]
    frame_s = cfg.hop_length / cfg.sample_rate
    att = np.asarray(attention, dtype=np.float64).reshape(len(words), -1)
    duration = example.numel() / cfg.sample_rate
    s = att.shape[1]
    fig = Figure(figsize=(max(6.0, min(24.0, 2.5 * duration + 3)), 3 + 0.32 * max(len(words), 1)))
    ax_spec, ax_att = fig.subplots(
        2, 1, sharex=True, gridspec_kw={"height_ratios": [3, max(1.5, 0.32 * max(len(words), 1))]})
    ax_spec.imshow(feats.T, origin="lower", aspect="auto", cmap="magma",
                   extent=(0.0, feats.shape[0] * frame_s, 0, cfg.n_mels))
    ax_spec.set_ylabel("mel bin")
    ax_spec.set_title(" ".join(words) if words else "(empty)", fontsize=10)
    ax_att.imshow(att, aspect="auto", cmap="viridis", vmin=0.0, interpolation="nearest",
                  extent=(0.0, s * 4 * frame_s, len(words) - 0.5, -0.5))
    ax_att.set_yticks(range(len(words)), words, fontsize=9)
    ax_att.set_xlabel("time (s)")
    ax_att.set_ylabel("output")
    return fig


register(Modality("audio", build_encoder=lambda cfg, shared: AudioEncoder(cfg), processor=AudioProcessor,
                  draw_attention=draw_audio_attention, noun="audio file"))
