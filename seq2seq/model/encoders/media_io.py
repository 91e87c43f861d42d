"""Reading and probing media files: the one place that opens an image or an audio file.

    read_image(path, channels, max_pixels) -> Pillow image, upright, 8-bit RGB or grey, not resized
    probe_image(path)                      -> SourceInfo(size, pixels) from the header, or None
    read_audio(path)                       -> (mono float32 waveform [T], sample rate)
    probe_audio(path)                      -> SourceInfo(seconds) from the header, or None
    resample(wave, rate, target)           -> the waveform at `target` Hz (soxr, high quality)
    WaveformProcessor                      -> what every audio processor shares: probe, read, split, crop

Every failure is a `SourceError` naming the path: missing, not a regular file, empty, not an image
or audio file, truncated or corrupt, NaN or inf samples, over `max_pixels`. Modalities (`image`,
`audio`, `hf`) build their `SourceProcessor`s on these, so a file is read the same way whichever
encoder reads it.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Union, cast

import numpy as np

import torch
from torch import Tensor

from seq2seq.model.encoders.audio_windows import Window, split_windows
from seq2seq.model.encoders.sources import AUDIO, SourceError, SourceInfo, SourceProcessor

if TYPE_CHECKING:
    import PIL.Image

AudioBatch = Union[tuple[Tensor, Tensor], dict[str, Tensor]]
"""Waveforms collated: (waveforms [B, T], lengths [B]), or with VTLP (training) a dict of them and "warp" [B]."""

# --------------------------------------------------------------------------------------------
# Images
# --------------------------------------------------------------------------------------------


def probe_image(path: str | Path) -> SourceInfo | None:
    """An image's size from its header, nothing decoded. An image over Pillow's own limit (twice
    `PIL.Image.MAX_IMAGE_PIXELS`), which it refuses to open, gives that bound + 1 as `pixels` and no
    size; a file that is not an image gives None."""
    from PIL import Image

    try:
        with warnings.catch_warnings():  # Pillow's own warning, above Image.MAX_IMAGE_PIXELS
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(path) as im:  # the header only
                width, height = im.size
    except Image.DecompressionBombError:
        assert Image.MAX_IMAGE_PIXELS is not None  # Pillow has no limit to exceed when it is None
        return SourceInfo(pixels=2 * Image.MAX_IMAGE_PIXELS + 1)
    except Exception:  # noqa: BLE001 - not an image: for the reader to say
        return None
    return SourceInfo(size=(width, height), pixels=width * height)


def read_image(path: str | Path, channels: int, max_pixels: int | None) -> PIL.Image.Image:
    """One image file as a Pillow image, upright (EXIF), transparency flattened on white, 8-bit RGB
    (channels 3) or grey (1), not resized. SourceError naming the path when the file is missing,
    empty, not an image, truncated/corrupt, or over `max_pixels` (model.encoder.max_pixels, checked
    from the header before the pixels are decoded; None: no limit)."""
    from PIL import Image, ImageOps

    p = Path(path)
    if not p.exists():
        raise SourceError(f"image not found: {path}")
    if not p.is_file():
        raise SourceError(f"not a file: {path}")
    try:
        if p.stat().st_size == 0:
            raise SourceError(f"empty image file: {path}")
        with warnings.catch_warnings():  # Pillow warns above its own limit: max_pixels decides here
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im = Image.open(p)  # reads the header only
        with im:
            if max_pixels is not None and im.width * im.height > max_pixels:
                raise SourceError(f"image {path} has {im.width}x{im.height} pixels "
                                  f"({im.width * im.height / 1e6:.1f} megapixels), more than "
                                  f"model.encoder.max_pixels={max_pixels} ({max_pixels / 1e6:g} megapixels)")
            im.load()  # decode everything now: a truncated or corrupt file fails here, not later
            return to_8bit(ImageOps.exif_transpose(im), channels)  # (a copy: outlives the closed file)
    except SourceError:
        raise
    except Image.UnidentifiedImageError:
        raise SourceError(f"not an image (or a format Pillow cannot read): {path}") from None
    except Image.DecompressionBombError as e:  # over twice PIL.Image.MAX_IMAGE_PIXELS: refused on open
        raise SourceError(f"image {path} is too large: {e}") from None
    except Exception as e:  # Pillow raises OSError, SyntaxError, ValueError, zlib.error, ... on bad data
        raise SourceError(f"cannot read image {path}: {type(e).__name__}: {e}") from None


def to_8bit(image: PIL.Image.Image, channels: int) -> PIL.Image.Image:
    """Any Pillow image -> mode "RGB" (channels 3) or "L" (channels 1); transparency flattened on white."""
    from PIL import Image

    if image.mode.startswith(("I", "F")):  # deep grey: scaled to 8 bits, not clipped
        # 16-bit modes span 0..65535; a 32-bit int or float image is read as 16-bit when its values
        # exceed 255, as 8-bit when they do not, and as 0..1 when a float image stays within it.
        mode = image.mode
        image = image.convert("F")
        hi = cast(float, image.getextrema()[1])  # one band ("F"): (min, max) as floats
        top = 65535.0 if mode.startswith("I;16") or hi > 255 else 1.0 if mode == "F" and hi <= 1.0 else 255.0
        image = image.point(lambda v: v * 255.0 / top + 0.5).convert("L")  # rounded (convert truncates)
    has_alpha = image.mode in ("RGBA", "LA", "PA", "La", "RGBa") or (
        image.mode == "P" and "transparency" in image.info)
    if has_alpha:
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        image = Image.alpha_composite(background, rgba)
    return image.convert("RGB" if channels == 3 else "L")


# --------------------------------------------------------------------------------------------
# Audio
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


def probe_audio(path: str | Path) -> SourceInfo | None:
    """An audio file's duration from its header, nothing decoded; None for a file that is not audio."""
    import soundfile

    try:
        info = soundfile.info(str(path))
    except Exception:  # noqa: BLE001 - not audio: for the reader to say
        return None
    return SourceInfo(seconds=info.frames / info.samplerate if info.samplerate > 0 else 0.0)


