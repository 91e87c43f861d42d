"""The image modality (seq2seq/model/encoders/image.py) and the captioning recipe's scene generator:
encoder shapes and patch order, batch invariance, image loading (resize, normalisation, modes, bad
files), config validation and round trips, the attention plot, and a tiny train + caption end to end."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner
from PIL import Image

from seq2seq.config import ConfigError, ModelConfig, from_dict, to_dict
from seq2seq.model.encoders import SourceError, get_modality
from seq2seq.report.plots import save_figure
from seq2seq.model.encoders.image import ImageEncoder, ImageEncoderConfig, ImageProcessor
from seq2seq.report.source_attention import draw_source_attention
from seq2seq.model.transformer import Seq2SeqTransformer

SCENES = Path(__file__).resolve().parents[1] / "recipes" / "captioning" / "scenes.py"


def model_cfg(**encoder) -> ModelConfig:
    enc = {"type": "image", "image_size": 32, "patch_size": 8, **encoder}
    layers = {"layers": 1}
    return from_dict(ModelConfig, {"d_model": 32, "heads": 2, "ffn_dim": 64, **layers, "tgt_vocab_size": 20,
                                   "encoder": enc})


def save(image: Image.Image, path: Path, **kw) -> Path:
    image.save(path, **kw)
    return path


# --------------------------------------------------------------------------------------------
# Encoder
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("encoder", [
    {},
    {"positions": "learned", "conv_stem": True, "stem_channels": 4},
    {"height": 16, "width": 40, "patch_size": 4, "channels": 1},
    {"height": 16, "width": 48, "patch_size": 8, "channels": 1, "resnet_widths": [4, 6], "resnet_blocks": 2},
    {"height": 24, "width": 40, "patch_size": 8, "resnet_widths": [4, 4, 8]},
    {"height": 32, "width": 64, "patch_size": 8, "patch_height": 32, "channels": 1, "resnet_widths": [4, 8]},
    {"height": 32, "width": 64, "patch_size": 8, "patch_height": 32, "channels": 1, "resnet_widths": [4, 8],
     "resnet_stem_stride": 2, "resnet_blocks": 2},
    {"height": 16, "width": 24, "patch_size": 4, "patch_height": 16, "conv_stem": True, "stem_channels": 4},
])
def test_encoder_shapes_mask_and_grid(encoder):
    cfg = model_cfg(**encoder)
    enc = cfg.encoder
    model = Seq2SeqTransformer(cfg).eval()
    assert isinstance(model.encoder, ImageEncoder)
    h, w = enc.size
    gh, gw = h // (enc.patch_height or enc.patch_size), w // enc.patch_size
    assert model.encoder.grid == (gh, gw) == enc.grid
    memory, mask = model.encode(torch.randn(3, enc.channels, h, w))
    assert memory.shape == (3, gh * gw, cfg.d_model)
    assert mask.dtype == torch.bool and mask.shape == (3, gh * gw) and not mask.any()
    assert get_modality("image").processor(enc).length(torch.zeros(enc.channels, h, w, dtype=torch.uint8)) == gh * gw
    with pytest.raises(ValueError, match="expected images"):
        model.encode(torch.randn(1, enc.channels, h + 8, w))


def test_memory_is_row_major_over_the_patch_grid():
    """Changing the pixels of patch (row 1, column 2) changes memory position 1 * gw + 2 only
    (no encoder layers, so positions do not mix)."""
    cfg = from_dict(ModelConfig, {"d_model": 32, "heads": 2, "ffn_dim": 64, "encoder_layers": 0, "decoder_layers": 1,
                                  "encoder": {"type": "image", "height": 16, "width": 32, "patch_size": 8}})
    encoder = Seq2SeqTransformer(cfg).encoder.eval()
    assert encoder.grid == (2, 4)
    images = torch.zeros(1, 3, 16, 32)
    base, _ = encoder(images)
    images[:, :, 8:16, 16:24] = 1.0  # patch row 1, column 2
    changed, _ = encoder(images)
    differs = (base - changed).abs().amax(dim=-1)[0] > 1e-6
    assert differs.nonzero().flatten().tolist() == [1 * 4 + 2]


def test_sinusoidal_positions_encode_row_then_column():
    from seq2seq.model.encoders.image import sinusoidal_2d

    table = sinusoidal_2d(3, 4, 16).view(3, 4, 16)
    assert torch.equal(table[0, :, :8], table[0, :1, :8].expand(4, 8))  # first half: the row only
    assert torch.equal(table[:, 0, 8:], table[:1, 0, 8:].expand(3, 8))  # second half: the column only
    assert not torch.equal(table[1, 0], table[0, 1])  # (1, 0) and (0, 1) differ
    with pytest.raises(ConfigError, match="model.d_model divisible by 4"):
        Seq2SeqTransformer(from_dict(ModelConfig, {"d_model": 30, "heads": 2, "encoder": {"type": "image"}}))


@pytest.mark.parametrize("stem", [{"conv_stem": True, "stem_channels": 4}, {"resnet_widths": [4, 8]}])
def test_encoder_is_batch_invariant(stem):
    torch.manual_seed(0)
    model = Seq2SeqTransformer(model_cfg(**stem, positions="learned"))
    images = torch.randn(4, 3, 32, 32)
    model.train()  # BatchNorm: a few training batches move its running statistics off their start
    with torch.no_grad():
        for _ in range(3):
            model.encode(images * 2 + 1)
    model.eval()
    with torch.inference_mode():
        batch, _ = model.encode(images)
        for i in range(4):
            alone, _ = model.encode(images[i: i + 1])
            torch.testing.assert_close(alone[0], batch[i], atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------------------------
# Loading images
# --------------------------------------------------------------------------------------------


def processor(**kw) -> ImageProcessor:
    return ImageProcessor(from_dict(ImageEncoderConfig, {"image_size": 16, "patch_size": 8, **kw}))


def test_load_stretches_with_bicubic_and_collate_normalises(tmp_path):
    # 40x10 (wide): red left half, blue right half. Stretched (not cropped or padded) to 16x16.
    image = Image.new("RGB", (40, 10), (200, 0, 0))
    image.paste((0, 0, 255), (20, 0, 40, 10))
    path = save(image, tmp_path / "wide.png")
    proc = processor(mean=[0.5, 0.25, 0.0], std=[0.5, 0.25, 1.0])
    x = proc.load(str(path))
    assert x.dtype == torch.uint8 and x.shape == (3, 16, 16)
    assert x[:, :, 0].tolist() == [[200] * 16, [0] * 16, [0] * 16]  # first column: red, every row (no padding)
    assert x[:, :, 15].tolist() == [[0] * 16, [0] * 16, [255] * 16]  # last column: blue
    expected = Image.open(path).resize((16, 16), Image.Resampling.BICUBIC)
    assert torch.equal(x, torch.frombuffer(bytearray(expected.tobytes()), dtype=torch.uint8).view(16, 16, 3).permute(2, 0, 1))

    batch = proc.collate([x, torch.full_like(x, 255)])
    assert batch.dtype == torch.float32 and batch.shape == (2, 3, 16, 16)
    # (pixel / 255 - mean) / std per channel
    torch.testing.assert_close(batch[0, :, 0, 0], torch.tensor([(200 / 255 - 0.5) / 0.5, (0 - 0.25) / 0.25, 0.0]))
    torch.testing.assert_close(batch[1, :, 5, 5], torch.tensor([1.0, 3.0, 1.0]))
    assert torch.equal(x, proc.load(str(path)))  # collate does not change the stored example
    with pytest.raises(ValueError, match="expected"):
        proc.collate([torch.zeros(3, 8, 8, dtype=torch.uint8)])


def test_grey_rgba_palette_and_16_bit_inputs(tmp_path):
    grey = save(Image.new("L", (20, 20), 77), tmp_path / "grey.png")
    assert processor().load(str(grey)).unique().tolist() == [77]  # L -> RGB, 3 equal channels
    assert processor().load(str(grey)).shape == (3, 16, 16)

    rgb = save(Image.new("RGB", (20, 20), (100, 100, 100)), tmp_path / "rgb.jpg")
    x = processor(channels=1).load(str(rgb))
    assert x.shape == (1, 16, 16) and abs(int(x.float().mean()) - 100) <= 1  # RGB -> grey (JPEG rounding)

    rgba = Image.new("RGBA", (16, 16), (0, 0, 0, 0))  # transparent black ...
    rgba.paste((10, 200, 30, 255), (0, 0, 8, 16))  # ... left half opaque green
    x = processor().load(str(save(rgba, tmp_path / "rgba.png")))
    assert x[:, 0, 0].tolist() == [10, 200, 30]
    assert x[:, 0, 15].tolist() == [255, 255, 255]  # transparency flattened onto white, not black

    palette = Image.new("P", (16, 16), 1)
    palette.putpalette([0, 0, 0, 250, 120, 5] + [0] * 762)
    assert processor().load(str(save(palette, tmp_path / "p.png")))[:, 3, 3].tolist() == [250, 120, 5]

    deep = Image.frombytes("I;16", (16, 16), torch.tensor([[32768] * 8 + [65535] * 8] * 16, dtype=torch.int32)
                           .to(torch.uint16).numpy().tobytes())
    x = processor(channels=1).load(str(save(deep, tmp_path / "deep.png")))
    assert x[0, 0, 0].item() == 128 and x[0, 0, 15].item() == 255  # scaled to 8 bits, not clipped


def test_bad_image_files_raise_source_error_naming_the_path(tmp_path):
    good = io.BytesIO()
    Image.radial_gradient("L").convert("RGB").save(good, format="PNG")
    data = good.getvalue()
    (tmp_path / "empty.png").write_bytes(b"")
    (tmp_path / "text.png").write_text("this is not an image\n")
    (tmp_path / "truncated.png").write_bytes(data[: len(data) // 2])
    (tmp_path / "folder.png").mkdir()
    cases = {"missing.png": "not found", "empty.png": "empty", "text.png": "not an image",
             "truncated.png": "cannot read image", "folder.png": "not a file"}
    proc = processor()
    for name, what in cases.items():
        path = str(tmp_path / name)
        with pytest.raises(SourceError) as info:
            proc.load(path)
        assert path in str(info.value) and what in str(info.value), str(info.value)
    (tmp_path / "ok.png").write_bytes(data)
    assert proc.load(str(tmp_path / "ok.png")).shape == (3, 16, 16)


def png_declaring(width: int, height: int) -> bytes:
    """A PNG whose header declares width x height pixels but that holds almost no pixel data."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def test_images_over_max_pixels_are_refused_from_the_header(tmp_path):
    import warnings

    (tmp_path / "huge.png").write_bytes(png_declaring(12000, 12000))  # decoding would fail: the size decides
    (tmp_path / "bomb.png").write_bytes(png_declaring(20000, 20000))  # over Pillow's own limit too
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Pillow's DecompressionBombWarning is not shown either
        with pytest.raises(SourceError) as err:
            processor().load(str(tmp_path / "huge.png"))
        assert str(err.value) == (f"image {tmp_path / 'huge.png'} has 12000x12000 pixels (144.0 megapixels), "
                                  "more than model.encoder.max_pixels=40000000 (40 megapixels)")
        for cap in (40_000_000, None):  # Pillow refuses it on open, naming its own limit
            with pytest.raises(SourceError, match=r"bomb.png is too large: Image size \(400000000 pixels\)"):
                processor(max_pixels=cap).load(str(tmp_path / "bomb.png"))
    Image.new("RGB", (40, 30)).save(tmp_path / "small.png")
    with pytest.raises(SourceError, match="40x30 pixels"):
        processor(max_pixels=1199).load(str(tmp_path / "small.png"))
    assert processor(max_pixels=1200).load(str(tmp_path / "small.png")).shape == (3, 16, 16)
    with pytest.raises(ConfigError, match="model.encoder.max_pixels"):
        processor(max_pixels=0)


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------


