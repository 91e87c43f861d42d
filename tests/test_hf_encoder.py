"""Hugging Face backbones as encoders (`model.encoder.type: hf`, seq2seq/model/encoders/hf.py).

No weights can be downloaded here, so every backbone is a tiny random one built from a transformers
config (2 layers, width 24) and saved with its image processor / feature extractor by `save_pretrained`,
as a hub checkpoint is: ViT, DeiT, CLIP vision, wav2vec2 (layer-norm and group-norm feature encoders),
HuBERT and a Whisper encoder with a 1 s window. The tests read them through `name_or_path`, train a few
steps through `seq2seq train` / `run_training`, then caption / transcribe / export from the model
directory after the backbone's directory is deleted.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
import yaml
from click.testing import CliRunner
from PIL import Image
from safetensors.torch import load_file

transformers = pytest.importorskip("transformers", reason="the hf extra: pip install -e '.[hf]'")

from seq2seq.cli import cli
from seq2seq.config import ConfigError, ModelConfig, from_dict, load_config, to_dict
from seq2seq.config.root import Config, config_yaml
from seq2seq.inference.generator import Captioner
from seq2seq.model.encoders import SourceError, get_modality
from seq2seq.model.encoders.base import resolve_encoder_config, source_kind
from seq2seq.model.encoders.sources import AUDIO, IMAGE
from seq2seq.model.encoders.hf import HFEncoder, HFEncoderConfig
from seq2seq.model.transformer import Seq2SeqTransformer
from seq2seq.storage.model_dir import load_model_dir
from seq2seq.training.experiment import run_training

transformers.logging.set_verbosity_error()
transformers.logging.disable_progress_bar()
pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")  # MarianTokenizer's

TINY = {"hidden_size": 24, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 48}
CONV = {"conv_dim": (16, 16, 16), "conv_stride": (5, 4, 4), "conv_kernel": (10, 8, 4), "num_conv_pos_embeddings": 16,
        "num_conv_pos_embedding_groups": 2}  # 80x downsampling: 200 positions per second at 16 kHz


def pil(name: str):
    """transformers' PIL-backend image processor class (the plain name in versions without backends)."""
    return getattr(transformers, f"{name}Pil", None) or getattr(transformers, name)


