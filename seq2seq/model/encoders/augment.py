"""Training-time augmentation of audio and image examples: the transforms of the `model.encoder.augment`
sections (their config types: `seq2seq.config.encoder_section`). Off by default; docs/augmentation.md lists every key.

Each training example is transformed on the fly, before collation, with its own numpy Generator,
which `seq2seq.data.media.example_rng` seeds from (training.seed, epoch, row index) alone: a
resumed run draws what a fresh run draws, and an example's draw does not depend on the batch it
lands in. Every random parameter has its own slot in one fixed vector of uniform draws, taken first,
so switching a transform on or off leaves the parameters of the others unchanged (the noise samples
themselves come after, from the same generator). Validation, `transcribe`/`caption` and the server
never call these (they collate with `SourceProcessor.collate`).

Audio (waveform [T] float32 at the model's sample rate), in this order:
  speed      resampling with soxr (already a dependency): factor s plays s times faster,
             length T / s, every frequency x s (Ko et al. 2015, "Audio augmentation for speech
             recognition": 0.9 / 1.0 / 1.1);
  reverb     convolution (FFT) with a synthetic room impulse response: a unit direct path, then
             Gaussian noise decaying by 60 dB over RT60 seconds, scaled to a direct-to-reverberant
             ratio; the output keeps the input's length and RMS;
  noise      white, pink (1/f) or brown (1/f^2) Gaussian noise at an SNR over the whole utterance;
  gain       a level change in dB;
  vtlp       vocal tract length perturbation (Jaitly & Hinton 2013): only the warp factor alpha is
             drawn here; `LogMel` evaluates its mel filters at warped frequencies (`vtlp_warp`).
Image (uint8 [C, H, W], already resized by `ImageProcessor.load`): a random resized crop and a small
rotation as one affine resampling (Pillow, bilinear; corners filled with the image's mean colour),
then brightness and contrast jitter. No flips and no hue jitter: captions name sides and colours.

Why hand-written and not audiomentations (0.43) or torch-audiomentations: audiomentations requires
librosa (so numba, llvmlite, scikit-learn, scipy) and pins soxr below 1.0, which would downgrade the
soxr we resample with; it has no VTLP (a filterbank-level transform) and its impulse-response
transform reads recorded IR files. torch-audiomentations requires torchaudio, which has no build for
our torch. What we need is a few lines each on numpy, soxr and Pillow, measured in
docs/augmentation.md; torchvision does not load with our torch either.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import torch
from torch import Tensor

from seq2seq.config.encoder_section import AudioAugmentConfig, ImageAugmentConfig

T = TypeVar("T")
VTLP_BOUNDARY = 0.6  # F_hi of the VTLP warp as a fraction of Nyquist (4.8 kHz at 16 kHz, as in the paper)
NOISE_EXPONENTS = {"white": 0.0, "pink": 1.0, "brown": 2.0}  # power spectral density ~ 1 / f^exponent




# --------------------------------------------------------------------------------------------
# Audio transforms (numpy float waveforms [T])
# --------------------------------------------------------------------------------------------


def speed_perturb(wave: np.ndarray, factor: float, rate: int) -> np.ndarray:
    """[T] -> [~T / factor]: the waveform played `factor` times faster (pitch and tempo together)."""
    if factor == 1.0:
        return wave
    import soxr

    out = soxr.resample(wave, rate * factor, rate, quality="HQ")
    return out if out.size else wave


def fft_length(n: int) -> int:
    """The smallest 2^a 3^b 5^c >= n: numpy's FFT is fast there (a length with a large prime factor
    can take 10x as long)."""
    best = 1 << max(n - 1, 0).bit_length()
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            m = p35
            while m < n:
                m *= 2
            best = min(best, m)
            p35 *= 3
        p5 *= 5
    return best


def colored_noise(n: int, color: str, rng: np.random.Generator) -> np.ndarray:
    """[n] float32 Gaussian noise with power spectral density ~ 1 / f^k (white 0, pink 1, brown 2), unit power."""
    exponent = NOISE_EXPONENTS[color]
    if exponent and n > 1:  # shaped in the frequency domain over a fast FFT length, then cut to n
        size = fft_length(n)
        spectrum = np.fft.rfft(rng.standard_normal(size, dtype=np.float32))
        f = np.arange(spectrum.size, dtype=np.float32)
        f[0] = np.inf  # no DC
        noise = np.fft.irfft(spectrum * f ** np.float32(-exponent / 2), size)[:n].astype(np.float32, copy=False)
    else:
        noise = rng.standard_normal(n, dtype=np.float32)
    power = float(np.mean(np.square(noise, dtype=np.float64)))
    return noise * np.float32(1 / math.sqrt(power)) if power > 0 else noise


def add_noise(wave: np.ndarray, snr_db: float, color: str, rng: np.random.Generator) -> np.ndarray:
    """[T] + noise whose power is the waveform's mean power / 10^(snr_db / 10). Silence stays silent."""
    power = float(np.mean(np.square(wave, dtype=np.float64)))
    if power == 0.0:
        return wave
    noise = colored_noise(wave.size, color, rng) * np.float32(math.sqrt(power / 10 ** (snr_db / 10)))
    return wave + noise