def test_config_validation_names_the_key():
    def model(**enc):
        return from_dict(ModelConfig, {"encoder": {"type": "image", **enc}}, prefix="model.")

    with pytest.raises(ConfigError, match=r"unknown config key 'model\.encoder\.patch'.*'model\.encoder\.patch_size'"):
        model(patch=8)
    with pytest.raises(ConfigError, match=r"model\.encoder\.image_size \(60\) must be divisible by model\.encoder\.patch_size \(8\)"):
        model(image_size=60)
    with pytest.raises(ConfigError, match=r"model\.encoder\.width \(30\) must be divisible"):
        model(height=32, width=30)
    with pytest.raises(ConfigError, match=r"model\.encoder\.height and model\.encoder\.width"):
        model(height=32)
    with pytest.raises(ConfigError, match=r"model\.encoder\.conv_stem needs model\.encoder\.patch_size divisible by 4"):
        model(conv_stem=True, image_size=60, patch_size=6)
    with pytest.raises(ConfigError, match=r"model\.encoder\.patch_size \(8\) must be divisible by 16: the 4 stages"):
        model(resnet_widths=[8, 8, 8, 8], patch_size=8)
    with pytest.raises(ConfigError, match=r"model\.encoder\.height \(32\) must be divisible by model\.encoder\.patch_height \(12\)"):
        model(height=32, width=64, patch_height=12)
    with pytest.raises(ConfigError, match=r"model\.encoder\.patch_height \(12\) must be divisible by 8"):
        model(height=24, width=64, patch_height=12, resnet_widths=[4, 4, 4])
    with pytest.raises(ConfigError, match=r"model\.encoder\.patch_height must be positive"):
        model(patch_height=0)
    with pytest.raises(ConfigError, match=r"conv_stem and model\.encoder\.resnet_widths are two alternative stems"):
        model(resnet_widths=[8], conv_stem=True)
    with pytest.raises(ConfigError, match=r"model\.encoder\.resnet_blocks must be at least 1"):
        model(resnet_widths=[8], resnet_blocks=0)
    with pytest.raises(ConfigError, match=r"model\.encoder\.resnet_widths must be positive"):
        model(resnet_widths=[8, 0])
    with pytest.raises(ConfigError, match=r"model\.encoder\.resnet_stem_stride must be 1 or 2, got 4"):
        model(resnet_widths=[8], resnet_stem_stride=4)
    with pytest.raises(ConfigError, match=r"model\.encoder\.channels"):
        model(channels=4)
    with pytest.raises(ConfigError, match=r"model\.encoder\.mean"):
        model(mean=[0.5, 0.5])
    with pytest.raises(ConfigError, match=r"model\.encoder\.std must be positive"):
        model(std=[0.0])
    with pytest.raises(ConfigError, match=r"model\.encoder\.image_size': expected an integer"):
        model(image_size="64")


