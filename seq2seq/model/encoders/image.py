"""The image modality: a ViT-style encoder over a grid of patches, its config and its `ImageProcessor`.

    image file --ImageProcessor.load--> uint8 [C, H, W] (converted, resized; kept in memory)
    examples --ImageProcessor.collate--> float [B, C, H, W], normalised (x / 255 - mean) / std
    images --ImageEncoder--> memory [B, S, D], S = gh * gw patches in row-major order

    model:
      encoder: {type: image, image_size: 64, patch_size: 8}

Preprocessing is defined by `ImageEncoderConfig` alone, which is saved in the model directory's
config.yaml, so training and inference read images identically: the image is decoded with Pillow,
turned upright by its EXIF orientation, flattened onto white where it has transparency, converted
to RGB (channels 3) or 8-bit grey (channels 1), and stretched to height x width with Pillow's
antialiasing bicubic filter (the aspect ratio is not kept: a 200x100 photo fills the whole square).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import Tensor, nn

from seq2seq.config import ConfigError
from seq2seq.config.encoder_section import EncoderConfig, register_encoder_config
from seq2seq.config.model_section import ModelConfig
from seq2seq.model.layers import EncoderLayer, sinusoidal_table
from seq2seq.model.encoders.augment import ImageAugmentConfig, augment_image
from seq2seq.model.encoders.base import Encoder, Modality, register
from seq2seq.model.encoders.sources import IMAGE, AttentionView, SourceInfo, SourceProcessor
from seq2seq.model.encoders.media_io import probe_image, read_image


@register_encoder_config
@dataclass
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
        contrast; off by default): `seq2seq.model.encoders.augment.ImageAugmentConfig`,
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
        if self.type != "image":
            raise ConfigError(f"{key}.type must be 'image' for an ImageEncoderConfig, got {self.type!r}")
        if (self.height is None) != (self.width is None):
            raise ConfigError(f"{key}.height and {key}.width must be set together (or neither: {key}.image_size)")
        if self.channels not in (1, 3):
            raise ConfigError(f"{key}.channels must be 3 (RGB) or 1 (grey), got {self.channels}")
        patches = {"patch_size": self.patch_size} if self.patch_height is None else \
            {"patch_height": self.patch_height, "patch_size": self.patch_size}
        for name, value in patches.items():
            if value < 1:
                raise ConfigError(f"{key}.{name} must be positive, got {value}")
        if self.height is None or self.width is None:  # both None (checked above)
            sizes = {"image_size": self.image_size}
        else:
            sizes = {"height": self.height, "width": self.width}
        for name, value in sizes.items():
            if value < 1:
                raise ConfigError(f"{key}.{name} must be positive, got {value}")
        (h, w), (ph, pw) = self.size, self.patch
        for name, value, patch, patch_name in (("height", h, ph, "patch_height" if self.patch_height else "patch_size"),
                                               ("width", w, pw, "patch_size")):
            if value % patch:
                name = "image_size" if self.height is None else name
                raise ConfigError(f"{key}.{name} ({value}) must be divisible by {key}.{patch_name} ({patch})")
        if self.conv_stem and self.stem_channels < 2:
            raise ConfigError(f"{key}.stem_channels must be at least 2, got {self.stem_channels}")
        for name, value in patches.items():
            if self.conv_stem and value % 4:
                raise ConfigError(f"{key}.conv_stem needs {key}.{name} divisible by 4 (the stem downsamples 4x), "
                                  f"got {value}")
        if self.resnet_widths:
            if self.conv_stem:
                raise ConfigError(f"{key}.conv_stem and {key}.resnet_widths are two alternative stems: set one")
            if any(w < 1 for w in self.resnet_widths):
                raise ConfigError(f"{key}.resnet_widths must be positive channel counts, got {self.resnet_widths}")
            if self.resnet_blocks < 1:
                raise ConfigError(f"{key}.resnet_blocks must be at least 1, got {self.resnet_blocks}")
            if self.resnet_stem_stride not in (1, 2):
                raise ConfigError(f"{key}.resnet_stem_stride must be 1 or 2, got {self.resnet_stem_stride}")
            factor = 2 ** len(self.resnet_widths)
            for name, value in patches.items():
                if value % factor:
                    raise ConfigError(f"{key}.{name} ({value}) must be divisible by {factor}: the "
                                      f"{len(self.resnet_widths)} stages of {key}.resnet_widths downsample {factor}x")
        for name in ("mean", "std"):
            values = getattr(self, name)
            if len(values) not in (1, self.channels):
                raise ConfigError(f"{key}.{name} needs one value, or one per channel ({self.channels}); got {values}")
        if any(not s > 0 for s in self.std):
            raise ConfigError(f"{key}.std must be positive, got {self.std}")
        if self.max_pixels is not None and self.max_pixels < 1:
            raise ConfigError(f"{key}.max_pixels must be positive (or null: no limit), got {self.max_pixels}")

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
# The encoder
# --------------------------------------------------------------------------------------------


class ResidualBlock(nn.Module):
    """The ResNet basic block: conv3x3(stride) -> BN -> ReLU -> conv3x3 -> BN, plus the shortcut
    (identity, or a strided 1x1 convolution + BN where the shape changes), then ReLU.

    forward(x [B, C_in, H, W]) -> [B, C_out, H / stride, W / stride] (sizes rounded up).
    """

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: Tensor) -> Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


def resnet(in_channels: int, widths: list[int], blocks: int, stem_stride: int = 1) -> nn.Sequential:
    """The `resnet_widths` CNN: conv3x3 + BN + ReLU to widths[0] channels, then per width a stage of
    `blocks` residual blocks, the first with stride 2. With stem_stride 2 the stem convolution halves
    the map instead of the first stage's first block.
    [B, in_channels, H, W] -> [B, widths[-1], H / 2^n, W / 2^n], n = len(widths)."""
    layers: list[nn.Module] = [nn.Conv2d(in_channels, widths[0], 3, stride=stem_stride, padding=1, bias=False),
                               nn.BatchNorm2d(widths[0]), nn.ReLU()]
    c = widths[0]
    for stage, width in enumerate(widths):
        for i in range(blocks):
            halves = i == 0 and not (stage == 0 and stem_stride == 2)
            layers.append(ResidualBlock(c, width, stride=2 if halves else 1))
            c = width
    return nn.Sequential(*layers)


def sinusoidal_2d(gh: int, gw: int, d_model: int) -> Tensor:
    """Fixed 2-D positions [gh * gw, D], row-major: dims [0, D/2) = the 1-D sinusoid of the row,
    dims [D/2, D) = that of the column."""
    half = d_model // 2
    rows = sinusoidal_table(gh, half)[:, None, :].expand(gh, gw, half)
    cols = sinusoidal_table(gw, half)[None, :, :].expand(gh, gw, half)
    return torch.cat([rows, cols], dim=-1).reshape(gh * gw, d_model)


class ImageEncoder(Encoder[Tensor]):
    """ViT-style encoder: (optional conv stem or ResNet) -> patch embedding -> + 2-D positions -> dropout ->
    `model_cfg.n_encoder_layers` self-attention layers -> final LayerNorm (pre-norm models).

    forward(images [B, C, H, W] float, normalised) -> (memory [B, S, D], pad_mask [B, S] all False),
    S = gh * gw, memory row-major over the patch grid: position r * gw + c is the patch in row r,
    column c. `self.grid = (gh, gw)`.
    """

    table: Tensor  # sinusoidal positions [S, D], a buffer (positions: sinusoidal)

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        enc = cfg.encoder
        if not isinstance(enc, ImageEncoderConfig):
            raise ConfigError(f"model.encoder must be an image encoder config, got {type(enc).__name__}")
        if enc.positions == "sinusoidal" and cfg.d_model % 4:
            raise ConfigError(f"model.encoder.positions 'sinusoidal' needs model.d_model divisible by 4, got {cfg.d_model}")
        self.d_model = cfg.d_model
        self.size = enc.size
        self.grid = enc.grid
        gh, gw = self.grid
        in_channels, (ph, pw) = enc.channels, enc.patch
        if enc.conv_stem:  # [B, C, H, W] -> [B, stem_channels, H / 4, W / 4]
            half = enc.stem_channels // 2
            self.stem: nn.Module = nn.Sequential(
                nn.Conv2d(enc.channels, half, 3, stride=2, padding=1), nn.GELU(),
                nn.Conv2d(half, enc.stem_channels, 3, stride=2, padding=1), nn.GELU(),
            )
            in_channels, ph, pw = enc.stem_channels, ph // 4, pw // 4
        elif enc.resnet_widths:  # [B, C, H, W] -> [B, widths[-1], H / 2^n, W / 2^n]
            # NCHW, not channels_last: see docs/architecture.md (channels_last crashed oneDNN's backward).
            self.stem = resnet(enc.channels, enc.resnet_widths, enc.resnet_blocks, enc.resnet_stem_stride)
            factor = 2 ** len(enc.resnet_widths)
            in_channels, ph, pw = enc.resnet_widths[-1], ph // factor, pw // factor
        else:
            self.stem = nn.Identity()
        # A convolution with kernel = stride = patch size is a linear map of each flattened patch.
        self.patch_embed = nn.Conv2d(in_channels, cfg.d_model, kernel_size=(ph, pw), stride=(ph, pw))
        if enc.positions == "learned":
            self.row_embed = nn.Parameter(torch.randn(gh, cfg.d_model) * 0.02)  # [gh, D]
            self.col_embed = nn.Parameter(torch.randn(gw, cfg.d_model) * 0.02)  # [gw, D]
        else:
            self.register_buffer("table", sinusoidal_2d(gh, gw, cfg.d_model), persistent=False)  # [S, D]
        self.dropout = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers))
        self.final_norm = nn.LayerNorm(cfg.d_model) if cfg.norm == "pre" else nn.Identity()

    def positions(self) -> Tensor:
        """Position encodings [S, D], row-major over the grid."""
        if hasattr(self, "table"):
            return self.table
        gh, gw = self.grid
        return (self.row_embed[:, None, :] + self.col_embed[None, :, :]).reshape(gh * gw, self.d_model)

    def forward(self, images: Tensor) -> tuple[Tensor, Tensor]:
        """images [B, C, H, W] -> (memory [B, S, D], pad_mask [B, S], all False)."""
        if images.dim() != 4 or tuple(images.shape[2:]) != self.size:
            raise ValueError(f"expected images [B, C, {self.size[0]}, {self.size[1]}], got {list(images.shape)}")
        x = self.patch_embed(self.stem(images))  # [B, D, gh, gw]
        x = x.flatten(2).transpose(1, 2)  # [B, S, D], row-major
        x = self.dropout(x + self.positions().to(x.dtype))
        for layer in self.layers:
            x = layer(x, None)  # every patch is real: no padding mask
        memory = self.final_norm(x)
        pad_mask = torch.zeros(memory.shape[:2], dtype=torch.bool, device=memory.device)
        return memory, pad_mask


# --------------------------------------------------------------------------------------------
# Sources
# --------------------------------------------------------------------------------------------


class ImageProcessor(SourceProcessor[Tensor, Tensor]):
    """Image file -> uint8 [C, H, W] (`load`, read by `media_io.read_image`); examples -> normalised
    float [B, C, H, W] (`collate`)."""

    kind = IMAGE

    def __init__(self, cfg: EncoderConfig) -> None:
        if not isinstance(cfg, ImageEncoderConfig):  # (as AudioProcessor)
            raise ConfigError(f"the image processor needs model.encoder.type: image, got {cfg.type!r}")
        self.cfg = cfg
        self.size = cfg.size
        gh, gw = cfg.grid
        self.positions = gh * gw
        self.mean = torch.tensor(cfg.mean, dtype=torch.float32).view(1, -1, 1, 1)  # [1, C or 1, 1, 1]
        self.std = torch.tensor(cfg.std, dtype=torch.float32).view(1, -1, 1, 1)

    def probe(self, path: str) -> SourceInfo | None:
        return probe_image(path)

    def load(self, path: str | Path) -> Tensor:
        """Read, convert and resize one image: uint8 [C, H, W]. SourceError naming the path as
        `read_image` raises it."""
        from PIL import Image

        im = read_image(path, self.cfg.channels, self.cfg.max_pixels)
        h, w = self.size
        if im.size != (w, h):
            im = im.resize((w, h), Image.Resampling.BICUBIC)
        c = self.cfg.channels
        return torch.frombuffer(bytearray(im.tobytes()), dtype=torch.uint8).view(h, w, c).permute(2, 0, 1).contiguous()

    def length(self, example: Tensor) -> int:
        """Every image becomes gh * gw encoder positions."""
        return self.positions

    def collate(self, examples: Sequence[Tensor]) -> Tensor:
        """uint8 [C, H, W] examples -> float [B, C, H, W] = (pixel / 255 - mean) / std."""
        if not examples:
            raise ValueError("collate needs at least one image")
        expected = (self.cfg.channels, *self.size)
        for i, x in enumerate(examples):
            if tuple(x.shape) != expected:
                raise ValueError(f"image {i} has shape {list(x.shape)}, expected {list(expected)} (use ImageProcessor.load)")
        batch = torch.stack(list(examples)).to(torch.float32).div_(255.0)
        return batch.sub_(self.mean).div_(self.std)

    def collate_augmented(self, examples: Sequence[Tensor], rngs: Sequence[np.random.Generator]) -> Tensor:
        """Training: each uint8 [C, H, W] image augmented with its generator (`augment.augment_image`),
        then collated. Augmentation off: `collate`."""
        if not self.cfg.augment.active:
            return self.collate(examples)
        return self.collate([augment_image(x, self.cfg.augment, rng) for x, rng in zip(examples, rngs)])

    def attention_view(self, example: Tensor) -> AttentionView:
        """The image as the model sees it, under its grid of patches."""
        return AttentionView(image=example.permute(1, 2, 0).numpy(), grid=self.cfg.grid)


register(Modality("image", build_encoder=lambda cfg, shared: ImageEncoder(cfg), processor=ImageProcessor))