def save_backbone(kind: str, path: Path) -> Path:
    """A tiny random backbone of `kind` and its preprocessor, saved as a hub checkpoint is."""
    t = transformers
    torch.manual_seed(0)
    if kind in ("vit", "deit"):
        cls, config = (t.ViTModel, t.ViTConfig) if kind == "vit" else (t.DeiTModel, t.DeiTConfig)
        model = cls(config(**TINY, image_size=32, patch_size=8))
        processor = pil("ViTImageProcessor" if kind == "vit" else "DeiTImageProcessor")(
            size={"height": 32 if kind == "vit" else 36, "width": 32 if kind == "vit" else 36},
            crop_size={"height": 32, "width": 32}, do_center_crop=kind == "deit")
    elif kind == "clip":
        model = t.CLIPVisionModel(t.CLIPVisionConfig(**TINY, image_size=32, patch_size=8))
        processor = pil("CLIPImageProcessor")(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    elif kind in ("wav2vec2", "wav2vec2-group"):
        layer = kind == "wav2vec2"
        model = t.Wav2Vec2Model(t.Wav2Vec2Config(**TINY, **CONV, feat_extract_norm="layer" if layer else "group",
                                                 do_stable_layer_norm=layer))
        processor = t.Wav2Vec2FeatureExtractor(sampling_rate=16000, do_normalize=True, return_attention_mask=layer)
    elif kind == "hubert":
        model = t.HubertModel(t.HubertConfig(**TINY, **CONV))
        processor = t.Wav2Vec2FeatureExtractor(sampling_rate=16000, do_normalize=False)
    elif kind == "whisper":
        model = t.WhisperModel(t.WhisperConfig(
            d_model=24, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=48, decoder_layers=1,
            decoder_attention_heads=2, decoder_ffn_dim=48, num_mel_bins=16, max_source_positions=50, vocab_size=64,
            pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1))
        processor = t.WhisperFeatureExtractor(feature_size=16, sampling_rate=16000, hop_length=160, chunk_length=1,
                                              n_fft=400)
    else:
        raise ValueError(kind)
    model.save_pretrained(str(path))
    processor.save_pretrained(str(path))
    return path


KINDS = ["vit", "deit", "clip", "wav2vec2", "wav2vec2-group", "hubert", "whisper"]
IMAGE_KINDS = ["vit", "deit", "clip"]


@pytest.fixture(scope="module")
def backbones(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("backbones")
    return {kind: save_backbone(kind, root / kind) for kind in KINDS}


# ---- data: colour names for images, tone words for audio ----------------------------------------

COLOURS = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (30, 40, 220)}
TONES = {"low": 300.0, "mid": 900.0, "high": 2000.0}


def colour_image(name: str, rng: np.random.Generator) -> Image.Image:
    """A noisy field of one colour, of a random size and aspect ratio."""
    h, w = int(rng.integers(24, 60)), int(rng.integers(24, 60))
    pixels = np.asarray(COLOURS[name], dtype=np.float64) + rng.normal(0, 20, (h, w, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def tone_utterance(words: list[str], rng: np.random.Generator, rate: int = 16000) -> np.ndarray:
    parts = [np.zeros(int(rng.uniform(0.01, 0.05) * rate))]
    for w in words:
        t = np.arange(int(0.12 * rate)) / rate
        parts += [0.5 * np.sin(2 * np.pi * TONES[w] * t + rng.uniform(0, 6)), np.zeros(int(rng.uniform(0.03, 0.06) * rate))]
    x = np.concatenate(parts)
    return (x + 0.01 * rng.standard_normal(len(x))).astype(np.float32)


@pytest.fixture(scope="module")
def image_data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("colours")
    rng = np.random.default_rng(0)
    for split, n in (("train", 48), ("val", 6)):
        rows = ["image\tcaption"]
        (root / split).mkdir()
        for i in range(n):
            name = list(COLOURS)[i % 3]
            colour_image(name, rng).save(root / split / f"{i}.png")
            rows.append(f"{split}/{i}.png\t{name}")
        (root / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    return root


@pytest.fixture(scope="module")
def audio_data(tmp_path_factory) -> Path:
    """1-3 tone words per file (< 0.6 s, inside the tiny Whisper's 1 s window), some at 8 kHz (resampled)."""
    root = tmp_path_factory.mktemp("tones")
    rng = np.random.default_rng(1)
    for split, n in (("train", 40), ("val", 6)):
        rows = ["audio\ttext"]
        (root / split).mkdir()
        for i in range(n):
            words = [str(w) for w in rng.choice(list(TONES), size=int(rng.integers(1, 4)))]
            rate = 8000 if i % 5 == 0 else 16000
            sf.write(root / split / f"{i}.wav", tone_utterance(words, rng, rate), rate)
            rows.append(f"{split}/{i}.wav\t{' '.join(words)}")
        (root / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    return root


def files(data: Path, split: str = "val") -> list[str]:
    return [str(data / line.split("\t")[0]) for line in (data / f"{split}.tsv").read_text().splitlines()[1:]]


def model_cfg(path: Path, **encoder) -> ModelConfig:
    """The model config naming the backbone at `path`, resolved as a run resolves it when it starts."""
    cfg = from_dict(ModelConfig, {"d_model": 32, "heads": 2, "ffn_dim": 64, "layers": 1, "tgt_vocab_size": 20,
                                  "encoder": {"type": "hf", "name_or_path": str(path), **encoder}})
    return dataclasses.replace(cfg, encoder=resolve_encoder_config(cfg.encoder))


def train_config(data: Path, backbone: Path, out: Path, steps: int = 30, **overrides) -> dict:
    image = (data / "train.tsv").read_text().startswith("image")
    cfg = {
        "data": {"train": str(data / "train.tsv"), "valid": str(data / "val.tsv")},
        "tokenizer": {"vocab_size": 16 if image else 18},
        "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "layers": 1, "dropout": 0.0,
                  "encoder": {"type": "hf", "name_or_path": str(backbone)}},
        "training": {"output_dir": str(out), "max_steps": steps, "valid_every": steps, "max_tokens": 600,
                     "lr": 0.003, "warmup_steps": 5, "device": "cpu", "threads": 1, "log_every": 10,
                     "best_metric": "loss", "valid_bleu": False},
        "decoding": {"max_len_a": 0.0, "max_len_b": 6},
    }
    for dotted, value in overrides.items():
        *parents, leaf = dotted.split(".")
        node = cfg
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return cfg


def train(data: Path, backbone: Path, out: Path, steps: int = 30, **overrides) -> Path:
    """Train through `run_training` with the config as `seq2seq train` reads it; returns the model directory."""
    config = out.parent / f"{out.name}.yaml"
    config.write_text(yaml.safe_dump(train_config(data, backbone, out, steps, **overrides)))
    run_training(load_config(config))
    return out


def copy_backbone(backbones: dict[str, Path], kind: str, tmp_path: Path) -> Path:
    """A copy of a backbone directory that the test may delete."""
    return Path(shutil.copytree(backbones[kind], tmp_path / f"backbone-{kind}"))


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------


def test_config_reads_the_backbone_and_its_preprocessing_once(backbones, tmp_path):
    unresolved = from_dict(ModelConfig, {"encoder": {"type": "hf", "name_or_path": str(tmp_path / "nowhere")}})
    assert unresolved.encoder.backbone == {}  # parsing a config reads nothing: a run resolves it when it starts
    cfg = model_cfg(backbones["clip"]).encoder
    assert isinstance(cfg, HFEncoderConfig) and source_kind(cfg) is IMAGE
    assert cfg.backbone["model_type"] == "clip_vision_model" and cfg.backbone["hidden_size"] == 24
    assert cfg.preprocessor["crop_size"] == {"height": 32, "width": 32} and cfg.preprocessor["resample"] == 3
    # config.yaml keeps both: read back without the backbone's directory, it is the same config
    text = config_yaml(Config(model=model_cfg(copy_backbone(backbones, "clip", tmp_path))))
    shutil.rmtree(tmp_path / "backbone-clip")
    again = from_dict(Config, yaml.safe_load(text))
    assert to_dict(again.model.encoder) == to_dict(cfg) | {"name_or_path": str(tmp_path / "backbone-clip")}
    assert "_name_or_path" not in cfg.backbone  # a path, not part of the architecture
    assert source_kind(model_cfg(backbones["whisper"]).encoder) is AUDIO


def test_config_errors_are_one_line_naming_the_key(backbones, tmp_path):
    with pytest.raises(ConfigError, match="model.encoder.name_or_path .*cannot read the backbone's config"):
        model_cfg(tmp_path / "nowhere")
    no_processor = Path(shutil.copytree(backbones["vit"], tmp_path / "vit"))
    (no_processor / "preprocessor_config.json").unlink()
    with pytest.raises(ConfigError, match="image processor settings .*save_pretrained"):
        model_cfg(no_processor)
    with pytest.raises(ConfigError, match="unfreeze_top_layers .* need model.encoder.freeze: true"):
        model_cfg(backbones["vit"], unfreeze_top_layers=1)
    with pytest.raises(ConfigError, match="model_type 'bert' are not supported; supported: clip_vision_model, deit"):
        from_dict(HFEncoderConfig, {"backbone": {"model_type": "bert"}, "preprocessor": {"x": 1}})
    with pytest.raises(ConfigError, match="name_or_path is not set"):
        Seq2SeqTransformer(from_dict(ModelConfig, {"encoder": {"type": "hf"}}))


def test_without_transformers_the_key_names_the_extra(backbones, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` raises ImportError
    with pytest.raises(ConfigError) as error:
        model_cfg(backbones["vit"])
    message = str(error.value)
    assert "pip install \"seq2seq[hf]\"" in message and "model.encoder.type hf" in message
    assert len(message.splitlines()) == 1
    from_dict(ModelConfig, {"encoder": {"type": "hf"}})  # an unfilled section parses (e.g. a default to merge)


# --------------------------------------------------------------------------------------------
# Preprocessing and encoders
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", IMAGE_KINDS)
def test_images_get_exactly_the_pixels_of_the_transformers_processor(backbones, image_data, kind):
    enc = model_cfg(backbones[kind]).encoder
    ours = get_modality("hf").processor(enc)
    reference = transformers.AutoImageProcessor.from_pretrained(str(backbones[kind]), backend="pil")
    paths = files(image_data)[:3]
    examples = [ours.load(p) for p in paths]
    assert all(x.dtype == torch.uint8 and x.shape == (3, 32, 32) for x in examples)
    theirs = reference(images=[Image.open(p).convert("RGB") for p in paths], return_tensors="pt").pixel_values
    assert torch.equal(ours.collate(examples), theirs)


def test_images_over_max_pixels_are_refused_before_decoding_as_by_our_image_encoder(backbones, tmp_path):
    Image.new("RGB", (40, 30)).save(tmp_path / "big.png")  # 1,200 pixels
    path = str(tmp_path / "big.png")
    assert model_cfg(backbones["vit"]).encoder.max_pixels == 40_000_000  # the image encoder's default
    with pytest.raises(SourceError, match=r"has 40x30 pixels .* more than model.encoder.max_pixels=1199"):
        get_modality("hf").processor(model_cfg(backbones["vit"], max_pixels=1199).encoder).load(path)
    assert get_modality("hf").processor(model_cfg(backbones["vit"], max_pixels=1200).encoder).load(path).shape == \
        (3, 32, 32)
    with pytest.raises(ConfigError, match="model.encoder.max_pixels must be positive"):
        model_cfg(backbones["vit"], max_pixels=0)


def test_audio_gets_the_samples_and_features_of_the_transformers_extractor(backbones, audio_data):
    path = files(audio_data, "train")[1]  # 16 kHz
    wave, _ = sf.read(path, dtype="float32")
    w2v = get_modality("hf").processor(model_cfg(backbones["wav2vec2"]).encoder)
    extractor = transformers.AutoFeatureExtractor.from_pretrained(str(backbones["wav2vec2"]))
    expected = extractor(wave, sampling_rate=16000, return_tensors="pt").input_values[0]
    waveforms, lengths = w2v.collate([w2v.load(path)])  # normalised per example, as the extractor does
    torch.testing.assert_close(waveforms[0], expected, atol=1e-6, rtol=0)
    assert lengths.tolist() == [len(wave)]
    whisper = get_modality("hf").processor(model_cfg(backbones["whisper"]).encoder)
    features, frames = whisper.collate([whisper.load(path)])
    reference = transformers.AutoFeatureExtractor.from_pretrained(str(backbones["whisper"]))
    torch.testing.assert_close(features, reference(wave, sampling_rate=16000, return_tensors="pt").input_features)
    assert features.shape == (1, 16, 100) and frames.tolist() == [-(-len(wave) // 160)]


def test_audio_files_the_backbone_cannot_read_are_named(backbones, tmp_path):
    whisper = get_modality("hf").processor(model_cfg(backbones["whisper"]).encoder)
    sf.write(tmp_path / "long.wav", np.zeros(20000, dtype=np.float32), 16000)
    with pytest.raises(SourceError, match=r"long.wav lasts 1.2 s, more than the backbone's 1 s window"):
        whisper.load(str(tmp_path / "long.wav"))
    w2v = get_modality("hf").processor(model_cfg(backbones["wav2vec2"]).encoder)
    sf.write(tmp_path / "short.wav", np.zeros(100, dtype=np.float32), 16000)
    with pytest.raises(SourceError, match="short.wav is too short: 100 samples, the backbone needs 105"):
        w2v.load(str(tmp_path / "short.wav"))
    assert w2v.length(torch.zeros(105)) == 1 and w2v.length(torch.zeros(104)) == 0  # the receptive field


def expected_positions(kind: str, model: Seq2SeqTransformer, example: torch.Tensor) -> int:
    if kind in IMAGE_KINDS:
        return 16 + (2 if kind == "deit" else 1)  # patches + class token(s)
    if kind == "whisper":
        return math.ceil(math.ceil(example.numel() / 160) / 2)  # ceil(ceil(samples / hop) / 2)
    return int(model.encoder.backbone._get_feat_extract_output_lengths(torch.tensor(example.numel())))


@pytest.mark.parametrize("kind", KINDS)
def test_encoders_are_batch_invariant_with_exact_masks(backbones, image_data, audio_data, kind):
    """Each source encoded inside a padded batch gives the rows it gives alone, and exactly its real
    positions are unmasked (wav2vec2-group / HuBERT run one utterance at a time, the others batched)."""
    cfg = model_cfg(backbones[kind])
    model = Seq2SeqTransformer(cfg, get_modality("hf").pretrained(cfg)).eval()
    processor = get_modality("hf").processor(cfg.encoder)
    paths = files(image_data if kind in IMAGE_KINDS else audio_data, "train")[:5]
    examples = [processor.load(p) for p in paths]
    with torch.inference_mode():
        memory, mask = model.encode(processor.collate(examples))
        for i, example in enumerate(examples):
            n = expected_positions(kind, model, example)
            assert (~mask[i]).sum() == n and not mask[i, :n].any()
            assert processor.length(example) == (n if kind != "whisper" else 50)  # Whisper computes its whole window
            alone, alone_mask = model.encode(processor.collate([example]))
            assert (~alone_mask[0]).sum() == n
            torch.testing.assert_close(alone[0, :n], memory[i, :n], atol=1e-5, rtol=1e-5)
            assert not memory[i, n:].any()  # padded rows are zero


def test_a_wider_decoder_gets_the_projection_and_the_backbone_keeps_its_weights(backbones):
    cfg = model_cfg(backbones["vit"])
    reference = transformers.ViTModel.from_pretrained(str(backbones["vit"]), add_pooling_layer=False).state_dict()
    model = Seq2SeqTransformer(cfg, get_modality("hf").pretrained(cfg))
    assert model.encoder.d_model == 24 and model.enc_to_dec_proj.in_features == 24
    assert model.enc_to_dec_proj.out_features == 32
    for name, value in model.encoder.backbone.state_dict().items():
        assert torch.equal(value, reference[name]), name
    assert all(not n.startswith("encoder.backbone.pooler") for n in model.state_dict())  # no unused pooler


# --------------------------------------------------------------------------------------------
# Train, then caption / transcribe / export from the model directory alone
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def caption_model(backbones, image_data, tmp_path_factory) -> tuple[Path, Path]:
    """(model dir, its backbone dir) trained by `seq2seq train` on a copy of the ViT backbone."""
    root = tmp_path_factory.mktemp("caption_model")
    backbone = Path(shutil.copytree(backbones["vit"], root / "vit"))
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump(train_config(image_data, backbone, root / "model", steps=40)))
    result = CliRunner().invoke(cli, ["train", str(config)])
    assert result.exit_code == 0, result.output
    return root / "model", backbone


def test_train_then_caption_offline_from_the_model_directory(caption_model, image_data):
    from seq2seq.inference.generator import Captioner
    from seq2seq.inference.generator import load_engine

    model_dir, backbone = caption_model
    paths = files(image_data)
    runner = CliRunner()
    before = runner.invoke(cli, ["caption", str(model_dir), *paths])
    assert before.exit_code == 0, before.output
    shutil.rmtree(backbone)  # the model directory must not need it any more
    after = runner.invoke(cli, ["caption", str(model_dir), *paths])
    assert after.exit_code == 0, after.output
    assert after.output == before.output
    refs = [line.split("\t")[1] for line in (image_data / "val.tsv").read_text().splitlines()[1:]]
    assert sum(h == r for h, r in zip(after.output.splitlines(), refs)) >= 4, (after.output, refs)  # it learned
    captioner = Captioner.load(model_dir, device="cpu")
    assert captioner.caption(paths) == [captioner.caption([p])[0] for p in paths]  # batch invariance
    assert load_engine(model_dir, device="cpu").translate(paths) == after.output.splitlines()  # what serve runs
    assert not list(model_dir.glob("*.bin")) and not list(model_dir.glob("*.pt"))  # pickle-free (train_state aside)
    saved = yaml.safe_load((model_dir / "config.yaml").read_text())["model"]["encoder"]
    assert saved["backbone"]["model_type"] == "vit" and saved["preprocessor"]["size"] == {"height": 32, "width": 32}
    result = runner.invoke(cli, ["transcribe", str(model_dir), paths[0]])
    assert result.exit_code == 1 and "a model for image sources" in result.output


def test_a_backbone_given_by_its_config_alone_trains_from_scratch(backbones, image_data, tmp_path, caplog):
    """Without name_or_path, model.encoder.backbone / preprocessor (as the recipes' config_hf.yaml give
    them) describe an architecture: a fresh run initialises it randomly, trains it, and the model
    directory keeps it like a pretrained one."""
    cfg = model_cfg(backbones["vit"]).encoder
    out = tmp_path / "model"
    config = train_config(image_data, backbones["vit"], out, steps=3)
    config["model"]["encoder"] = {"type": "hf", "name_or_path": None, "backbone": cfg.backbone,
                                  "preprocessor": cfg.preprocessor}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    with caplog.at_level(logging.INFO, logger="seq2seq"):
        run_training(load_config(tmp_path / "c.yaml"))
    assert "randomly initialised" in caplog.text
    saved = load_file(str(out / "model.safetensors"))
    pretrained = transformers.ViTModel.from_pretrained(str(backbones["vit"])).state_dict()
    ours = {k.split("backbone.", 1)[1]: v for k, v in saved.items() if "backbone." in k}
    name = "layers.0.attention.q_proj.weight"
    assert name in ours and not torch.allclose(ours[name], pretrained[name], atol=1e-2)  # not the checkpoint's
    assert Captioner.load(out, device="cpu").caption(files(image_data)[:2])  # loads and reads images


def test_export_to_a_vision_encoder_decoder_with_the_same_outputs(caption_model, image_data, tmp_path):
    model_dir, _ = caption_model
    result = CliRunner().invoke(cli, ["export", str(model_dir), "--to", "hf", str(tmp_path / "hf")])
    assert result.exit_code == 0, result.output
    hf = transformers.VisionEncoderDecoderModel.from_pretrained(str(tmp_path / "hf")).eval()
    assert type(hf.decoder).__name__ == "BlenderbotForCausalLM"  # pre-norm
    processor = transformers.AutoImageProcessor.from_pretrained(str(tmp_path / "hf"), backend="pil")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    loaded = load_model_dir(model_dir)
    paths = files(image_data)
    pixels = processor(images=[Image.open(p).convert("RGB") for p in paths], return_tensors="pt").pixel_values
    tgt = torch.tensor([[2, 5, 6, 7]] * len(paths))
    with torch.no_grad():
        torch.testing.assert_close(hf(pixel_values=pixels, decoder_input_ids=tgt).logits, loaded.model(pixels, tgt),
                                   atol=1e-4, rtol=1e-4)
        # greedy: beam search ranks lengths differently in transformers (see deploy.hf.generation_config)
        generated = hf.generate(pixel_values=pixels, num_beams=1, max_new_tokens=6)[:, 1:]  # after BOS
    from seq2seq.inference.generator import Captioner

    ours = Captioner(loaded).caption(paths, greedy=True, max_len_a=0, max_len_b=6)
    assert tokenizer.batch_decode(generated, skip_special_tokens=True) == ours


def test_whisper_and_hubert_train_and_transcribe_offline(backbones, audio_data, tmp_path):
    from seq2seq.inference.generator import Transcriber

    paths = files(audio_data)
    for kind in ("whisper", "hubert"):
        backbone = copy_backbone(backbones, kind, tmp_path)
        model_dir = train(audio_data, backbone, tmp_path / f"model-{kind}", steps=10)
        before = Transcriber.load(model_dir).transcribe(paths)
        shutil.rmtree(backbone)
        transcriber = Transcriber.load(model_dir)
        assert transcriber.transcribe(paths) == before
        assert transcriber.transcribe(paths) == [transcriber.transcribe([p])[0] for p in paths]
    result = CliRunner().invoke(cli, ["export", str(model_dir.parent / "model-whisper"), "--to", "hf",
                                      str(tmp_path / "hf")])
    assert result.exit_code == 1 and "Whisper backbone" in result.output and not (tmp_path / "hf").exists()


def test_wav2vec2_exports_to_a_speech_encoder_decoder_with_the_same_outputs(backbones, audio_data, tmp_path):
    from seq2seq.deploy.hf_encoder_decoder import export_encoder_decoder
    from seq2seq.inference.generator import Transcriber

    model_dir = train(audio_data, backbones["wav2vec2"], tmp_path / "model", steps=10, **{"model.norm": "post"})
    export_encoder_decoder(model_dir, tmp_path / "hf")
    hf = transformers.SpeechEncoderDecoderModel.from_pretrained(str(tmp_path / "hf")).eval()
    assert type(hf.decoder).__name__ == "MarianForCausalLM"
    loaded = load_model_dir(model_dir)
    transcriber = Transcriber(loaded)
    paths = files(audio_data)
    waves, lengths = transcriber.processor.collate([transcriber.processor.load(p) for p in paths])
    mask = (torch.arange(waves.size(1))[None] < lengths[:, None]).long()
    tgt = torch.tensor([[2, 5, 6, 7]] * len(paths))
    with torch.no_grad():
        torch.testing.assert_close(hf(input_values=waves, attention_mask=mask, decoder_input_ids=tgt).logits,
                                   loaded.model((waves, lengths), tgt), atol=1e-4, rtol=1e-4)
        generated = hf.generate(input_values=waves, attention_mask=mask, num_beams=1, max_new_tokens=6)[:, 1:]
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    ours = transcriber.transcribe(paths, greedy=True, max_len_a=0, max_len_b=6)
    assert tokenizer.batch_decode(generated, skip_special_tokens=True) == ours


# --------------------------------------------------------------------------------------------
# Freezing, learning rates, fine-tuning
# --------------------------------------------------------------------------------------------


def weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return load_model_dir(model_dir).model.state_dict()


def changed(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], prefix: str) -> set[str]:
    return {k for k in a if k.startswith(prefix) and not torch.equal(a[k], b[k])}


def test_freeze_options_decide_which_backbone_weights_train(backbones, image_data, tmp_path, caplog):
    start = {f"encoder.backbone.{k}": v for k, v in
             transformers.ViTModel.from_pretrained(str(backbones["vit"]), add_pooling_layer=False).state_dict().items()}
    backbone_keys = set(start)
    top = {k for k in backbone_keys if k.startswith("encoder.backbone.layers.1.") or ".layernorm." in k}

    with caplog.at_level(logging.INFO, logger="seq2seq.training.experiment"):
        frozen = weights(train(image_data, backbones["vit"], tmp_path / "frozen", steps=4,
                               **{"model.encoder.freeze": True}))
    assert not changed(start, frozen, "encoder.")
    assert "trainable, 14,856 frozen)" in caplog.text  # the backbone's 14,856; the decoder and projection train

    partly = weights(train(image_data, backbones["vit"], tmp_path / "top", steps=4,
                           **{"model.encoder.freeze": True, "model.encoder.unfreeze_top_layers": 1}))
    assert changed(start, partly, "encoder.") == top

    later = weights(train(image_data, backbones["vit"], tmp_path / "later", steps=4,
                          **{"model.encoder.freeze": True, "model.encoder.unfreeze_after_steps": 2}))
    assert changed(start, later, "encoder.") == backbone_keys


def test_encoder_lr_is_the_backbones_learning_rate(backbones):
    from seq2seq.config import TrainingConfig
    from seq2seq.training.optim import build_optimizer

    cfg = model_cfg(backbones["vit"], freeze=True)
    model = Seq2SeqTransformer(cfg, get_modality("hf").pretrained(cfg))
    assert isinstance(model.encoder, HFEncoder) and model.encoder.frozen
    optimizer = build_optimizer(model, TrainingConfig(lr=1e-3, encoder_lr=1e-5))
    ids = {id(p) for p in model.encoder.parameters()}
    lrs = [(g["lr"], {id(p) in ids for p in g["params"]}) for g in optimizer.param_groups]
    assert lrs == [(1e-3, {False}), (1e-3, {False}), (1e-5, {True}), (1e-5, {True})]
    assert sum(len(g["params"]) for g in optimizer.param_groups) == len(list(model.parameters()))  # frozen ones too
    assert len(build_optimizer(model, TrainingConfig(lr=1e-3)).param_groups) == 2  # unset: as before


def test_fine_tuning_needs_only_the_model_directory(caption_model, image_data, tmp_path):
    model_dir, _ = caption_model  # its backbone directory may be gone: the parent holds everything
    cfg = load_config(None, [f"data.train={image_data / 'train.tsv'}", f"training.output_dir={tmp_path / 'child'}",
                             "training.max_steps=3", "training.valid_every=3", "training.device=cpu",
                             "training.valid_bleu=false", "training.best_metric=loss", "model.encoder.type=hf",
                             "model.encoder.freeze=true", "training.encoder_lr=0.0001"])
    run_training(cfg, init_from=model_dir)
    parent, child = weights(model_dir), weights(tmp_path / "child")
    assert not changed(parent, child, "encoder.") and changed(parent, child, "decoder.")
    assert load_config(tmp_path / "child" / "config.yaml").model.encoder.freeze