def test_resnet_stem_downsamples_by_two_per_stage_and_uses_batch_statistics_only_in_training():
    """Each stage halves the map (so the patch embedding covers patch_size / 2^stages of it); in
    training BatchNorm normalises by the batch and updates its running statistics, in eval it uses
    them, so one image's memory depends on its batch in training only."""
    from seq2seq.model.encoders.image import ResidualBlock, resnet

    stem = resnet(1, [4, 6, 8], blocks=2)
    assert sum(isinstance(m, ResidualBlock) for m in stem) == 6
    assert stem(torch.randn(2, 1, 32, 192)).shape == (2, 8, 4, 24)
    block = ResidualBlock(4, 4, stride=1)
    assert isinstance(block.shortcut, torch.nn.Identity)  # same shape: the identity shortcut
    assert tuple(ResidualBlock(4, 8, stride=2)(torch.randn(1, 4, 7, 9)).shape) == (1, 8, 4, 5)

    torch.manual_seed(0)
    model = Seq2SeqTransformer(model_cfg(resnet_widths=[4, 8]))
    encoder = model.encoder
    assert encoder.patch_embed.kernel_size == (2, 2)  # patch 8 over a 4x smaller map
    first_bn = encoder.stem[1]
    images = torch.randn(3, 3, 32, 32) * 3 + 2
    model.train()
    before = first_bn.running_mean.clone()
    with torch.no_grad():
        batch, _ = model.encode(images)
        alone, _ = model.encode(images[:1])
    assert not torch.equal(first_bn.running_mean, before)
    assert not torch.allclose(batch[0], alone[0], atol=1e-3)  # batch statistics in training
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model.encode(images)[0][0], model.encode(images[:1])[0][0], atol=1e-5, rtol=1e-5)


