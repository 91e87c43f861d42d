"""The audio modality: log-mel features against a numpy reference, exact lengths and masks, batch
invariance, SpecAugment, reading audio files, the config, and a tiny train + transcribe run."""

from __future__ import annotations

import math

import numpy as np
import pytest
import soundfile as sf
import torch

from seq2seq.config import ConfigError, ModelConfig, from_dict, load, save, to_dict
from seq2seq.model.encoders import SourceError
from seq2seq.report.plots import save_figure
from seq2seq.model.encoders.audio import AudioEncoder, AudioEncoderConfig, AudioProcessor, ConvSubsampling
from seq2seq.model.encoders.audio_features import LogMel, num_frames, spec_augment, subsampled_length
from seq2seq.config.root import Config

SMALL = {"type": "audio", "sample_rate": 8000, "n_fft": 256, "win_length": 200, "hop_length": 80, "n_mels": 40}


def audio_cfg(**kw) -> AudioEncoderConfig:
    return from_dict(AudioEncoderConfig, {**SMALL, **kw}, prefix="model.encoder.")


def model_cfg(dropout: float = 0.0, **enc) -> ModelConfig:
    return from_dict(ModelConfig, {"d_model": 32, "heads": 4, "ffn_dim": 64, "layers": 2, "dropout": dropout,
                                   "encoder": {**SMALL, "conv_channels": 8, **enc}})


# --------------------------------------------------------------------------------------------
# Features against an independent numpy computation
# --------------------------------------------------------------------------------------------


