"""The `model.encoder` section: its base (`EncoderConfig`, `type: text`), the config type of each
built-in encoder (`ImageEncoderConfig`, `AudioEncoderConfig`, `HFEncoderConfig`, with their
`augment` sections) and the registry of config types by `type`.

`model.encoder` is polymorphic: `EncoderConfig.config_class` picks the class registered for its
`type`. Each config class registers itself (`@register_encoder_config`); this module holds the
built-in ones, and an installed package adds its own through the `seq2seq.model.encoders`
entry-point group (`load_encoder_plugins`: importing the package's module registers its config and
its builders). These are pure data with their checks: what builds an encoder, its source processor
and its source kind from a config type is the model layer's (`seq2seq.model.encoders.base.Modality`,
registered by each module of seq2seq/model/encoders/).
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from seq2seq.config.checks import require


@dataclass(frozen=True)
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
_PLUGINS_LOADED = False

# The entry-point group through which installed packages add encoder types (see docs/architecture.md,
# "Adding an encoder"): each entry names a module whose import registers a config type and its modality.
ENCODER_ENTRY_POINTS = "seq2seq.model.encoders"
KEY = "model.encoder"


def register_encoder_config(cls: type[EncoderConfig]) -> type[EncoderConfig]:
    """Class decorator: make `cls` (a frozen dataclass, as its base, whose `type` field defaults to its
    name) the config of `model.encoder.type: <name>`."""
    _ENCODER_CONFIGS[cls().type] = cls
    return cls


def load_encoder_plugins() -> None:
    """Import, once, the modules installed packages name in the `seq2seq.model.encoders` entry-point
    group, except those of types registered already: importing one registers its config type (and,
    on the model side, its modality)."""
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    from importlib.metadata import entry_points

    for entry in entry_points(group=ENCODER_ENTRY_POINTS):
        if entry.name not in _ENCODER_CONFIGS:
            entry.load()


def encoder_types() -> list[str]:
    """Every registered encoder type, built-in and installed."""
    load_encoder_plugins()
    return sorted(_ENCODER_CONFIGS)


def encoder_config_class(kind: object, key: str = "model.encoder.type") -> type[EncoderConfig]:
    """The config dataclass registered for encoder type `kind`; ConfigError naming the choices."""
    if kind not in _ENCODER_CONFIGS:
        load_encoder_plugins()
    require(isinstance(kind, str) and kind in _ENCODER_CONFIGS,
            f"config key '{key}': unknown encoder type {kind!r}; choose one of {sorted(_ENCODER_CONFIGS)}")
    return _ENCODER_CONFIGS[str(kind)]  # (a str: required above)


# --------------------------------------------------------------------------------------------
# Augmentation of training examples (`model.encoder.augment`; the transforms: seq2seq.model.encoders.augment)
# --------------------------------------------------------------------------------------------


def _check_range(key: str, values: Sequence[float], low: float, high: float) -> None:
    """[a, b] with low <= a <= b <= high, else ConfigError naming model.encoder.augment.<key>."""
    require(len(values) == 2 and low <= values[0] <= values[1] <= high,
            f"model.encoder.augment.{key} must be [low, high] with {low:g} <= low <= high <= {high:g}, "
            f"got {list(values)}")


def _check_probability(key: str, value: float) -> None:
    require(0.0 <= value <= 1.0, f"model.encoder.augment.{key} must be a probability in [0, 1], got {value}")


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AudioAugmentConfig:
    """`model.encoder.augment` for `type: audio`: each training waveform, on the fly (see the module
    docstring of seq2seq.model.encoders.augment). The defaults change nothing.

    speed: speed factors, one drawn uniformly per example (1.0: unchanged; e.g. [0.9, 1.0, 1.1]).
    vtlp: [low, high] of the VTLP warp factor alpha, drawn uniformly ([1.0, 1.0]: off; the paper:
        [0.9, 1.1]). alpha > 1 moves energy to higher mel bins (a shorter vocal tract).
    noise_prob: probability of adding noise; noise_snr: [low, high] SNR in dB, uniform;
        noise_colors: the colours to draw from, uniformly (white, pink, brown).
    gain_prob: probability of a gain; gain_db: [low, high] in dB, uniform. With per-utterance
        normalisation (normalize: global or per_bin) a gain is taken out again by the features;
        it matters for normalize: corpus or none.
    reverb_prob: probability of reverberation; reverb_rt60: [low, high] in seconds (the time the
        impulse response takes to fall by 60 dB); reverb_drr: [low, high] direct-to-reverberant
        energy ratio in dB.
    """

    speed: list[float] = field(default_factory=lambda: [1.0])
    vtlp: list[float] = field(default_factory=lambda: [1.0, 1.0])
    noise_prob: float = 0.0
    noise_snr: list[float] = field(default_factory=lambda: [10.0, 30.0])
    noise_colors: list[Literal["white", "pink", "brown"]] = field(default_factory=lambda: ["white", "pink"])
    gain_prob: float = 0.0
    gain_db: list[float] = field(default_factory=lambda: [-6.0, 6.0])
    reverb_prob: float = 0.0
    reverb_rt60: list[float] = field(default_factory=lambda: [0.2, 0.7])
    reverb_drr: list[float] = field(default_factory=lambda: [0.0, 10.0])

    def __post_init__(self) -> None:
        require(bool(self.speed) and all(0.5 <= s <= 2.0 for s in self.speed),
                f"model.encoder.augment.speed must list factors in [0.5, 2], got {self.speed}")
        _check_range("vtlp", self.vtlp, 0.5, 2.0)
        _check_range("noise_snr", self.noise_snr, -30.0, 100.0)
        _check_range("gain_db", self.gain_db, -60.0, 60.0)
        _check_range("reverb_rt60", self.reverb_rt60, 0.01, 5.0)
        _check_range("reverb_drr", self.reverb_drr, -30.0, 60.0)
        for key in ("noise_prob", "gain_prob", "reverb_prob"):
            _check_probability(key, getattr(self, key))
        require(bool(self.noise_colors),
                "model.encoder.augment.noise_colors must name at least one of white, pink, brown")

    @property
    def warps(self) -> bool:
        """Does VTLP draw a warp factor other than 1?"""
        return self.vtlp != [1.0, 1.0]

    @property
    def active(self) -> bool:
        """Does any transform change anything?"""
        return (any(s != 1.0 for s in self.speed) or self.warps
                or any(p > 0 for p in (self.noise_prob, self.gain_prob, self.reverb_prob)))


@dataclass(frozen=True)
class ImageAugmentConfig:
    """`model.encoder.augment` for `type: image`: each training image, on the fly (see the module
    docstring of seq2seq.model.encoders.augment). The defaults change nothing.

    crop_scale: [low, high] area of the random crop as a fraction of the image, uniform; the crop is
        resized back to the full size ([1.0, 1.0]: no crop; e.g. [0.8, 1.0]). Above 1 the window is
        larger than the image, which stays whole inside it (a zoom out, the border filled with the
        image's mean colour): for images whose content may reach the edges, such as a line of
        handwriting, [1.0, 1.3] moves and shrinks the content without ever cutting any of it off.
    crop_ratio: [low, high] aspect ratio of the crop relative to the image's, log-uniform
        (e.g. [0.75, 1.333]); a crop (area below 1) is shrunk to fit inside the image, a zoom-out
        window (area above 1) is grown to hold all of it.
    rotate: the rotation in degrees is drawn uniformly from [-rotate, rotate] (0: none).
    brightness: pixel values are multiplied by a factor uniform in [1 - brightness, 1 + brightness].
    contrast: the distance of each pixel value from the image's mean is multiplied by a factor
        uniform in [1 - contrast, 1 + contrast].
    """

    crop_scale: list[float] = field(default_factory=lambda: [1.0, 1.0])
    crop_ratio: list[float] = field(default_factory=lambda: [1.0, 1.0])
    rotate: float = 0.0
    brightness: float = 0.0
    contrast: float = 0.0

    def __post_init__(self) -> None:
        _check_range("crop_scale", self.crop_scale, 0.01, 4.0)
        _check_range("crop_ratio", self.crop_ratio, 0.1, 10.0)
        require(0.0 <= self.rotate <= 180.0,
                f"model.encoder.augment.rotate must be in [0, 180] degrees, got {self.rotate}")
        for key in ("brightness", "contrast"):
            require(0.0 <= getattr(self, key) <= 1.0,
                    f"model.encoder.augment.{key} must be in [0, 1], got {getattr(self, key)}")

    @property
    def moves(self) -> bool:
        """Is there a crop or a rotation?"""
        return self.crop_scale != [1.0, 1.0] or self.crop_ratio != [1.0, 1.0] or self.rotate > 0

    @property
    def active(self) -> bool:
        return self.moves or self.brightness > 0 or self.contrast > 0

# --------------------------------------------------------------------------------------------
# type: image (the encoder: seq2seq.model.encoders.image)
# --------------------------------------------------------------------------------------------


@register_encoder_config
@dataclass(frozen=True)
class ImageEncoderConfig(EncoderConfig):
    """`model.encoder` for `type: image`.

    image_size: images are resized to image_size x image_size, unless height and width are set
        (both; then height x width).
    patch_size: side of the square patches; height and width must be multiples of it. The encoder
        sees (height / patch_size) * (width / patch_size) positions.
    patch_height: patches patch_height high and patch_size wide instead (None, the default: square).
        A line of text or digits as high as the image (patch_height = height) becomes one row of
        positions read left to right: 192x32 pixels with patch 8 give 24 positions, not 4x24.
    channels: 3 (RGB) or 1 (grey); inputs of any mode are converted.
    conv_stem: a small convolutional stem before the patch embedding (as in Xiao et al. 2021, "Early
        convolutions help transformers see better"): two 3x3 stride-2 convolutions (stem_channels / 2,
        then stem_channels wide, each followed by GELU), then the patch embedding as a
        (patch_size / 4)-sized convolution over that 4x smaller feature map, so the grid is the same.
        Needs patch_size divisible by 4.
    resnet_widths: a ResNet-style CNN before the patch embedding instead (He et al. 2016, the basic
        block, with BatchNorm), for fine-grained images such as handwriting: a 3x3 convolution to
        resnet_widths[0] channels at full resolution, then one stage per width, each of
        resnet_blocks residual blocks, the first of which halves height and width. The patch
        embedding is then a (patch_size / 2^stages)-sized convolution over the last stage's map, so
        the grid is the same; patch_size (and patch_height) must be divisible by 2^stages. [] (the
        default): no CNN.
        E.g. [32, 64, 128]: 8x smaller maps, patch_size 8 -> one position per 8x8 input pixels.
    resnet_stem_stride: 1 (the default: the stem convolution keeps full resolution) or 2 (as in
        ResNet's own stem: the stem convolution halves height and width and the first stage keeps
        them, so the maps, and the downsampling 2^stages, are the same). On CPU the two convolutions
        at full resolution cost about half of the CNN's training step; stride 2 drops them.
    positions: how patch positions are encoded: "sinusoidal" (fixed 2-D: the first half of d_model
        encodes the row, the second half the column; needs d_model divisible by 4) or "learned"
        (a learned row vector plus a learned column vector).
    mean, std: normalisation of pixel values scaled to [0, 1]: one value per channel, or a single
        value for every channel (the default, 0.5 and 0.5, maps pixels to [-1, 1]).
    augment: on-the-fly augmentation of training images (random resized crop, rotation, brightness,
        contrast; off by default): `ImageAugmentConfig`,
        docs/augmentation.md.
    max_pixels: larger images (width x height, read from the file's header before decoding) are
        refused (SourceError) when loaded, so one huge file cannot take gigabytes of memory; None =
        no limit. The default is 40 megapixels.

    Search counts an image's length as its number of patches, so the default output limit
    (decoding.max_len_a * patches + max_len_b) depends on the grid: with few patches, set
    decoding.max_len_a: 0 and max_len_b above the longest caption, or captions are cut short.
    """

    type: str = "image"
    image_size: int = 64
    height: int | None = None
    width: int | None = None
    patch_size: int = 8
    patch_height: int | None = None
    channels: int = 3
    conv_stem: bool = False
    stem_channels: int = 32
    resnet_widths: list[int] = field(default_factory=list)
    resnet_blocks: int = 1
    resnet_stem_stride: int = 1
    positions: Literal["sinusoidal", "learned"] = "sinusoidal"
    mean: list[float] = field(default_factory=lambda: [0.5])
    std: list[float] = field(default_factory=lambda: [0.5])
    augment: ImageAugmentConfig = field(default_factory=ImageAugmentConfig)
    max_pixels: int | None = 40_000_000

    def __post_init__(self) -> None:
        key = "model.encoder"
        require(self.type == "image", f"{key}.type must be 'image' for an ImageEncoderConfig, got {self.type!r}")
        require((self.height is None) == (self.width is None),
                f"{key}.height and {key}.width must be set together (or neither: {key}.image_size)")
        require(self.channels in (1, 3), f"{key}.channels must be 3 (RGB) or 1 (grey), got {self.channels}")
        patches = {"patch_size": self.patch_size} if self.patch_height is None else \
            {"patch_height": self.patch_height, "patch_size": self.patch_size}
        for name, value in patches.items():
            require(value >= 1, f"{key}.{name} must be positive, got {value}")
        if self.height is None or self.width is None:  # both None (checked above)
            sizes = {"image_size": self.image_size}
        else:
            sizes = {"height": self.height, "width": self.width}
        for name, value in sizes.items():
            require(value >= 1, f"{key}.{name} must be positive, got {value}")
        (h, w), (ph, pw) = self.size, self.patch
        for name, value, patch, patch_name in (("height", h, ph, "patch_height" if self.patch_height else "patch_size"),
                                               ("width", w, pw, "patch_size")):
            name = "image_size" if self.height is None else name
            require(value % patch == 0, f"{key}.{name} ({value}) must be divisible by {key}.{patch_name} ({patch})")
        require(not self.conv_stem or self.stem_channels >= 2,
                f"{key}.stem_channels must be at least 2, got {self.stem_channels}")
        for name, value in patches.items():
            require(not self.conv_stem or value % 4 == 0,
                    f"{key}.conv_stem needs {key}.{name} divisible by 4 (the stem downsamples 4x), got {value}")
        if self.resnet_widths:
            require(not self.conv_stem, f"{key}.conv_stem and {key}.resnet_widths are two alternative stems: set one")
            require(all(w >= 1 for w in self.resnet_widths),
                    f"{key}.resnet_widths must be positive channel counts, got {self.resnet_widths}")
            require(self.resnet_blocks >= 1, f"{key}.resnet_blocks must be at least 1, got {self.resnet_blocks}")
            require(self.resnet_stem_stride in (1, 2),
                    f"{key}.resnet_stem_stride must be 1 or 2, got {self.resnet_stem_stride}")
            factor = 2 ** len(self.resnet_widths)
            for name, value in patches.items():
                require(value % factor == 0,
                        f"{key}.{name} ({value}) must be divisible by {factor}: the "
                        f"{len(self.resnet_widths)} stages of {key}.resnet_widths downsample {factor}x")
        for name in ("mean", "std"):
            values = getattr(self, name)
            require(len(values) in (1, self.channels),
                    f"{key}.{name} needs one value, or one per channel ({self.channels}); got {values}")
        require(all(s > 0 for s in self.std), f"{key}.std must be positive, got {self.std}")
        require(self.max_pixels is None or self.max_pixels >= 1,
                f"{key}.max_pixels must be positive (or null: no limit), got {self.max_pixels}")

    @property
    def size(self) -> tuple[int, int]:
        """(height, width) in pixels after resizing."""
        if self.height is None:
            return (self.image_size, self.image_size)
        assert self.width is not None  # set together with height (__post_init__)
        return (self.height, self.width)

    @property
    def patch(self) -> tuple[int, int]:
        """(patch height, patch width) in pixels."""
        return (self.patch_height or self.patch_size, self.patch_size)

    @property
    def grid(self) -> tuple[int, int]:
        """(gh, gw): patches per column and per row."""
        (h, w), (ph, pw) = self.size, self.patch
        return h // ph, w // pw

# --------------------------------------------------------------------------------------------
# type: audio (the encoder: seq2seq.model.encoders.audio)
# --------------------------------------------------------------------------------------------


def mel_band_edges(f_min: float, f_max: float, n_mels: int) -> Any:
    """The n_mels + 2 edge frequencies in Hz (float64 numpy array) of HTK-scale triangular mel filters
    between f_min and f_max: filter i rises from edge i to its peak at edge i + 1 and falls to edge i + 2
    (`seq2seq.model.encoders.audio_features.mel_filterbank` builds the filters on them)."""
    import numpy as np

    def hz_to_mel(f: float) -> Any:
        return 2595.0 * np.log10(1.0 + np.asarray(f, dtype=np.float64) / 700.0)

    mel_points = np.linspace(hz_to_mel(f_min), hz_to_mel(f_max), n_mels + 2)
    return 700.0 * (10.0 ** (np.asarray(mel_points, dtype=np.float64) / 2595.0) - 1.0)


def empty_mel_filters(sample_rate: int, n_fft: int, n_mels: int, f_min: float, f_max: float) -> list[int]:
    """The mel filters that hold no FFT bin (a bin's frequency strictly between a filter's outer edges
    is where the triangle is above 0)."""
    import numpy as np

    freqs = np.linspace(0.0, sample_rate / 2, n_fft // 2 + 1)[:, None]
    edges = mel_band_edges(f_min, f_max, n_mels)
    inside = (freqs > edges[:-2]) & (freqs < edges[2:])
    return [int(i) for i in np.flatnonzero(~inside.any(axis=0))]


@register_encoder_config
@dataclass(frozen=True)
class AudioEncoderConfig(EncoderConfig):
    """`model.encoder` for `type: audio`. Sizes in samples (n_fft, win_length, hop_length) at
    `sample_rate`; the Transformer sizes (d_model, heads, encoder_layers, ...) are the model's.

    win_length: None = n_fft. f_max: None = sample_rate / 2.
    normalize: feature normalisation over real frames: global (per utterance, one mean/std over all
        bins; the default), per_bin (per utterance, mean/variance of each bin: this hides which bins
        hold the energy), corpus (global CMVN: one mean/std per mel bin over the training set, computed
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
        gain, reverb; off by default): `AudioAugmentConfig`,
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
        for key in ("sample_rate", "n_fft", "hop_length", "n_mels", "conv_channels", "corpus_utterances"):
            require(not getattr(self, key) <= 0, f"{KEY}.{key} must be positive, got {getattr(self, key)}")
        require(self.win_length is None or 0 < self.win_length <= self.n_fft,
                f"{KEY}.win_length must be in [1, n_fft={self.n_fft}], got {self.win_length}")
        nyquist = self.sample_rate / 2
        require(0.0 <= self.f_min < nyquist, f"{KEY}.f_min must be in [0, sample_rate/2={nyquist:g}), got {self.f_min}")
        require(self.f_max is None or self.f_min < self.f_max <= nyquist,
                f"{KEY}.f_max must be in (f_min={self.f_min:g}, sample_rate/2={nyquist:g}], got {self.f_max}")
        for key in ("freq_masks", "freq_mask_width", "time_masks", "time_mask_width"):
            require(getattr(self, key) >= 0, f"{KEY}.{key} must be >= 0, got {getattr(self, key)}")
        require(self.freq_mask_width <= self.n_mels,
                f"{KEY}.freq_mask_width must be at most n_mels={self.n_mels}, got {self.freq_mask_width}")
        require(0.0 <= self.time_mask_max_frac <= 1.0,
                f"{KEY}.time_mask_max_frac must be in [0, 1], got {self.time_mask_max_frac}")
        require(self.max_seconds is None or not self.max_seconds <= 0,
                f"{KEY}.max_seconds must be positive, got {self.max_seconds}")
        empty = empty_mel_filters(self.sample_rate, self.n_fft, self.n_mels, self.f_min, self.fmax)
        require(not empty, f"{KEY}.n_mels ({self.n_mels}) is too large for n_fft={self.n_fft} between "
                           f"f_min={self.f_min:g} and f_max={self.fmax:g} Hz: mel filters {empty[:5]} contain no FFT "
                           "bin; lower n_mels or raise n_fft")

    @property
    def window(self) -> int:
        return self.n_fft if self.win_length is None else self.win_length

    @property
    def fmax(self) -> float:
        return self.sample_rate / 2 if self.f_max is None else self.f_max


# --------------------------------------------------------------------------------------------
# type: hf (Hugging Face backbones; the encoder: seq2seq.model.encoders.hf and hf_backbone)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Backbone:
    """A supported kind of backbone: what it reads and which transformers class runs it."""

    kind: str  # what it reads: "image" or "audio" (the name of the model's `SourceKind`)
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


def image_size(settings: Mapping[str, object]) -> tuple[int, int] | None:
    """(height, width) of the images an image processor with these settings makes (None: it depends on
    the image, e.g. a shortest-edge resize without a crop)."""
    for key, on in (("crop_size", "do_center_crop"), ("size", "do_resize")):
        size = settings.get(key)
        if settings.get(on) and isinstance(size, dict) and "height" in size and "width" in size:
            return int(size["height"]), int(size["width"])
    return None


def backbone_spec(model_type: object) -> Backbone:
    require(isinstance(model_type, str) and model_type in BACKBONES,
            f"{KEY}: backbones of model_type {model_type!r} are not supported; "
            f"supported: {', '.join(sorted(BACKBONES))} (and clip, for its vision tower)")
    return BACKBONES[str(model_type)]  # (a str: required above)


@register_encoder_config
@dataclass(frozen=True)
class HFEncoderConfig(EncoderConfig):
    """`model.encoder` for `type: hf` (see seq2seq.model.encoders.hf). Pure data: nothing is read when
    it is parsed; when a run starts, `resolve_backbone` makes the config with `backbone` and
    `preprocessor` read from `name_or_path`.

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
        require(self.type == "hf", f"{KEY}.type must be 'hf' for an HFEncoderConfig, got {self.type!r}")
        require(self.unfreeze_top_layers >= 0,
                f"{KEY}.unfreeze_top_layers must be >= 0, got {self.unfreeze_top_layers}")
        require(self.max_pixels is None or self.max_pixels >= 1,
                f"{KEY}.max_pixels must be positive (or null: no limit), got {self.max_pixels}")
        require(self.unfreeze_after_steps is None or self.unfreeze_after_steps >= 1,
                f"{KEY}.unfreeze_after_steps must be >= 1, got {self.unfreeze_after_steps}")
        require(self.freeze or not (self.unfreeze_top_layers or self.unfreeze_after_steps is not None),
                f"{KEY}.unfreeze_top_layers and {KEY}.unfreeze_after_steps need {KEY}.freeze: true")
        if self.backbone:
            check_backbone(self)

    @property
    def spec(self) -> Backbone:
        require(bool(self.backbone), f"{KEY}.name_or_path is not set: name the backbone (a hub id or a directory)")
        return backbone_spec(self.backbone.get("model_type"))


def check_backbone(cfg: HFEncoderConfig) -> None:
    """ConfigError naming the key when `backbone` and `preprocessor` do not fit each other."""
    spec = backbone_spec(cfg.backbone.get("model_type"))
    require(bool(cfg.preprocessor), f"{KEY}.preprocessor is empty: the backbone's image processor / feature "
                                    f"extractor settings are needed")
    if spec.kind == "image":
        size = image_size(cfg.preprocessor)
        expected = cfg.backbone.get("image_size")
        if size is not None:
            require(size == (expected, expected), f"{KEY}: the image processor makes {size[0]}x{size[1]} images but "
                                                  f"the backbone reads {expected}x{expected}")
    if spec.inputs == "log-mel":
        p, b = cfg.preprocessor, cfg.backbone
        frames = p.get("n_samples", 0) // max(p.get("hop_length", 1), 1)
        require(frames == 2 * b.get("max_source_positions", 0) and p.get("feature_size") == b.get("num_mel_bins"),
                f"{KEY}: the feature extractor makes {p.get('feature_size')} x {frames} log-mel features but "
                f"the Whisper encoder reads {b.get('num_mel_bins')} x {2 * b.get('max_source_positions', 0)}")