def test_resnet_stem_stride_two_moves_the_first_halving_into_the_stem():
    """resnet_stem_stride 2: the stem convolution halves the map and the first stage keeps it, so the
    output has the same shape as with stride 1, every later stage still halves, and no convolution
    runs at full resolution but the stem's own."""
    from seq2seq.model.encoders.image import ResidualBlock, resnet

    strided = resnet(1, [4, 6, 8], blocks=2, stem_stride=2)
    assert strided[0].stride == (2, 2)
    strides = [block.conv1.stride for block in strided if isinstance(block, ResidualBlock)]
    assert strides == [(1, 1), (1, 1), (2, 2), (1, 1), (2, 2), (1, 1)]
    assert [block.conv1.stride for block in resnet(1, [4, 6, 8], blocks=2) if isinstance(block, ResidualBlock)] \
        == [(2, 2), (1, 1), (2, 2), (1, 1), (2, 2), (1, 1)]
    images = torch.randn(2, 1, 32, 192)
    assert strided(images).shape == resnet(1, [4, 6, 8], blocks=2)(images).shape == (2, 8, 4, 24)
    seen = []
    hooks = [m.register_forward_hook(lambda m, i, o: seen.append(tuple(i[0].shape[2:])))
             for m in strided.modules() if isinstance(m, torch.nn.Conv2d)]
    strided(images)
    for h in hooks:
        h.remove()
    assert seen.count((32, 192)) == 1  # only the stem reads the full-resolution image