def read_audio(path: str | Path) -> tuple[np.ndarray, int]:
    """(mono float32 waveform [T], its sample rate): any format libsndfile knows, channels averaged.
    SourceError naming the path for a missing, non-audio, truncated or empty file, or one holding NaN
    or inf samples."""
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
    return wave, rate


def resample(wave: np.ndarray, rate: int, target: int) -> np.ndarray:
    """Mono float32 [T] at `rate` -> [T'] at `target` Hz (soxr, high quality)."""
    if rate == target:
        return wave
    import soxr

    return soxr.resample(wave, rate, target, quality="HQ").astype(np.float32, copy=False)


class WaveformProcessor(SourceProcessor[Tensor, AudioBatch]):
    """What every audio processor shares (our audio encoder's, a Hugging Face backbone's): its examples
    are mono float32 waveforms [T] at `sample_rate`, probed from the header, read and resampled here,
    split into windows at their pauses and cropped to one. A subclass sets `sample_rate` and
    `max_seconds`, says how a too-long file is refused (`too_long`) and batches the examples."""

    kind = AUDIO

    def probe(self, path: str) -> SourceInfo | None:
        return probe_audio(path)

    def too_long(self, path: str, seconds: float) -> str:
        """The message refusing a file of `seconds`, longer than `max_seconds`."""
        return f"audio file {path} lasts {seconds:.1f} s, more than {self.max_seconds:g} s"

    def read_waveform(self, path: str) -> Tensor:
        """The file's samples at `sample_rate`; SourceError naming it as `read_audio` does, or when it
        lasts more than `max_seconds` (checked before resampling) or nothing is left after resampling."""
        wave, rate = read_audio(path)
        if self.max_seconds is not None and wave.shape[0] / rate > self.max_seconds:
            raise SourceError(self.too_long(path, wave.shape[0] / rate))
        wave = resample(wave, rate, self.sample_rate)
        if wave.shape[0] == 0:
            raise SourceError(f"audio file {path} is empty after resampling to {self.sample_rate} Hz")
        return torch.from_numpy(np.ascontiguousarray(wave, dtype=np.float32))

    def load(self, path: str) -> Tensor:
        return self.read_waveform(path)

    def split(self, example: Tensor, max_seconds: float) -> list[Window]:
        return split_windows(example.numpy(), self.sample_rate, max_seconds)

    def crop(self, example: Tensor, window: Window) -> Tensor:
        return example[window.start:window.end]
