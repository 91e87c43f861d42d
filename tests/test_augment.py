"""Training-time augmentation (model.encoder.augment) and global CMVN (normalize: corpus): each audio and
image transform does what it says, the draws are a function of (seed, epoch, row) alone, nothing changes
when it is off or outside training, and tiny trainings with it on run, resume exactly and save the
corpus statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import soundfile as sf
import torch
import yaml
from PIL import Image
from test_audio import SMALL, dominant_hz, reference_log_mel, tone_utterance

from seq2seq.config import ConfigError, ModelConfig, from_dict
from seq2seq.config.root import load_config
from seq2seq.data.media import MediaSplit, collate_media, example_rng
from seq2seq.model.encoders.audio import AudioEncoder, AudioEncoderConfig, AudioProcessor
from seq2seq.model.encoders.audio_features import LogMel
from seq2seq.model.encoders.augment import (
    AudioAugmentConfig,
    ImageAugmentConfig,
    add_noise,
    apply_gain,
    augment_image,
    augment_waveform,
    colored_noise,
    reverberate,
    speed_perturb,
    synthetic_rir,
    vtlp_warp,
)
from seq2seq.model.encoders.image import ImageEncoderConfig, ImageProcessor

RATE = 8000
ALL_AUDIO = {"speed": [0.9, 1.0, 1.1], "vtlp": [0.9, 1.1], "noise_prob": 0.5, "noise_colors": ["white", "pink", "brown"],
             "gain_prob": 0.5, "reverb_prob": 0.5}
ALL_IMAGE = {"crop_scale": [0.6, 1.0], "crop_ratio": [0.75, 1.333], "rotate": 10.0, "brightness": 0.3, "contrast": 0.3}


def tone(hz: float, seconds: float = 1.0, rate: int = RATE) -> np.ndarray:
    return (0.5 * np.sin(2 * np.pi * hz * np.arange(int(seconds * rate)) / rate)).astype(np.float32)


def power(x: np.ndarray) -> float:
    return float(np.mean(np.square(x, dtype=np.float64)))


def audio_cfg(**augment) -> AudioEncoderConfig:
    return from_dict(AudioEncoderConfig, {**SMALL, "augment": augment}, prefix="model.encoder.")


def image_cfg(**augment) -> ImageEncoderConfig:
    return from_dict(ImageEncoderConfig, {"image_size": 32, "patch_size": 8, "augment": augment},
                     prefix="model.encoder.")


# --------------------------------------------------------------------------------------------
# Each audio transform
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("factor", [0.9, 1.1])
def test_speed_resamples_length_and_pitch_by_the_factor(factor):
    x = tone(1000.0)
    y = speed_perturb(x, factor, RATE)
    assert abs(y.size - x.size / factor) <= 2
    assert abs(dominant_hz(y, RATE) - 1000.0 * factor) < 5
    assert speed_perturb(x, 1.0, RATE) is x


@pytest.mark.parametrize("db", [-10.0, 6.0])
def test_gain_changes_the_rms_by_the_db_amount(db):
    x = tone(440.0)
    assert 10 * math.log10(power(apply_gain(x, db)) / power(x)) == pytest.approx(db, abs=1e-3)


@pytest.mark.parametrize("color", ["white", "pink", "brown"])
@pytest.mark.parametrize("snr", [0.0, 10.0, 25.0])
def test_noise_is_added_at_the_snr(snr, color):
    x = tone(440.0)
    y = add_noise(x, snr, color, np.random.default_rng(0))
    assert y.dtype == np.float32 and y.shape == x.shape
    assert 10 * math.log10(power(x) / power(y - x)) == pytest.approx(snr, abs=0.01)
    assert np.array_equal(add_noise(np.zeros(100, np.float32), snr, color, np.random.default_rng(0)), np.zeros(100))


def test_noise_colours_tilt_the_spectrum():
    def low_over_high(color: str) -> float:  # power per bin below 1/8 of Nyquist over power per bin above 1/2
        spectrum = np.abs(np.fft.rfft(colored_noise(2 ** 16, color, np.random.default_rng(1)))) ** 2
        n = spectrum.size
        return float(spectrum[1: n // 8].mean() / spectrum[n // 2:].mean())

    white, pink, brown = (low_over_high(c) for c in ("white", "pink", "brown"))
    assert 0.8 < white < 1.25 and pink > 5 * white and brown > 5 * pink


def test_reverb_adds_a_decaying_tail_of_the_drawn_rt60():
    rt60 = 0.5
    rir = synthetic_rir(rt60, 0.0, RATE, np.random.default_rng(0))
    assert rir.size == rt60 * RATE and rir[0] == 1.0
    assert 10 * math.log10(1.0 / float(np.sum(rir[1:] ** 2))) == pytest.approx(0.0, abs=1e-3)  # the DRR
    burst = np.concatenate([tone(700.0, 0.2), np.zeros(int(0.6 * RATE), np.float32)])
    wet = reverberate(burst, rir)
    assert wet.shape == burst.shape and power(wet) == pytest.approx(power(burst), rel=1e-4)
    end = int(0.2 * RATE)

    def level(x: np.ndarray, start_s: float) -> float:  # dB of a 0.1 s window starting start_s after the burst
        i = end + int(start_s * RATE)
        return 10 * math.log10(power(x[i:i + int(0.1 * RATE)]) + 1e-30)

    assert level(burst, 0.05) < -250  # dry: silence after the burst
    # wet: a tail that falls by ~60 dB per rt60: ~24 dB between windows 0.2 s apart
    assert level(wet, 0.05) > level(burst, 0.05) + 200
    assert level(wet, 0.05) - level(wet, 0.25) == pytest.approx(60 * 0.2 / rt60, abs=6)


def test_vtlp_warp_is_the_identity_at_alpha_1_and_keeps_the_band():
    f = np.linspace(0, 4000, 129)
    np.testing.assert_allclose(vtlp_warp(f, 1.0, 4000.0), f, atol=1e-9)
    for alpha in (0.9, 1.1):
        g = vtlp_warp(f, alpha, 4000.0)
        assert g[0] == 0 and g[-1] == pytest.approx(4000.0) and np.all(np.diff(g) > 0)
        assert g[10] == pytest.approx(alpha * f[10])  # below the boundary: f -> alpha f


def test_vtlp_moves_energy_between_mel_bins_in_the_direction_of_alpha():
    cfg = audio_cfg()
    features = LogMel(from_dict(AudioEncoderConfig, {**SMALL, "normalize": "none"}, prefix="model.encoder."))
    x = torch.from_numpy(tone(1000.0))[None].repeat(3, 1)
    lengths = torch.full((3,), x.size(1))
    plain, _ = features(x, lengths)
    warped, _ = features(x, lengths, torch.tensor([1.0, 0.9, 1.1]))
    torch.testing.assert_close(warped[0], plain[0], atol=1e-4, rtol=1e-5)  # alpha 1: the same features
    peak = warped.mean(dim=1).argmax(dim=1).tolist()  # the tone's mel bin
    assert peak[1] < peak[0] < peak[2]
    # the mel bin of the warped tone is that of a tone at alpha x 1000 Hz
    for i, hz in ((1, 900.0), (2, 1100.0)):
        at = features(torch.from_numpy(tone(hz))[None], lengths[:1])[0].mean(dim=1).argmax().item()
        assert abs(peak[i] - at) <= 1
    assert cfg.augment == AudioAugmentConfig()


# --------------------------------------------------------------------------------------------
# Each image transform
# --------------------------------------------------------------------------------------------


def stripes(h: int = 32, w: int = 32, channels: int = 3) -> torch.Tensor:
    """uint8 [C, H, W]: dark and light horizontal stripes, red in channel 0."""
    x = np.zeros((channels, h, w), np.uint8)
    x[:, (np.arange(h) // 4) % 2 == 0, :] = 200
    x[:, (np.arange(h) // 4) % 2 == 1, :] = 40
    x[0] = np.minimum(255, x[0].astype(int) + 40)
    return torch.from_numpy(x)


def test_image_brightness_and_contrast_scale_the_mean_and_the_spread():
    x = stripes() // 2  # no pixel above 127: nothing clips
    bright = augment_image(x, ImageAugmentConfig(brightness=0.5), np.random.default_rng(0)).float()
    factor = bright.mean() / x.float().mean()
    assert bright.shape == x.shape and 0.5 <= factor <= 1.5 and abs(factor - 1) > 0.01
    torch.testing.assert_close(bright, (x.float() * factor).round().clamp(0, 255), atol=1.0, rtol=0)
    flat = augment_image(x, ImageAugmentConfig(contrast=0.5), np.random.default_rng(3)).float()
    spread = flat.std() / x.float().std()
    assert flat.mean().item() == pytest.approx(x.float().mean().item(), abs=1.0) and abs(spread - 1) > 0.01


def test_image_crop_zooms_in_and_rotation_tilts():
    x = stripes()
    zoomed = augment_image(x, ImageAugmentConfig(crop_scale=[0.25, 0.25]), np.random.default_rng(0))
    assert zoomed.shape == x.shape and zoomed.dtype == torch.uint8

    def stripe_rows(img: torch.Tensor) -> int:  # rows where the stripe changes (dark <-> light) in column 16
        col = img[1, :, 16].int()
        return int(((col[1:] > 120) != (col[:-1] > 120)).sum())

    assert stripe_rows(zoomed) < stripe_rows(x)  # half the side: half as many stripe edges
    turned = augment_image(x, ImageAugmentConfig(rotate=20.0), np.random.default_rng(0))
    rows_constant = (turned[1].int().max(dim=1).values - turned[1].int().min(dim=1).values < 30).float().mean()
    assert rows_constant < 0.5  # the horizontal stripes are no longer horizontal
    grey = augment_image(stripes(channels=1), ImageAugmentConfig(**ALL_IMAGE), np.random.default_rng(0))
    assert grey.shape == (1, 32, 32)


def test_image_zoom_out_keeps_all_of_the_content():
    """crop_scale above 1: a line of 'ink' running to both side edges of a wide grey image shrinks
    by the zoom and moves, but none of it is cut off: its total darkness over the area factor
    is kept, for every draw."""
    x = torch.full((1, 32, 192), 255, dtype=torch.uint8)
    x[:, 12:20, :] = 0  # a dark band from the left edge to the right edge
    ink = (255 - x.float()).sum()
    for seed in range(10):
        rng = np.random.default_rng(seed)
        out = augment_image(x, ImageAugmentConfig(crop_scale=[1.2, 1.6], crop_ratio=[0.8, 1.25]), rng)
        u = np.random.default_rng(seed).random(7)  # the draws augment_image takes: area, then ratio
        scale, ratio = 1.2 + 0.4 * u[0], math.exp(math.log(0.8) + (math.log(1.25) - math.log(0.8)) * u[1])
        area = max(1.0, math.sqrt(scale * ratio)) * max(1.0, math.sqrt(scale / ratio))  # the window / the image
        border = (255 - int(x.float().mean().round())) * out.numel() * (1 - 1 / area)  # filled with the mean
        kept = (255 - out.float()).sum() - border
        assert area >= 1.2 and kept.item() == pytest.approx(ink.item() / area, rel=0.05)


# --------------------------------------------------------------------------------------------
# Seeding, batch independence, off by default, config
# --------------------------------------------------------------------------------------------


def audio_split(n: int = 6) -> MediaSplit:
    rng = np.random.default_rng(5)
    paths = [f"{i}.wav" for i in range(n)]
    examples = {p: torch.from_numpy(tone_utterance(["low", "high"], rng, RATE)) for p in paths}
    return MediaSplit(paths, ["low high"] * n, [[4, 5]] * n, examples)


def image_split(n: int = 6) -> MediaSplit:
    paths = [f"{i}.png" for i in range(n)]
    examples = {p: torch.roll(stripes(), i, dims=1) for i, p in enumerate(paths)}
    return MediaSplit(paths, ["a b"] * n, [[4, 5]] * n, examples)


def rows_of(src, kind: str) -> list:
    """Per example: (waveform, warp) for audio, the image for images."""
    if kind == "image":
        return list(src)
    waveforms, lengths, warp = src["waveforms"], src["lengths"], src["warp"]
    return [(waveforms[i, : lengths[i]], warp[i].item()) for i in range(len(lengths))]


def same(a, b) -> bool:
    if isinstance(a, tuple):
        return torch.equal(a[0], b[0]) and a[1] == b[1]
    return torch.equal(a, b)


@pytest.mark.parametrize("kind", ["audio", "image"])
def test_draws_depend_on_seed_epoch_and_row_only(kind):
    proc = AudioProcessor(audio_cfg(**ALL_AUDIO)) if kind == "audio" else ImageProcessor(image_cfg(**ALL_IMAGE))
    split = audio_split() if kind == "audio" else image_split()

    def rows(indices, epoch=2, seed=7):
        return rows_of(collate_media(split, proc, indices, epoch=epoch, seed=seed).src, kind)

    full = rows([0, 1, 2, 3, 4, 5])
    assert all(same(a, b) for a, b in zip(full, rows([0, 1, 2, 3, 4, 5])))  # reproducible (a resumed run)
    for i, row in zip([4, 1, 3], rows([4, 1, 3])):  # another batch, another order, the same rows
        assert same(row, full[i])
    assert same(rows([2])[0], full[2])
    assert not any(same(a, b) for a, b in zip(full, rows([0, 1, 2, 3, 4, 5], epoch=3)))  # a new epoch, new draws
    assert not any(same(a, b) for a, b in zip(full, rows([0, 1, 2, 3, 4, 5], seed=8)))
    assert len({round(float(a[1]), 6) if kind == "audio" else a.float().mean().item() for a in full}) == 6
    r = example_rng(7, 2, 3).random(4)
    assert np.array_equal(r, example_rng(7, 2, 3).random(4)) and not np.array_equal(r, example_rng(7, 2, 4).random(4))


def test_one_transform_on_or_off_leaves_the_others_draws():
    x = torch.from_numpy(tone_utterance(["mid"], np.random.default_rng(0), RATE))
    base = AudioAugmentConfig(speed=[0.9, 1.1], vtlp=[0.9, 1.1])
    wave, alpha = augment_waveform(x, base, RATE, example_rng(1, 0, 0))
    louder, alpha2 = augment_waveform(x, AudioAugmentConfig(speed=[0.9, 1.1], vtlp=[0.9, 1.1], gain_prob=1.0), RATE,
                                      example_rng(1, 0, 0))
    assert alpha == alpha2 != 1.0 and wave.numel() == louder.numel() != x.numel()  # the same speed and warp
    loud = wave.abs() > 0.1
    ratio = louder[loud] / wave[loud]
    assert ratio[0] != 1 and torch.allclose(ratio, ratio[0].expand_as(ratio), rtol=1e-4)  # only scaled


@pytest.mark.parametrize("kind", ["audio", "image"])
def test_off_by_default_training_batches_are_bit_identical(kind):
    if kind == "audio":
        cfg = from_dict(AudioEncoderConfig, SMALL, prefix="model.encoder.")  # a saved config without `augment`
        proc, split = AudioProcessor(cfg), audio_split()
    else:
        cfg = from_dict(ImageEncoderConfig, {"image_size": 32, "patch_size": 8}, prefix="model.encoder.")
        proc, split = ImageProcessor(cfg), image_split()
    assert not cfg.augment.active
    plain = collate_media(split, proc, [3, 0, 5])
    trained = collate_media(split, proc, [3, 0, 5], epoch=4, seed=1)
    for a, b in zip(plain.src if kind == "audio" else [plain.src], trained.src if kind == "audio" else [trained.src]):
        assert torch.equal(a, b)
    # identity settings count as off too
    assert not AudioAugmentConfig(speed=[1.0, 1.0], vtlp=[1.0, 1.0]).active and not ImageAugmentConfig().active


def test_config_keys_are_checked_and_named():
    with pytest.raises(ConfigError, match="unknown config key 'model.encoder.augment.sped'. Did you mean "
                                          "'model.encoder.augment.speed'"):
        audio_cfg(sped=[0.9])
    for bad, key in (({"speed": [0.1]}, "speed"), ({"vtlp": [1.1, 0.9]}, "vtlp"), ({"noise_prob": 1.5}, "noise_prob"),
                     ({"noise_colors": ["blue"]}, "noise_colors"), ({"reverb_rt60": [0, 1]}, "reverb_rt60")):
        with pytest.raises(ConfigError, match=f"model.encoder.augment.{key}"):
            audio_cfg(**bad)
    for bad, key in (({"crop_scale": [0.5, 5.0]}, "crop_scale"), ({"crop_scale": [1.2, 1.1]}, "crop_scale"), ({"rotate": -1.0}, "rotate"),
                     ({"brightness": 2.0}, "brightness")):
        with pytest.raises(ConfigError, match=f"model.encoder.augment.{key}"):
            image_cfg(**bad)
    with pytest.raises(ConfigError, match="normalize"):
        from_dict(AudioEncoderConfig, {**SMALL, "normalize": "cmvn"}, prefix="model.encoder.")


# --------------------------------------------------------------------------------------------
# normalize: corpus
# --------------------------------------------------------------------------------------------


def test_corpus_statistics_match_a_direct_computation_and_survive_a_cast():
    cfg = from_dict(ModelConfig, {"d_model": 32, "heads": 4, "ffn_dim": 64, "layers": 1,
                                  "encoder": {**SMALL, "normalize": "corpus", "conv_channels": 8,
                                              "corpus_utterances": 3}})
    enc = AudioEncoder(cfg)
    rng = np.random.default_rng(2)
    waves = [torch.from_numpy(tone_utterance(list(w), rng, RATE)) for w in (["low"], ["mid", "high"], ["high"],
                                                                           ["low", "mid"], ["mid"])]
    enc.fit_statistics(waves)  # 3 of 5, evenly spaced: 0, 2, 4
    frames = np.concatenate([reference_log_mel(waves[i].numpy(), RATE, 256, 200, 80, 40, 0.0, 4000.0)
                             for i in (0, 2, 4)])
    np.testing.assert_allclose(enc.features.corpus_mean.numpy(), frames.mean(axis=0), atol=1e-3)
    np.testing.assert_allclose(enc.features.corpus_std.numpy(), np.sqrt(frames.var(axis=0) + 1e-5), rtol=1e-3)
    feats, _ = enc.features(waves[0][None], torch.tensor([waves[0].numel()]))
    ref = (reference_log_mel(waves[0].numpy(), RATE, 256, 200, 80, 40, 0.0, 4000.0) - frames.mean(axis=0)) \
        / np.sqrt(frames.var(axis=0) + 1e-5)
    np.testing.assert_allclose(feats[0].numpy(), ref, atol=5e-3)
    assert {k for k in enc.state_dict() if "corpus" in k} == {"features.corpus_mean", "features.corpus_std"}
    mean = enc.features.corpus_mean.clone()
    enc.to(torch.bfloat16)  # statistics, like the filterbank, stay exact float32
    assert enc.features.corpus_std.dtype == torch.float32 and torch.equal(enc.features.corpus_mean, mean)
    plain = AudioEncoder(from_dict(ModelConfig, {"d_model": 32, "heads": 4, "ffn_dim": 64, "layers": 1,
                                                 "encoder": SMALL}))
    assert not any("corpus" in k for k in plain.state_dict())  # other settings: the weights as before


# --------------------------------------------------------------------------------------------
# End to end: tiny trainings with augmentation on
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_tones(tmp_path_factory):
    root = tmp_path_factory.mktemp("aug_tones")
    rng = np.random.default_rng(0)
    for split, n in (("train", 24), ("val", 6)):
        rows = ["audio\ttext"]
        (root / split).mkdir()
        for i in range(n):
            words = [str(w) for w in rng.choice(["low", "mid", "high"], size=int(rng.integers(1, 3)))]
            sf.write(root / split / f"{i}.wav", tone_utterance(words, rng, RATE), RATE)
            rows.append(f"{split}/{i}.wav\t{' '.join(words)}")
        (root / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    return root


def audio_run(data, out, max_steps: int, **encoder) -> dict:
    return {
        "data": {"train": str(data / "train.tsv"), "valid": str(data / "val.tsv")},
        "tokenizer": {"joint": False, "vocab_size": 16},
        "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "layers": 1, "dropout": 0.0,
                  "encoder": {**SMALL, "n_mels": 20, "conv_channels": 8, **encoder}},
        "training": {"output_dir": str(out), "max_steps": max_steps, "valid_every": 3, "max_tokens": 150,
                     "lr": 0.003, "warmup_steps": 2, "device": "cpu", "threads": 1, "valid_bleu": False,
                     "best_metric": "loss", "seed": 3},
    }


def train(cfg: dict, tmp_path, resume: bool = False) -> dict:
    from seq2seq.training.experiment import run_training

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return run_training(load_config(path), resume=resume)


def test_audio_training_with_augmentation_and_corpus_cmvn_runs_resumes_exactly_and_saves_the_statistics(
        tiny_tones, tmp_path):
    from seq2seq.storage.model_dir import ModelDir, load_model_dir
    from seq2seq.training.experiment import media_training_data

    encoder = {"normalize": "corpus", "augment": ALL_AUDIO}
    full = audio_run(tiny_tones, tmp_path / "full", 6, **encoder)
    result = train(full, tmp_path)
    assert result["step"] == 6
    data = media_training_data(load_config(tmp_path / "c.yaml"), tmp_path / "full")
    assert len(data.sampler) < 6  # the run went past an epoch boundary: epoch 1 drew anew

    # stopped at step 3 and resumed: the same batches, the same augmentations, the same weights
    part = audio_run(tiny_tones, tmp_path / "part", 3, **encoder)
    assert train(part, tmp_path)["step"] == 3
    part["training"]["max_steps"] = 6
    assert train(part, tmp_path, resume=True)["step"] == 6
    a, b = (ModelDir(tmp_path / name).weights(tmp_path / name / "checkpoints" / "step_6.safetensors")
            for name in ("full", "part"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    # the corpus statistics: a direct computation over the 24 training files, saved with the weights
    model = load_model_dir(tmp_path / "full").model
    frames = np.concatenate([reference_log_mel(sf.read(tiny_tones / "train" / f"{i}.wav", dtype="float32")[0],
                                               RATE, 256, 200, 80, 20, 0.0, 4000.0) for i in range(24)])
    np.testing.assert_allclose(model.encoder.features.corpus_mean.numpy(), frames.mean(axis=0), atol=1e-3)
    np.testing.assert_allclose(model.encoder.features.corpus_std.numpy(), np.sqrt(frames.var(axis=0) + 1e-5),
                               rtol=1e-3)
    assert "model.encoder.features.corpus_mean" not in a and "encoder.features.corpus_mean" in a

    # validation batches are never augmented: the same as with augmentation off
    off = audio_run(tiny_tones, tmp_path / "off", 6, normalize="corpus")
    (tmp_path / "off.yaml").write_text(yaml.safe_dump(off))
    plain = media_training_data(load_config(tmp_path / "off.yaml"), tmp_path / "off")
    for x, y in zip(data.valid.batches, plain.valid.batches):
        assert isinstance(x.src, tuple) and all(torch.equal(u, v) for u, v in zip(x.src, y.src))
    # and the training batches are: the same rows, other waveforms and a VTLP factor per row
    aug, ref = data.collate([0, 1, 2]), plain.collate([0, 1, 2])
    assert isinstance(aug.src, dict) and torch.equal(aug.tgt_out, ref.tgt_out)


def test_image_training_with_augmentation_runs(tmp_path):
    rng = np.random.default_rng(0)
    rows = ["image\tcaption"]
    for i in range(12):
        colour = ["red", "blue"][i % 2]
        pixels = np.full((40, 40, 3), 230, np.uint8)
        pixels[10:30, 10:30] = (200, 30, 30) if colour == "red" else (30, 30, 200)
        pixels = np.clip(pixels + rng.integers(0, 10, pixels.shape), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(tmp_path / f"{i}.png")
        rows.append(f"{i}.png\ta {colour} square")
    (tmp_path / "t.tsv").write_text("\n".join(rows) + "\n")
    cfg = {"data": {"train": str(tmp_path / "t.tsv"), "valid": str(tmp_path / "t.tsv")},
           "tokenizer": {"vocab_size": 24},
           "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "layers": 1,
                     "encoder": {"type": "image", "image_size": 32, "patch_size": 8, "augment": ALL_IMAGE}},
           "training": {"output_dir": str(tmp_path / "m"), "max_steps": 3, "valid_every": 3, "max_tokens": 64,
                        "device": "cpu", "threads": 1, "valid_bleu": False, "best_metric": "loss"}}
    result = train(cfg, tmp_path)
    assert result["step"] == 3 and math.isfinite(result["last"]["valid_loss"])
    saved = yaml.safe_load((tmp_path / "m" / "config.yaml").read_text())["model"]["encoder"]["augment"]
    assert saved == {**ImageAugmentConfig().__dict__, **ALL_IMAGE}