def test_resnet_weights_survive_a_save_and_load(tmp_path):
    """The ResNet stem's weights (BatchNorm statistics included) are saved and loaded whole: a fresh
    model with them gives the same memory."""
    from seq2seq.storage.weights import load_weights, save_weights

    torch.manual_seed(0)
    cfg = model_cfg(resnet_widths=[4, 8])
    model = Seq2SeqTransformer(cfg)
    model.train()
    with torch.no_grad():
        model.encode(torch.randn(4, 3, 32, 32) * 2 + 1)  # move the running statistics off their start
    model.eval()
    save_weights(model.state_dict(), tmp_path / "w.safetensors")
    saved = load_weights(tmp_path / "w.safetensors")
    assert saved["encoder.stem.0.weight"].is_contiguous()
    fresh = Seq2SeqTransformer(cfg).eval()
    fresh.load_state_dict(saved)
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(fresh.encode(images)[0], model.encode(images)[0])


def test_config_round_trip_keeps_the_image_settings(tmp_path):
    cfg = model_cfg(height=24, width=40, patch_size=8, conv_stem=True, positions="learned", mean=[0.4, 0.5, 0.6],
                    std=[0.2, 0.3, 0.4])
    data = to_dict(cfg)
    assert data["encoder"]["type"] == "image" and data["encoder"]["width"] == 40
    again = from_dict(ModelConfig, yaml.safe_load(yaml.safe_dump(data)))
    assert type(again.encoder) is ImageEncoderConfig and again == cfg


# --------------------------------------------------------------------------------------------
# Attention plot
# --------------------------------------------------------------------------------------------


