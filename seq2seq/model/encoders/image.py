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
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from seq2seq.config import ConfigError
from seq2seq.config.encoder_section import EncoderConfig, ImageEncoderConfig
from seq2seq.config.model_section import ModelConfig
from seq2seq.model.layers import EncoderLayer, sinusoidal_table
from seq2seq.model.encoders.augment import augment_image
from seq2seq.model.encoders.base import Encoder, Modality, register
from seq2seq.model.encoders.sources import IMAGE, AttentionView, SourceInfo, SourceProcessor
from seq2seq.model.encoders.media_io import probe_image, read_image




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