def apply_gain(wave: np.ndarray, gain_db: float) -> np.ndarray:
    """[T] scaled by 10^(gain_db / 20)."""
    return wave * np.float32(10 ** (gain_db / 20))


def synthetic_rir(rt60: float, drr_db: float, rate: int, rng: np.random.Generator) -> np.ndarray:
    """A room impulse response [round(rt60 * rate)] float32: 1 (the direct path), then Gaussian noise
    whose amplitude falls by 60 dB over rt60 seconds, its energy 10^(-drr_db / 10) of the direct path's."""
    n = max(2, round(rt60 * rate))
    t = np.arange(1, n, dtype=np.float32) / np.float32(rate)
    tail = rng.standard_normal(n - 1, dtype=np.float32) * np.float32(10.0) ** (np.float32(-3.0 / rt60) * t)
    tail *= np.float32(math.sqrt(10 ** (-drr_db / 10) / float(np.sum(np.square(tail, dtype=np.float64)))))
    return np.concatenate([np.ones(1, dtype=np.float32), tail])


def reverberate(wave: np.ndarray, rir: np.ndarray) -> np.ndarray:
    """[T] convolved with `rir` (FFT), cut to T samples and scaled back to the input's RMS."""
    size = fft_length(wave.size + rir.size - 1)
    out = np.fft.irfft(np.fft.rfft(wave, size) * np.fft.rfft(rir, size), size)[: wave.size]
    rms_in, rms_out = (math.sqrt(float(np.mean(np.square(x, dtype=np.float64)))) for x in (wave, out))
    return (out * np.float32(rms_in / rms_out if rms_out > 0 else 1.0)).astype(np.float32, copy=False)


def _lerp(bounds: Sequence[float] | np.ndarray, u: float) -> float:
    """The point at fraction u in [0, 1) of [low, high]: uniform in the range for a uniform u."""
    return float(bounds[0] + (bounds[1] - bounds[0]) * u)


def _pick(choices: Sequence[T], u: float) -> T:
    """One of `choices`, uniformly for a uniform u in [0, 1)."""
    return choices[min(int(u * len(choices)), len(choices) - 1)]


def augment_waveform(wave: Tensor, cfg: AudioAugmentConfig, rate: int,
                     rng: np.random.Generator) -> tuple[Tensor, float]:
    """One training waveform [T] float32 -> (augmented waveform [T'] float32, VTLP warp factor alpha)."""
    u = rng.random(10)  # one slot per parameter, whichever transforms are on
    original = x = wave.numpy()
    x = speed_perturb(x, _pick(cfg.speed, u[0]), rate)
    if u[1] < cfg.reverb_prob:
        x = reverberate(x, synthetic_rir(_lerp(cfg.reverb_rt60, u[2]), _lerp(cfg.reverb_drr, u[3]), rate, rng))
    if u[4] < cfg.noise_prob:
        x = add_noise(x, _lerp(cfg.noise_snr, u[5]), _pick(cfg.noise_colors, u[6]), rng)
    if u[7] < cfg.gain_prob:
        x = apply_gain(x, _lerp(cfg.gain_db, u[8]))
    alpha = _lerp(cfg.vtlp, u[9]) if cfg.warps else 1.0
    out = wave if x is original else torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    return out, alpha