def test_image_attention_is_drawn_and_saved_as_a_png(tmp_path):
    enc = from_dict(ImageEncoderConfig, {"image_size": 16, "patch_size": 8})
    example = torch.randint(0, 256, (3, 16, 16), dtype=torch.uint8)
    view = ImageProcessor(enc).attention_view(example)
    assert view.grid == (2, 2) and view.image.shape == (16, 16, 3) and (view.image[..., 0] == example[0].numpy()).all()
    attention = [[0.7, 0.1, 0.1, 0.1], [0.0, 0.0, 0.0, 1.0], [0.25] * 4]
    save_figure(draw_source_attention(view, attention, ["\u2581a", "\u2581red", "</s>"]), tmp_path / "att.png")
    with Image.open(tmp_path / "att.png") as im:
        assert im.format == "PNG" and im.size[0] > im.size[1]  # one row of 3 panels
    with pytest.raises(ValueError, match="2x2 patch grid has 4"):
        draw_source_attention(view, [[1.0] * 3], ["x"])
    with pytest.raises(ValueError, match="2 attention rows for 1 words"):
        draw_source_attention(view, [[1.0] * 4] * 2, ["x"])


# --------------------------------------------------------------------------------------------
# Scene generator (recipes/captioning/scenes.py)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scenes():
    spec = importlib.util.spec_from_file_location("captioning_scenes", SCENES)
    module = importlib.util.module_from_spec(spec)
    sys.modules["captioning_scenes"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def scene_data(scenes, tmp_path_factory):
    root = tmp_path_factory.mktemp("scenes")
    scenes.generate(root, {"train": 40, "val": 6, "test": 4, "compositional": 30}, seed=3, canvas=64)
    return root


def test_scenes_are_seeded_and_the_compositional_split_is_held_out(scenes, scene_data, tmp_path):
    scenes.generate(tmp_path, {"train": 40}, seed=3, canvas=64)
    assert (tmp_path / "train.tsv").read_text() == (scene_data / "train.tsv").read_text()
    assert (tmp_path / "images/train/00007.png").read_bytes() == (scene_data / "images/train/00007.png").read_bytes()
    held = {tuple(p) for p in scenes.HELD_OUT_PAIRS}
    for split in ("train", "val", "test", "compositional"):
        rows = [json.loads(line) for line in (scene_data / f"{split}.jsonl").read_text().splitlines()]
        for row in rows:
            pairs = {(o["colour"], o["shape"]) for o in row["objects"]}
            assert bool(pairs & held) == (split == "compositional"), (split, row)
            assert 2 <= len(row["objects"]) <= 4 and len(row["caption"]) == 4
            cells = [o["cell"] for o in row["objects"]]
            assert cells == sorted(set(cells))  # distinct cells, reading order
            assert row["caption"][0] == scenes.captions([scenes.Obj(**o) for o in row["objects"]])[0]


def test_scene_captions(scenes):
    def obj(shape, colour, size, cell):
        return scenes.Obj(shape, colour, size, cell, 0.0, 0.0, 1.0, (0, 0, 0))

    objs = [obj("circle", "red", "large", 0), obj("square", "blue", "small", 1), obj("cross", "green", "small", 2)]
    assert scenes.captions(objs) == [
        "a large red circle, to its right a small blue square, and below it and to its left a small green cross",
        "a small green cross, above it and to its right a small blue square, and to its left a large red circle",
        "a large red circle in the top left, a small blue square in the top right and a small green cross in the bottom left",
        "three shapes: a large red circle at the top left, a small green cross at the bottom left, "
        "a small blue square at the top right",
    ]


# --------------------------------------------------------------------------------------------
# End to end: seq2seq train, seq2seq caption, Captioner, model directory
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def caption_model(scene_data, tmp_path_factory):
    from seq2seq.cli import cli

    root = tmp_path_factory.mktemp("caption_model")
    cfg = {
        "data": {"train": str(scene_data / "train.tsv"), "valid": str(scene_data / "val.tsv")},
        "tokenizer": {"vocab_size": 48},
        "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "layers": 1,
                  "encoder": {"type": "image", "image_size": 32, "patch_size": 8, "conv_stem": True,
                              "stem_channels": 4, "mean": [0.4, 0.5, 0.6]}},
        "training": {"output_dir": str(root / "model"), "max_steps": 30, "valid_every": 15, "max_tokens": 1024,
                     "lr": 0.003, "warmup_steps": 5, "device": "cpu", "threads": 1, "log_every": 10},
        "decoding": {"beam": 3, "max_len_a": 0.0, "max_len_b": 30},
    }
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    result = CliRunner().invoke(cli, ["train", str(config)])
    assert result.exit_code == 0, result.output
    return root / "model", cfg