def reference_log_mel(x: np.ndarray, sr: int, n_fft: int, win: int, hop: int, n_mels: int, f_min: float,
                      f_max: float) -> np.ndarray:
    """Textbook log-mel, written independently: explicit framing, Hann window from its formula,
    rfft, power, HTK triangles built filter by filter with scalar maths."""
    x = np.asarray(x, dtype=np.float64)
    if len(x) < n_fft:
        x = np.concatenate([x, np.zeros(n_fft - len(x))])
    n = np.arange(win)
    hann = 0.5 - 0.5 * np.cos(2 * math.pi * n / win)  # periodic Hann
    window = np.zeros(n_fft)
    left = (n_fft - win) // 2
    window[left:left + win] = hann
    n_frames = 1 + (len(x) - n_fft) // hop
    frames = np.stack([x[i * hop:i * hop + n_fft] * window for i in range(n_frames)])
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2  # [F, n_fft/2+1]

    def mel(f):
        return 2595.0 * math.log10(1.0 + f / 700.0)

    def hz(m):
        return 700.0 * (10 ** (m / 2595.0) - 1.0)

    lo, hi = mel(f_min), mel(f_max)
    edges = [hz(lo + (hi - lo) * i / (n_mels + 1)) for i in range(n_mels + 2)]
    fb = np.zeros((n_fft // 2 + 1, n_mels))
    for m in range(n_mels):
        a, b, c = edges[m], edges[m + 1], edges[m + 2]
        for k in range(n_fft // 2 + 1):
            f = k * sr / n_fft
            if a < f <= b:
                fb[k, m] = (f - a) / (b - a)
            elif b < f < c:
                fb[k, m] = (c - f) / (c - b)
    return np.log(power @ fb + 1e-6)


def test_log_mel_matches_a_numpy_reference():
    rng = np.random.default_rng(0)
    t = np.arange(5000) / 8000
    x = (0.4 * np.sin(2 * np.pi * (200 + 900 * t) * t) + 0.05 * rng.standard_normal(len(t))).astype(np.float32)
    cfg = audio_cfg(normalize="none", f_min=30.0, f_max=3700.0)
    ours = LogMel(cfg)(torch.from_numpy(x)[None], torch.tensor([len(x)]))[0][0].numpy()
    ref = reference_log_mel(x, 8000, 256, 200, 80, 40, 30.0, 3700.0)
    assert ours.shape == ref.shape == (1 + (5000 - 256) // 80, 40)
    np.testing.assert_allclose(ours, ref, atol=2e-3, rtol=1e-4)
    # the default f_max is Nyquist, win_length None is n_fft
    cfg = audio_cfg(normalize="none", win_length=None)
    ours = LogMel(cfg)(torch.from_numpy(x)[None], torch.tensor([len(x)]))[0][0].numpy()
    np.testing.assert_allclose(ours, reference_log_mel(x, 8000, 256, 256, 80, 40, 0.0, 4000.0), atol=2e-3, rtol=1e-4)


@pytest.mark.parametrize("how", ["per_bin", "global"])
def test_normalisation_uses_real_frames_only_and_zeroes_padding(how):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(3000).astype(np.float32) * 0.1
    raw = reference_log_mel(x, 8000, 256, 200, 80, 40, 0.0, 4000.0)
    axis = 0 if how == "per_bin" else None
    ref = (raw - raw.mean(axis=axis)) / np.sqrt(raw.var(axis=axis) + 1e-5)
    feats, frames = LogMel(audio_cfg(normalize=how))(
        torch.from_numpy(np.concatenate([x, 9 * np.ones(2000, np.float32)]))[None].repeat(2, 1),
        torch.tensor([3000, 5000]))
    assert frames.tolist() == [num_frames(3000, audio_cfg()), num_frames(5000, audio_cfg())]
    np.testing.assert_allclose(feats[0, : len(ref)].numpy(), ref, atol=2e-3)
    assert feats[0, len(ref):].abs().max() == 0  # the junk samples past the length are ignored


# --------------------------------------------------------------------------------------------
# Lengths and masks
# --------------------------------------------------------------------------------------------


def test_lengths_are_exact_for_many_input_lengths():
    cfg = model_cfg()
    enc = AudioEncoder(cfg).eval()
    proc = AudioProcessor(cfg.encoder)
    lengths = [1, 5, 255, 256, 257, 335, 336, 337, 416, 500, 999, 1000, 1001, 1234, 2047, 3000, 4321]
    waves = [torch.randn(n) * 0.1 for n in lengths]
    with torch.no_grad():
        _, frames = enc.features(*proc.collate(waves))
        memory, mask = enc(proc.collate(waves))
    for i, n in enumerate(lengths):
        f = 1 if n < 256 else 1 + (n - 256) // 80  # whole frames of real samples (one for a short file)
        s = math.ceil(math.ceil(f / 2) / 2)
        assert frames[i] == f == num_frames(n, cfg.encoder)
        assert proc.length(waves[i]) == s == subsampled_length(f)
        assert (~mask[i]).sum() == s and not mask[i, :s].any() and mask[i, s:].all()
        assert memory[i, s:].abs().max() == 0 if s < memory.size(1) else True
        alone = enc.features(waves[i][None], torch.tensor([n]))[0]
        assert alone.size(1) == f
    assert memory.size(1) == max(math.ceil(math.ceil(f / 2) / 2) for f in frames.tolist())


def test_subsampling_never_lets_padding_leak_into_real_positions():
    """Large junk in the padding frames of a feature batch must not change any real position."""
    cfg = audio_cfg(conv_channels=4)
    torch.manual_seed(0)
    for kind in ("conv2d", "conv1d"):
        sub = ConvSubsampling(audio_cfg(subsampling=kind, conv_channels=4))
        feats = torch.randn(3, 23, 40)
        frames = torch.tensor([23, 17, 6])
        clean = feats.clone()
        for i, f in enumerate(frames.tolist()):
            clean[i, f:] = 0
        junk = clean.clone()
        for i, f in enumerate(frames.tolist()):
            junk[i, f:] = 50.0
        with torch.no_grad():
            a, la = sub(clean, frames)
            alone = [sub(clean[i:i + 1, :f], frames[i:i + 1])[0][0] for i, f in enumerate(frames.tolist())]
        assert la.tolist() == [6, 5, 2]
        for i, s in enumerate(la.tolist()):
            torch.testing.assert_close(a[i, :s], alone[i], atol=1e-5, rtol=1e-5)
            assert a[i, s:].abs().max() == 0 if s < a.size(1) else True
    del cfg, junk


@pytest.mark.parametrize("enc", [{}, {"subsampling": "conv1d", "normalize": "per_bin"}])
def test_encoder_is_batch_invariant(enc):
    torch.manual_seed(0)
    cfg = model_cfg(**enc)
    encoder = AudioEncoder(cfg).eval()
    proc = AudioProcessor(cfg.encoder)
    waves = [torch.randn(n) * 0.2 for n in (4000, 100, 1777, 9000, 256)]
    with torch.no_grad():
        memory, _ = encoder(proc.collate(waves))
        for i, w in enumerate(waves):
            alone, alone_mask = encoder(proc.collate([w]))
            s = alone.size(1)
            assert not alone_mask.any() and s == proc.length(w)
            torch.testing.assert_close(memory[i, :s], alone[0], atol=2e-5, rtol=1e-4)
    # sinusoidal positions have no length limit (far beyond model.max_positions)
    long_cfg = from_dict(ModelConfig, {**to_dict(cfg), "max_positions": 16})
    with torch.no_grad():
        out, _ = AudioEncoder(long_cfg).eval()(proc.collate([torch.randn(8000)]))
    assert out.size(1) == 25 > long_cfg.max_positions


# --------------------------------------------------------------------------------------------
# SpecAugment
# --------------------------------------------------------------------------------------------


def test_spec_augment_masks_only_real_frames_and_only_in_training():
    cfg = audio_cfg(freq_masks=2, freq_mask_width=5, time_masks=3, time_mask_width=8, time_mask_max_frac=0.2)
    frames = torch.tensor([60, 30, 5])
    feats = torch.ones(3, 60, 40)
    torch.manual_seed(0)
    seen_time = seen_freq = 0
    for _ in range(50):
        out = spec_augment(feats, frames, cfg)
        for i, f in enumerate(frames.tolist()):
            zero_cols = (out[i, :f] == 0).all(dim=0)  # masked mel bins
            zero_rows = (out[i, :f] == 0).all(dim=1)  # masked frames
            assert zero_cols.sum() <= 2 * 5
            assert zero_rows.sum() <= 3 * min(8, int(0.2 * f))  # width capped by the utterance's length
            kept = out[i, :f][~zero_rows][:, ~zero_cols]
            assert (kept == 1).all()  # nothing else is touched
            if f < 60:  # time masks stay inside the real frames
                assert not (out[i, f:, ~zero_cols] == 0).any()
            seen_time += int(zero_rows.sum())
            seen_freq += int(zero_cols.sum())
    assert seen_time > 0 and seen_freq > 0

    torch.manual_seed(0)
    mcfg = model_cfg(dropout=0.0, freq_masks=2, freq_mask_width=10, time_masks=2, time_mask_width=10,
                     time_mask_max_frac=0.2)
    encoder = AudioEncoder(mcfg)
    src = AudioProcessor(mcfg.encoder).collate([torch.randn(6000) * 0.1, torch.randn(3000) * 0.1])
    with torch.no_grad():
        encoder.eval()
        a, b = encoder(src)[0], encoder(src)[0]
        encoder.train()
        c = encoder(src)[0]
    torch.testing.assert_close(a, b, atol=0, rtol=0)  # eval: deterministic, no masks
    assert (a - c).abs().max() > 1e-3  # training: masked (dropout is 0 here)
    off = model_cfg(dropout=0.0, freq_masks=0, time_masks=0)
    encoder = AudioEncoder(off)
    with torch.no_grad():
        encoder.train()
        t = encoder(src)[0]
        encoder.eval()
        torch.testing.assert_close(t, encoder(src)[0])


# --------------------------------------------------------------------------------------------
# Reading files
# --------------------------------------------------------------------------------------------


def dominant_hz(x: np.ndarray, sr: int) -> float:
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return float(np.argmax(spectrum) * sr / len(x))


def test_processor_resamples_and_mixes_to_mono(tmp_path):
    proc = AudioProcessor(audio_cfg())
    t = np.arange(16000) / 16000
    sine = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    sf.write(tmp_path / "a.wav", sine, 16000)
    x = proc.load(str(tmp_path / "a.wav"))
    assert x.dtype == torch.float32 and x.dim() == 1 and abs(x.numel() - 8000) <= 1
    assert abs(dominant_hz(x.numpy(), 8000) - 440) <= 2
    assert abs(float(x.abs().max()) - 0.5) < 0.02  # amplitude kept

    stereo = np.stack([sine[:8000], 0.25 * np.cos(2 * np.pi * 1000 * t[:8000])], axis=1).astype(np.float32)
    sf.write(tmp_path / "s.flac", stereo, 8000, subtype="PCM_24")
    y = proc.load(str(tmp_path / "s.flac")).numpy()
    np.testing.assert_allclose(y, stereo.mean(axis=1), atol=1e-5)  # 8 kHz already: no resampling

    wav, lengths = proc.collate([torch.ones(300), torch.ones(1000)])
    assert wav.shape == (2, 1000) and lengths.tolist() == [300, 1000] and wav[0, 300:].abs().max() == 0


def test_bad_audio_files_raise_source_error_naming_the_path(tmp_path):
    proc = AudioProcessor(audio_cfg(max_seconds=2.0))
    sf.write(tmp_path / "empty.wav", np.zeros(0, np.float32), 8000)
    (tmp_path / "zero_bytes.wav").write_bytes(b"")
    (tmp_path / "text.wav").write_text("this is not audio\n" * 20)
    good = tmp_path / "good.wav"
    sf.write(good, np.zeros(4000, np.float32), 8000)
    (tmp_path / "truncated.wav").write_bytes(good.read_bytes()[:30])
    (tmp_path / "noise.wav").write_bytes(np.random.default_rng(0).bytes(3000))
    sf.write(tmp_path / "long.wav", np.zeros(8000 * 3, np.float32), 8000)
    (tmp_path / "folder.wav").mkdir()
    cases = {"missing.wav": "not found", "empty.wav": "empty", "zero_bytes.wav": "", "text.wav": "",
             "truncated.wav": "", "noise.wav": "", "long.wav": "max_seconds", "folder.wav": "not a regular file"}
    for name, words in cases.items():
        path = str(tmp_path / name)
        with pytest.raises(SourceError) as err:
            proc.load(path)
        message = str(err.value)
        assert path in message and words in message and "Traceback" not in message and "\n" not in message
    assert proc.load(str(good)).numel() == 4000


def test_truncated_and_non_finite_audio_is_refused_naming_the_file(tmp_path):
    import io

    proc = AudioProcessor(audio_cfg())
    sine = (0.5 * np.sin(np.arange(16000) / 10)).astype(np.float32)
    for fmt in ("WAV", "AIFF"):  # libsndfile itself reads a file cut short silently, up to where it ends
        buffer = io.BytesIO()
        sf.write(buffer, sine, 8000, format=fmt, subtype="PCM_16")
        whole = buffer.getvalue()
        (tmp_path / f"cut.{fmt.lower()}").write_bytes(whole[: len(whole) // 2])
        if fmt == "WAV":  # a streaming writer's "unknown" sizes (0xFFFFFFFF) are no truncation
            streamed = bytearray(whole)
            at = streamed.index(b"data") + 4
            streamed[at: at + 4] = streamed[4:8] = b"\xff\xff\xff\xff"
            (tmp_path / "streamed.wav").write_bytes(bytes(streamed))
    sf.write(tmp_path / "nan.wav", np.full(800, np.nan, np.float32), 8000, subtype="FLOAT")
    sf.write(tmp_path / "inf.wav", np.where(np.arange(800) == 400, np.inf, 0.1).astype(np.float32), 8000,
             subtype="FLOAT")
    cases = {"cut.wav": "is truncated: its header announces 32000 bytes of samples, the file holds 15978",
             "cut.aiff": "is truncated: its header announces 32008 bytes of samples",
             "nan.wav": "holds non-finite samples (NaN or inf)", "inf.wav": "holds non-finite samples (NaN or inf)"}
    for name, words in cases.items():
        path = str(tmp_path / name)
        with pytest.raises(SourceError) as err:
            proc.load(path)
        assert str(err.value).startswith(f"audio file {path} {words}"), str(err.value)
    assert proc.load(str(tmp_path / "streamed.wav")).numel() == 16000


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------


def test_config_round_trips_and_names_bad_keys(tmp_path):
    cfg = from_dict(ModelConfig, {"d_model": 32, "heads": 4, "encoder": {**SMALL, "f_max": 3800, "time_masks": 0}})
    assert isinstance(cfg.encoder, AudioEncoderConfig) and cfg.encoder.f_max == 3800.0
    assert from_dict(ModelConfig, to_dict(cfg)) == cfg
    save(cfg, tmp_path / "m.yaml")
    assert load(ModelConfig, tmp_path / "m.yaml") == cfg
    assert AudioEncoderConfig().type == "audio" and AudioProcessor(AudioEncoderConfig()).kind.noun == "audio file"
    bad = {"hop_length": 0, "win_length": 300, "f_max": 5000, "f_min": -1, "n_mels": 200, "freq_mask_width": 41,
           "time_mask_max_frac": 1.5, "max_seconds": 0, "normalize": "cmvn", "subsampling": "conv3d"}
    for key, value in bad.items():
        with pytest.raises(ConfigError, match=f"model.encoder.{key}"):
            from_dict(Config, {"model": {"encoder": {**SMALL, key: value}}})
    with pytest.raises(ConfigError, match="Did you mean 'model.encoder.hop_length'"):
        from_dict(Config, {"model": {"encoder": {**SMALL, "hop_lenght": 80}}})


def test_attention_plot_writes_a_png(tmp_path):
    from seq2seq.report.source_attention import draw_source_attention

    cfg = audio_cfg()
    x = torch.randn(8000) * 0.1
    proc = AudioProcessor(cfg)
    s = proc.length(x)
    view = proc.attention_view(x)
    assert view.spectrogram.shape == (num_frames(8000, cfg), cfg.n_mels)  # the log-mel the encoder reads
    assert view.position_seconds * s == pytest.approx(4 * view.frame_seconds * s)
    att = np.random.default_rng(0).dirichlet(np.ones(s), size=3).tolist()
    save_figure(draw_source_attention(view, att, ["▁one", "▁two", "</s>"]), tmp_path / "a.png")
    assert (tmp_path / "a.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------------------------
# End to end: seq2seq train, seq2seq transcribe, Transcriber, model directory
# --------------------------------------------------------------------------------------------

TONES = {"low": 300.0, "mid": 900.0, "high": 2000.0}


def tone_utterance(words: list[str], rng: np.random.Generator, rate: int) -> np.ndarray:
    """Each word a 0.12 s tone of its own pitch, with pauses and a little noise."""
    parts = [np.zeros(int(rng.uniform(0.02, 0.08) * rate))]
    for w in words:
        t = np.arange(int(0.12 * rate)) / rate
        tone = 0.5 * np.sin(2 * np.pi * TONES[w] * t + rng.uniform(0, 6))
        parts += [tone, np.zeros(int(rng.uniform(0.04, 0.1) * rate))]
    x = np.concatenate(parts)
    return (x + 0.01 * rng.standard_normal(len(x))).astype(np.float32)


@pytest.fixture(scope="module")
def tone_data(tmp_path_factory):
    """60 train / 12 val / 12 test utterances of 1-3 tone words; test files at 16 kHz (resampled on load)."""
    root = tmp_path_factory.mktemp("tones")
    rng = np.random.default_rng(0)
    for split, n, rate in (("train", 60, 8000), ("val", 12, 8000), ("test", 12, 16000)):
        rows = ["audio\ttext"]
        (root / split).mkdir()
        for i in range(n):
            words = [str(w) for w in rng.choice(list(TONES), size=int(rng.integers(1, 4)))]
            sf.write(root / split / f"{i}.wav", tone_utterance(words, rng, rate), rate)
            rows.append(f"{split}/{i}.wav\t{' '.join(words)}")
        (root / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    return root


@pytest.fixture(scope="module")
def tone_model(tone_data, tmp_path_factory):
    import yaml
    from click.testing import CliRunner

    from seq2seq.cli import cli

    root = tmp_path_factory.mktemp("tone_model")
    cfg = {
        "data": {"train": str(tone_data / "train.tsv"), "valid": str(tone_data / "val.tsv")},
        "tokenizer": {"joint": False, "vocab_size": 16},
        "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "layers": 1, "dropout": 0.0,
                  "encoder": {**SMALL, "n_mels": 20, "normalize": "global", "conv_channels": 8, "freq_masks": 0,
                              "time_masks": 0}},
        "training": {"output_dir": str(root / "model"), "max_steps": 500, "valid_every": 250, "max_tokens": 400,
                     "lr": 0.003, "warmup_steps": 30, "device": "cpu", "threads": 1, "log_every": 100,
                     "best_metric": "loss", "seed": 1},
        "decoding": {"beam": 3},
    }
    config = root / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    result = CliRunner().invoke(cli, ["train", str(config)])
    assert result.exit_code == 0, result.output
    return root / "model", cfg


def test_train_then_transcribe_end_to_end(tone_model, tone_data, tmp_path):
    from click.testing import CliRunner

    from seq2seq.cli import cli
    from seq2seq.inference.generator import Transcriber

    model_dir, _ = tone_model
    rows = [line.split("\t") for line in (tone_data / "test.tsv").read_text().splitlines()[1:]]
    files, refs = [str(tone_data / a) for a, _ in rows], [t for _, t in rows]
    runner = CliRunner()
    result = runner.invoke(cli, ["transcribe", str(model_dir), *files])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == len(files)
    assert sum(h == r for h, r in zip(lines, refs)) >= 10, list(zip(lines, refs))  # it learned the tones
    result = runner.invoke(cli, ["transcribe", str(model_dir)], input="\n".join(files) + "\n")  # a list on stdin
    assert result.exit_code == 0 and result.output.splitlines() == lines

    transcriber = Transcriber.load(model_dir, device="cpu")
    assert transcriber.transcribe(files) == lines
    for beam in (1, 3):  # batch invariance through greedy and beam search
        alone = [transcriber.transcribe([f], beam=beam)[0] for f in files]
        assert transcriber.transcribe(files, beam=beam) == alone

    for precision in ("bf16", "int8"):  # the features stay float32 in a model cast to bf16
        low = Transcriber.load(model_dir, device="cpu", precision=precision).transcribe(files)
        assert sum(h == r for h, r in zip(low, refs)) >= 9, (precision, list(zip(low, refs)))

    plot = tmp_path / "att.png"
    result = runner.invoke(cli, ["transcribe", str(model_dir), files[0], "--show-attention", str(plot)])
    assert result.exit_code == 0, result.output
    assert plot.read_bytes()[:4] == b"\x89PNG"

    bad = tmp_path / "bad.wav"
    bad.write_text("not audio")
    result = runner.invoke(cli, ["transcribe", str(model_dir), files[0], str(bad)])
    assert result.exit_code == 1 and str(bad) in result.output and "Traceback" not in result.output


def test_model_directory_round_trip_keeps_audio_settings(tone_model, tone_data):
    import yaml

    from seq2seq.inference.generator import Transcriber

    model_dir, cfg = tone_model
    saved = yaml.safe_load((model_dir / "config.yaml").read_text())["model"]["encoder"]
    for key, value in cfg["model"]["encoder"].items():
        assert saved[key] == value
    loaded = Transcriber.load(model_dir, device="cpu")
    enc = loaded.loaded.config.model.encoder
    assert isinstance(enc, AudioEncoderConfig) and enc.n_mels == 20 and enc.normalize == "global"
    assert isinstance(loaded.model.encoder, AudioEncoder) and loaded.model.encoder.features.mel.shape == (129, 20)
    test = str(tone_data / "test/0.wav")  # 16 kHz: resampled to the saved 8 kHz
    wave = loaded.processor.load(test)
    assert abs(wave.numel() - sf.info(test).frames / 2) <= 1
    again = Transcriber.load(model_dir, device="cpu")
    files = [str(tone_data / f"val/{i}.wav") for i in range(4)]
    assert again.transcribe(files) == loaded.transcribe(files)


def test_training_names_a_bad_audio_file_in_the_table(tone_data, tmp_path):
    import yaml
    from click.testing import CliRunner

    from seq2seq.cli import cli

    (tmp_path / "broken.wav").write_bytes(b"RIFF0000WAVEjunk")
    table = tmp_path / "train.tsv"
    table.write_text(f"audio\ttext\n{tone_data / 'train/0.wav'}\tlow\nbroken.wav\tmid\n")
    cfg = {"data": {"train": str(table)}, "tokenizer": {"vocab_size": 16},
           "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "layers": 1, "encoder": SMALL},
           "training": {"output_dir": str(tmp_path / "model"), "max_steps": 1, "device": "cpu"}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    result = CliRunner().invoke(cli, ["train", str(tmp_path / "c.yaml")])
    assert result.exit_code == 1 and str(tmp_path / "broken.wav") in result.output, result.output


# --------------------------------------------------------------------------------------------
# The spoken-digits recipe's utterance builder
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("held_out", [None, "lucas"])
def test_digit_utterances_keep_the_official_split_and_one_speaker(tmp_path, held_out):
    import csv
    import importlib.util
    from pathlib import Path

    from conftest import DATA, require_data

    require_data(DATA / "fsdd" / "recordings")
    path = Path(__file__).resolve().parents[1] / "recipes" / "speech_digits" / "make_data.py"
    spec = importlib.util.spec_from_file_location("make_data", path)
    make_data = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_data)
    argv = ["--data-dir", str(DATA / "fsdd" / "recordings"), "--out", str(tmp_path / "a"), "--n-train", "40",
            "--n-val", "10", "--n-test", "15"] + (["--test-speaker", held_out] if held_out else [])
    make_data.main(argv)
    allowed = {"train": range(5, 45), "val": range(45, 50), "test": range(5) if held_out is None else range(50)}
    for split, indices in allowed.items():
        with open(tmp_path / "a" / f"{split}.tsv", newline="") as f:
            rows = list(csv.DictReader(f, delimiter="\t"))
        assert len(rows) == {"train": 40, "val": 10, "test": 15}[split]
        for row in rows:
            recs = [r.split("_") for r in row["recordings"].split()]
            assert {s for _, s, _ in recs} == {row["speaker"]}  # one speaker per utterance
            assert all(int(i) in indices for _, _, i in recs)  # never a recording of another split
            assert row["text"] == " ".join(make_data.WORDS[int(d)] for d, _, _ in recs)
            assert 1 <= len(recs) <= 7
            if held_out:
                assert (row["speaker"] == held_out) == (split == "test")
            x, rate = sf.read(tmp_path / "a" / row["audio"])
            assert rate == 8000 and x.ndim == 1 and len(x) > 1000
    make_data.main(argv[:2] + ["--out", str(tmp_path / "b")] + argv[4:])  # seeded: the same files again
    assert (tmp_path / "a" / "test.tsv").read_text() == (tmp_path / "b" / "test.tsv").read_text()
    assert (tmp_path / "a" / rows[0]["audio"]).read_bytes() == (tmp_path / "b" / rows[0]["audio"]).read_bytes()


@pytest.mark.parametrize("config", ["config.yaml", "config_hf.yaml", "config_hf_wav2vec2.yaml"])
def test_speech_recipe_runs_end_to_end_and_chooses_the_ctc_weight_on_val(tmp_path, config):
    """run.py with a tiny model trained with CTC: the utterances are written at the model's rate (our
    encoder's and the wav2vec2 extractor's 8 kHz, the Whisper feature extractor's 16 kHz), the decoding
    ctc_weight is the val-best of its candidates, and test is scored with it."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from conftest import DATA, require_data

    if config != "config.yaml":
        pytest.importorskip("transformers")
    require_data(DATA / "fsdd" / "recordings")
    recipe = Path(__file__).resolve().parents[1] / "recipes" / "speech_digits"
    small = {"config.yaml": [],
             "config_hf.yaml": ["model.encoder.backbone.d_model=32", "model.encoder.backbone.encoder_layers=1",
                                "model.encoder.backbone.encoder_ffn_dim=64"],
             "config_hf_wav2vec2.yaml": ["model.encoder.backbone.hidden_size=32", "model.encoder.backbone.num_hidden_layers=1",
                                         "model.encoder.backbone.intermediate_size=64",
                                         "model.encoder.backbone.num_attention_heads=2"]}[config]
    small = [arg for override in small for arg in ("--set", override)]
    result = subprocess.run(
        [sys.executable, str(recipe / "run.py"), "--data-dir", str(DATA / "fsdd" / "recordings"), "--config",
         str(recipe / config), "--output-dir", str(tmp_path / "run"), "--n-train", "24", "--n-val", "8",
         "--n-test", "8", "--set", "training.max_steps=3", "--set", "training.valid_every=3", "--set",
         "training.ctc_weight=0.3", "--set", "model.d_model=32", "--set", "model.ffn_dim=64", "--set",
         "model.layers=1", "--set", "model.heads=2", "--set", "training.threads=1", "--beam", "2", *small],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "run" / "results.json").read_text())
    vals = report["val_ctc_weight"]
    assert set(vals) == {"0.0", "0.3", "0.5", "0.7", "1.0"} and vals[str(report["ctc_weight"])] == min(vals.values())
    assert report["val"]["wer"] == min(vals.values()) and report["test"]["utterances"] == 8
    # the choice is the model directory's default decoding, which test was scored with
    from seq2seq.storage.model_dir import ModelDir

    model_dir = ModelDir(tmp_path / "run" / "model")
    assert model_dir.decoding_choice()["values"] == {"ctc_weight": report["ctc_weight"], "beam": 2}
    assert (model_dir.config().decoding.ctc_weight, model_dir.config().decoding.beam) == (report["ctc_weight"], 2)
    rate = sf.info(next((tmp_path / "run" / "data" / "wav" / "test").glob("*.wav"))).samplerate
    assert rate == (16000 if config == "config_hf.yaml" else 8000)