def vtlp_warp(freqs: np.ndarray, alpha: np.ndarray | float, nyquist: float) -> np.ndarray:
    """Jaitly & Hinton's (2013) piecewise-linear frequency warp, f -> f' (Hz), broadcasting `freqs`
    against `alpha`: f' = alpha f up to F_hi min(alpha, 1) / alpha (F_hi = VTLP_BOUNDARY x Nyquist),
    then a straight line to (Nyquist, Nyquist). alpha = 1 is the identity."""
    alpha = np.asarray(alpha, dtype=np.float64)
    f_hi = VTLP_BOUNDARY * nyquist * np.minimum(alpha, 1.0)
    boundary = f_hi / alpha
    upper = nyquist - (nyquist - f_hi) / (nyquist - boundary) * (nyquist - freqs)
    return np.where(freqs <= boundary, freqs * alpha, upper)


# --------------------------------------------------------------------------------------------
# Image transforms (uint8 [C, H, W])
# --------------------------------------------------------------------------------------------


def augment_image(image: Tensor, cfg: ImageAugmentConfig, rng: np.random.Generator) -> Tensor:
    """One training image uint8 [C, H, W] -> the augmented image, same shape and dtype."""
    from PIL import Image

    u = rng.random(7)  # one slot per parameter, whichever transforms are on
    c, h, w = image.shape
    original = pixels = image.permute(1, 2, 0).numpy()  # [H, W, C]
    if cfg.moves:
        scale = _lerp(cfg.crop_scale, u[0])
        ratio = math.exp(_lerp(np.log(cfg.crop_ratio), u[1]))
        cw, ch = w * math.sqrt(scale * ratio), h * math.sqrt(scale / ratio)
        fit = min if scale <= 1 else max  # a crop stays inside the image; a zoom-out window holds all of it
        cw, ch = fit(w, cw), fit(h, ch)
        cx, cy = _lerp((cw / 2, w - cw / 2), u[2]), _lerp((ch / 2, h - ch / 2), u[3])
        theta = math.radians(_lerp((-cfg.rotate, cfg.rotate), u[4]))
        # output point (u, v) -> input point: scale to the crop, rotate, about the centres
        m = np.diag([cw / w, ch / h]) @ np.array([[math.cos(theta), -math.sin(theta)],
                                                  [math.sin(theta), math.cos(theta)]])
        offset = np.array([cx, cy]) - m @ np.array([w / 2, h / 2])
        mean = pixels.reshape(-1, c).mean(axis=0).round().astype(int)
        fill = int(mean[0]) if c == 1 else tuple(int(v) for v in mean)
        im = Image.fromarray(pixels[:, :, 0] if c == 1 else pixels)
        im = im.transform((w, h), Image.Transform.AFFINE, (*m[0], offset[0], *m[1], offset[1]),
                          resample=Image.Resampling.BILINEAR, fillcolor=fill)
        pixels = np.array(im).reshape(h, w, c)  # a writable copy
    if cfg.brightness > 0 or cfg.contrast > 0:
        brightness = _lerp((1 - cfg.brightness, 1 + cfg.brightness), u[5])
        contrast = _lerp((1 - cfg.contrast, 1 + cfg.contrast), u[6])
        x = pixels.astype(np.float32) * brightness
        x = (x - x.mean()) * contrast + x.mean()
        pixels = np.clip(np.rint(x), 0, 255).astype(np.uint8)
    if pixels is original:
        return image
    return torch.from_numpy(np.ascontiguousarray(pixels)).permute(2, 0, 1).contiguous()