def test_train_then_caption_end_to_end(caption_model, scene_data, tmp_path):
    from seq2seq.cli import cli
    from seq2seq.inference.generator import Captioner

    model_dir, cfg = caption_model
    images = [str(scene_data / f"images/test/{i:05d}.png") for i in range(4)]
    runner = CliRunner()
    result = runner.invoke(cli, ["caption", str(model_dir), *images])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == 4
    result = runner.invoke(cli, ["caption", str(model_dir)], input="\n".join(images) + "\n")  # paths on stdin
    assert result.exit_code == 0 and result.output.splitlines() == lines

    captioner = Captioner.load(model_dir, device="cpu")
    assert captioner.caption(images) == lines  # same search settings as the CLI (the model's decoding)
    alone = [captioner.caption([path], beam=3)[0] for path in images]
    assert captioner.caption(images, beam=3) == alone  # batch invariance, through beam search

    plot = tmp_path / "att.png"
    result = runner.invoke(cli, ["caption", str(model_dir), images[0], "--show-attention", str(plot)])
    assert result.exit_code == 0, result.output
    assert plot.stat().st_size > 0

    result = runner.invoke(cli, ["caption", str(model_dir), images[0], str(tmp_path / "nowhere.png")])
    assert result.exit_code == 1 and str(tmp_path / "nowhere.png") in result.output


def test_model_directory_round_trip_keeps_image_settings(caption_model, scene_data, tmp_path):
    from seq2seq.inference.generator import Captioner

    model_dir, cfg = caption_model
    saved = yaml.safe_load((model_dir / "config.yaml").read_text())["model"]["encoder"]
    for key, value in cfg["model"]["encoder"].items():
        assert saved[key] == value
    loaded = Captioner.load(model_dir, device="cpu")
    enc = loaded.loaded.config.model.encoder
    assert isinstance(enc, ImageEncoderConfig) and enc.size == (32, 32) and enc.mean == [0.4, 0.5, 0.6]
    assert isinstance(loaded.model.encoder, ImageEncoder) and loaded.model.encoder.grid == (4, 4)
    # The processor follows the saved settings: the same image gives the same batch as a fresh one built from them.
    image = str(scene_data / "images/test/00001.png")
    expected = ImageProcessor(from_dict(ImageEncoderConfig, cfg["model"]["encoder"]))
    assert torch.equal(loaded.processor.collate([loaded.processor.load(image)]), expected.collate([expected.load(image)]))
    # A second load of the directory gives the same outputs.
    again = Captioner.load(model_dir, device="cpu")
    images = [str(scene_data / f"images/val/{i:05d}.png") for i in range(3)]
    assert again.caption(images) == loaded.caption(images)


def test_recipe_script_reports_a_bad_override_in_one_line(tmp_path):
    import subprocess

    run = SCENES.parent / "run.py"
    result = subprocess.run([sys.executable, str(run), "--output-dir", str(tmp_path / "run"), "--train-images", "4",
                             "--eval-images", "2", "--set", "model.encoder.patch_size=7"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: model.encoder.image_size (64) must be divisible by model.encoder.patch_size (7)")
    assert (tmp_path / "run" / "data" / "manifest.json").is_file()  # the scenes were written first
