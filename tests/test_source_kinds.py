"""The processor contract, for every kind of source the registry knows (seq2seq/model/encoders/sources.py).

Each registered encoder type has example configs here (`EXAMPLES`, Hugging Face backbones included);
a type without one fails `test_every_registered_encoder_type_has_examples`, so a new kind cannot skip
the tests below. Each example trains a tiny model for a few steps (its quality does not matter), and
the tests check what follows from its kind, through the consumers a user meets:

* the server's --max-pixels / --max-audio-seconds refuse a file from its header (413), by upload and
  by `paths`, before anything is decoded;
* `transcribe` splits a long recording into windows, with --timestamps segments, for every audio
  model; each window's text is the text of that window decoded alone;
* the kind decides the command that decodes a model, and the others refuse it naming that one.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml
from click.testing import CliRunner

pytest.importorskip("fastapi", reason="the serve extra: pip install -e '.[serve]'")
transformers = pytest.importorskip("transformers", reason="the hf extra: pip install -e '.[hf]'")

from seq2seq.cli import cli  # noqa: E402
from seq2seq.config.encoder_section import encoder_types  # noqa: E402
from seq2seq.inference.generator import Captioner, Generator, Transcriber  # noqa: E402
from seq2seq.inference.translator import Translator  # noqa: E402
from seq2seq.model.encoders.base import source_kind  # noqa: E402
from seq2seq.model.encoders.sources import AUDIO, IMAGE, TEXT, SourceError  # noqa: E402
from seq2seq.inference.generator import load_engine  # noqa: E402
from seq2seq.serve.app import create_app  # noqa: E402
from seq2seq.serve.requests import Limits, RequestError, check_source_size  # noqa: E402
from test_hf_encoder import TONES, colour_image, save_backbone, tone_utterance  # noqa: E402
from test_serve import call, png_header, serving  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recipes" / "custom_encoder"))
import bigru  # noqa: E402, F401 - registers model.encoder.type "bigru": a plugin's encoder that reads sentences

RATE = 16000
NATIVE_AUDIO = {"type": "audio", "sample_rate": RATE, "n_fft": 400, "win_length": 400, "hop_length": 160, "n_mels": 20,
                "conv_channels": 8, "freq_masks": 0, "time_masks": 0}
# encoder type -> {example name: (the data it trains on, its model.encoder)}; "backbone:KIND" names a tiny
# Hugging Face backbone built in the test
EXAMPLES = {
    "text": {"text": ("text", {"type": "text"})},
    "bigru": {"bigru": ("text", {"type": "bigru", "hidden": 16})},
    "image": {"image": ("image", {"type": "image", "image_size": 32, "patch_size": 8})},
    "audio": {"audio": ("audio", NATIVE_AUDIO), "audio-max-seconds": ("audio", {**NATIVE_AUDIO, "max_seconds": 1.0})},
    "hf": {"hf-vit": ("image", {"type": "hf", "name_or_path": "backbone:vit"}),
           "hf-wav2vec2": ("audio", {"type": "hf", "name_or_path": "backbone:wav2vec2"}),
           "hf-whisper": ("audio", {"type": "hf", "name_or_path": "backbone:whisper"})},
}
DATA = {name: data for examples in EXAMPLES.values() for name, (data, _) in examples.items()}
ENCODERS = {name: encoder for examples in EXAMPLES.values() for name, (_, encoder) in examples.items()}
ALL = list(ENCODERS)
FILE_EXAMPLES = [name for name in ALL if DATA[name] != "text"]
AUDIO_EXAMPLES = [name for name in ALL if DATA[name] == "audio"]


def test_every_registered_encoder_type_has_examples():
    missing = set(encoder_types()) - set(EXAMPLES)
    assert not missing, f"encoder types without an example in {__file__}: {sorted(missing)}"


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """Colour images, tone-word recordings (< 1 s: inside the tiny Whisper's window) and sentences."""
    root = tmp_path_factory.mktemp("kinds")
    rng = np.random.default_rng(0)
    rows = {"image": ["image\tcaption"], "audio": ["audio\ttext"]}
    (root / "img").mkdir()
    (root / "wav").mkdir()
    for i in range(12):
        colour = ["red", "green", "blue"][i % 3]
        colour_image(colour, rng).save(root / "img" / f"{i}.png")
        rows["image"].append(f"img/{i}.png\t{colour}")
        words = [str(w) for w in rng.choice(list(TONES), size=int(rng.integers(1, 4)))]
        sf.write(root / "wav" / f"{i}.wav", tone_utterance(words, rng, RATE), RATE)
        rows["audio"].append(f"wav/{i}.wav\t{' '.join(words)}")
    for kind, lines in rows.items():
        (root / f"{kind}.tsv").write_text("\n".join(lines) + "\n")
    (root / "src.txt").write_text("".join(f"a {c} dog\n" for c in ("red", "green", "blue") * 4))
    (root / "tgt.txt").write_text("".join(f"ein {c} hund\n" for c in ("rot", "gruen", "blau") * 4))
    return root


@pytest.fixture(scope="module")
def models(data, tmp_path_factory):
    """example name -> its model directory, trained on first use (a few steps)."""
    root = tmp_path_factory.mktemp("kind_models")
    made: dict[str, Path] = {}

    def model(name: str) -> Path:
        if name not in made:
            encoder = dict(ENCODERS[name])
            if str(encoder.get("name_or_path", "")).startswith("backbone:"):
                kind = encoder["name_or_path"].split(":")[1]
                encoder["name_or_path"] = str(save_backbone(kind, root / f"backbone-{kind}"))
            table = DATA[name]
            sources = ({"train_src": str(data / "src.txt"), "train_tgt": str(data / "tgt.txt")} if table == "text" else
                       {"train": str(data / f"{table}.tsv"), "valid": str(data / f"{table}.tsv")})
            cfg = {"data": sources, "tokenizer": {"vocab_size": 24},
                   "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "layers": 1, "encoder": encoder},
                   "training": {"output_dir": str(root / name), "max_steps": 3, "max_tokens": 400, "device": "cpu",
                                "threads": 1, "valid_bleu": False, "best_metric": "loss", "valid_every": 3},
                   "decoding": {"beam": 2, "max_len_a": 0.0, "max_len_b": 4}}
            (root / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
            result = CliRunner().invoke(cli, ["train", str(root / f"{name}.yaml")])
            assert result.exit_code == 0, result.output
            made[name] = root / name
        return made[name]

    return model


def kind_of(model_dir: Path):
    from seq2seq.storage.model_dir import ModelDir

    return source_kind(ModelDir(model_dir).config().model.encoder)


def long_recording(path: Path, seconds: float, rng: np.random.Generator) -> Path:
    """Tone words with pauses between them, `seconds` long."""
    parts, n = [], 0
    while n < seconds * RATE:
        words = [str(w) for w in rng.choice(list(TONES), size=int(rng.integers(1, 3)))]
        parts += [tone_utterance(words, rng, RATE), np.zeros(int(0.4 * RATE), np.float32)]
        n += len(parts[-2]) + len(parts[-1])
    sf.write(path, np.concatenate(parts)[: int(seconds * RATE)], RATE)
    return path


# --------------------------------------------------------------------------------------------
# The kind decides who decodes a model
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_the_kind_decides_the_command_and_the_others_refuse_naming_it(models, name):
    model_dir = models(name)
    kind = kind_of(model_dir)
    assert kind in (TEXT, IMAGE, AUDIO)
    served = load_engine(model_dir, device="cpu")
    assert served.processor.kind == kind
    assert isinstance(served, Generator) == kind.reads_files
    for cls in (Translator, Captioner, Transcriber):
        if cls.decodes(kind):
            continue
        with pytest.raises(SourceError) as error:
            cls.load(model_dir, device="cpu")
        assert f"is a model for {kind.name} sources" in str(error.value)
        assert f"`seq2seq {kind.command}`" in str(error.value)


# --------------------------------------------------------------------------------------------
# The server's limits, from the file's header
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FILE_EXAMPLES)
def test_files_over_the_servers_limits_get_413_from_their_header(models, name, tmp_path):
    model = load_engine(models(name), device="cpu")
    kind = model.processor.kind
    if kind == IMAGE:
        big = tmp_path / "big.png"
        big.write_bytes(png_header(12000, 12000))  # a header only: decoding it would fail (422)
        content_type, limits, expected = "image/png", Limits(max_pixels=1_000_000), "has 12000x12000 pixels"
    else:
        big = long_recording(tmp_path / "long.wav", 8.0, np.random.default_rng(3))
        content_type, limits, expected = "audio/wav", Limits(max_audio_seconds=5), "lasts 8.0 s; the limit is 5 s"
    with pytest.raises(RequestError) as error:
        check_source_size(str(big), model.processor, limits, str(big))
    assert error.value.status == 413 and expected in error.value.message
    with serving(create_app(model, limits, allow_paths=True)) as (port, _):
        status, body = call(port, "POST", "/generate", big.read_bytes(), {"Content-Type": content_type})
        assert status == 413 and body["error"].startswith(f"the uploaded file {expected}"), body
        status, body = call(port, "POST", "/generate", {"paths": [str(big)]})
        assert status == 413 and body["error"].startswith(f"{big} {expected}"), body
        assert call(port, "GET", "/health")[1]["calls"] == 0  # refused before the model saw anything


@pytest.mark.parametrize("name", FILE_EXAMPLES)
def test_an_unreadable_file_is_422_and_its_neighbour_is_answered(models, name, data, tmp_path):
    model = load_engine(models(name), device="cpu")
    good = str(data / ("img/0.png" if model.processor.kind == IMAGE else "wav/0.wav"))
    bad = tmp_path / "not-a-file-of-this-kind.bin"
    bad.write_bytes(b"\x00 nothing to read here " * 10)
    prefix = tmp_path / "not-a-file-of-this-kind.bin.bak"  # a path the first one is a prefix of
    prefix.write_bytes(Path(good).read_bytes())
    with serving(create_app(model, allow_paths=True)) as (port, _):
        status, body = call(port, "POST", "/generate", bad.read_bytes(), {"Content-Type": "application/octet-stream"})
        assert status == 422 and body["error"].startswith("cannot read the uploaded file: ") and "upload" in body["error"]
        status, body = call(port, "POST", "/generate?beam=zero", b"x", {"Content-Type": "text/plain"})
        assert status == 415, body  # what the body is decides first, then its options
        status, body = call(port, "POST", "/generate", {"paths": [str(bad), good, str(prefix)]})
    assert status == 200
    first, second, third = body["generations"]
    assert first["text"] == "" and str(bad) in first["error"]
    assert "error" not in second and "error" not in third  # each file's own result, not its neighbour's error
    assert second["text"] == third["text"] == model.translate([good])[0]


# --------------------------------------------------------------------------------------------
# transcribe: windows and time stamps for every audio model
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", AUDIO_EXAMPLES)
def test_transcribe_splits_long_recordings_for_every_audio_model(models, name, tmp_path, caplog):
    model_dir = models(name)
    transcriber = Transcriber.load(model_dir, device="cpu")
    assert transcriber.processor.kind == AUDIO
    long = long_recording(tmp_path / "long.wav", 4.0, np.random.default_rng(5))
    window = 0.9  # inside the tiny Whisper's 1 s
    with caplog.at_level(logging.WARNING):
        segments = transcriber.segments([str(long)], max_window_seconds=window)[0]
    assert len(segments) >= 4 and all(s.end - s.start <= window + 1e-6 for s in segments)
    assert [s.start for s in segments] == sorted(s.start for s in segments)
    # each window's text is what that stretch of audio gives decoded alone
    wave, rate = sf.read(long, dtype="float32")
    for k, s in enumerate(segments[:3]):
        piece = tmp_path / f"piece{k}.wav"
        sf.write(piece, wave[round(s.start * rate):round(s.end * rate)], rate)
        assert transcriber.transcribe([str(piece)], max_window_seconds=window)[0] == s.text
    result = CliRunner().invoke(cli, ["transcribe", str(model_dir), str(long), "--json", "--timestamps",
                                      "--max-window-seconds", str(window)])
    assert result.exit_code == 0, result.output
    obj = json.loads(result.stdout)
    assert [(seg["start"], seg["end"], seg["text"]) for seg in obj["segments"]] == [
        (round(s.start, 3), round(s.end, 3), s.text) for s in segments]
    if transcriber.processor.encoder_seconds is not None:  # Whisper: no window longer than it reads
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            cut = transcriber.segments([str(long)], max_window_seconds=10)[0]
        assert all(s.end - s.start <= transcriber.processor.encoder_seconds + 1e-6 for s in cut)
        assert "reads at most 1 s at a time" in caplog.text


# --------------------------------------------------------------------------------------------
# Bad input: one line naming the file, exit 1, for every kind of model (the matrix of test_bad_input.py)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FILE_EXAMPLES)
def test_bad_files_get_one_line_naming_them_for_every_file_model(models, name, data, tmp_path):
    model_dir = models(name)
    command = kind_of(model_dir).command
    other = "caption" if command == "transcribe" else "transcribe"
    (tmp_path / "junk.bin").write_bytes(b"\x00\x01 not an image, not audio " * 40)
    (tmp_path / "empty.bin").write_bytes(b"")
    wrong_kind = data / ("img/0.png" if command == "transcribe" else "wav/0.wav")
    cases = {
        "missing": ([command, str(model_dir), str(tmp_path / "missing.bin")], "missing.bin"),
        "junk": ([command, str(model_dir), str(tmp_path / "junk.bin")], "junk.bin"),
        "empty": ([command, str(model_dir), str(tmp_path / "empty.bin")], "empty.bin"),
        "the other kind's file": ([command, str(model_dir), str(wrong_kind)], str(wrong_kind)),
        "the other command": ([other, str(model_dir), str(wrong_kind)], f"seq2seq {command}"),
    }
    for case, (args, named) in cases.items():
        result = CliRunner().invoke(cli, args)
        lines = result.output.strip().splitlines()
        assert result.exit_code != 0, (case, result.output)
        assert len(lines) == 1 and named in lines[0] and "Traceback" not in result.output, (case, result.output)
    skipped = CliRunner().invoke(cli, [command, str(model_dir), str(tmp_path / "junk.bin"),
                                       str(data / ("wav/1.wav" if command == "transcribe" else "img/1.png")),
                                       "--skip-bad"])
    assert skipped.exit_code == 0 and skipped.stdout.count("\n") == 2 and skipped.stdout.startswith("\n")


@pytest.mark.parametrize("name", FILE_EXAMPLES)
def test_show_attention_draws_over_the_source_or_says_it_cannot(models, name, data, tmp_path):
    model_dir = models(name)
    command = kind_of(model_dir).command
    source = str(data / ("wav/0.wav" if command == "transcribe" else "img/0.png"))
    png = tmp_path / "attention.png"
    result = CliRunner().invoke(cli, [command, str(model_dir), source, "--show-attention", str(png)])
    processor = load_engine(model_dir, device="cpu").processor
    if processor.attention_view(processor.load(source)) is None:  # e.g. a wav2vec2 backbone: nothing to draw on
        assert result.exit_code == 1 and not png.exists()
        assert result.output.strip() == f"Error: --show-attention: drawing attention is not supported for the " \
                                        f"sources of {model_dir}"
    else:
        assert result.exit_code == 0, result.output
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------------------------
# Steering: prefix, constraints and banned phrases through every kind's command
# --------------------------------------------------------------------------------------------

STEERING_WORDS = {"text": ("ein", "blau", "rot"), "image": ("red", "green", "blue"), "audio": ("mid", "high", "low")}


@pytest.mark.parametrize("name", ALL)
def test_every_kind_of_model_is_steered_by_its_command(models, name, data, tmp_path):
    model_dir = models(name)
    kind = kind_of(model_dir)
    prefix, wanted, banned = STEERING_WORDS[DATA[name]]
    sources = {"text": ["-i", str(data / "src.txt")], "image": [str(data / "img" / f"{i}.png") for i in range(3)],
               "audio": [str(data / "wav" / f"{i}.wav") for i in range(3)]}[DATA[name]]
    n = 12 if DATA[name] == "text" else 3
    (tmp_path / "prefix.txt").write_text(f"{prefix}\n" + "\n" * (n - 1))
    (tmp_path / "constraints.txt").write_text(f"{wanted}\n" * n)
    result = CliRunner().invoke(cli, [kind.command, str(model_dir), *sources, "--prefix-file", str(tmp_path / "prefix.txt"),
                                      "--constraints-file", str(tmp_path / "constraints.txt"), "--avoid", banned,
                                      "--beam", "3", "--max-len-b", "30"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.split("\n")[:-1]
    assert len(lines) == n
    assert lines[0].startswith(prefix)
    for line in lines:
        assert wanted in line and banned not in line.split(), line


@pytest.mark.parametrize("name", FILE_EXAMPLES)
def test_a_file_model_twice_decodes_as_the_model(models, name, data, tmp_path):
    model_dir = models(name)
    kind = kind_of(model_dir)
    table = DATA[name]
    files = [str(data / ("img" if table == "image" else "wav") / f"{i}.{'png' if table == 'image' else 'wav'}")
             for i in range(3)]
    one = CliRunner().invoke(cli, [kind.command, str(model_dir), *files, "--with-path"])
    two = CliRunner().invoke(cli, [kind.command, str(model_dir), *files, "--with-path", "--ensemble", str(model_dir)])
    assert one.exit_code == 0 and two.exit_code == 0, two.output
    assert two.stdout == one.stdout
