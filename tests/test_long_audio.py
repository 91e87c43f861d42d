"""Long recordings: windows cut at the silences (seq2seq.model.encoders.audio_windows), and `transcribe` /
`Transcriber` on a recording longer than the model's window, against the same model on each window."""

from __future__ import annotations

import json
import re
from itertools import pairwise

import numpy as np
import pytest
import soundfile as sf

from seq2seq.model.encoders.audio_windows import join_texts, split_windows, word_times

RATE = 8000
TONES = {"low": 300.0, "mid": 900.0, "high": 2000.0}


def tone_word(word: str, rng: np.random.Generator) -> np.ndarray:
    t = np.arange(int(0.12 * RATE)) / RATE
    return 0.5 * np.sin(2 * np.pi * TONES[word] * t + rng.uniform(0, 6))


def utterance(words: list[str], rng: np.random.Generator, at: int = 0) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Tone words with short pauses (0.04-0.1 s), 0.05-0.25 s of silence at either end and a little
    noise: what the model is trained on -> (waveform, each word's [start, end) samples from `at`)."""
    parts, spans = [np.zeros(int(rng.uniform(0.05, 0.25) * RATE))], []
    for k, w in enumerate(words):
        start = at + sum(len(p) for p in parts)
        pause = rng.uniform(0.04, 0.1) if k < len(words) - 1 else rng.uniform(0.05, 0.25)
        parts += [tone_word(w, rng), np.zeros(int(pause * RATE))]
        spans.append((start, start + len(parts[-2])))
    x = np.concatenate(parts)
    return (x + 0.01 * rng.standard_normal(len(x))).astype(np.float32), spans


def long_recording(n: int, seed: int) -> tuple[np.ndarray, list[str], list[tuple[int, int, int]], list[tuple[int, int]]]:
    """n utterances of 1-3 tone words separated by silences of 0.5-1.2 s (noise only) ->
    (waveform, their texts, the words as (start, end, utterance), the silences as [start, end) samples)."""
    rng = np.random.default_rng(seed)
    parts, texts, words, gaps, at = [], [], [], [], 0
    for k in range(n):
        chosen = [str(w) for w in rng.choice(list(TONES), size=int(rng.integers(1, 4)))]
        x, spans = utterance(chosen, rng, at)
        parts.append(x)
        texts.append(" ".join(chosen))
        words += [(a, b, k) for a, b in spans]
        at += len(x)
        if k < n - 1:
            gap = int(rng.uniform(0.5, 1.2) * RATE)
            parts.append((0.01 * rng.standard_normal(gap)).astype(np.float32))
            gaps.append((at, at + gap))
            at += gap
    return np.concatenate(parts), texts, words, gaps


# --------------------------------------------------------------------------------------------
# Windows
# --------------------------------------------------------------------------------------------


def test_a_recording_within_the_window_is_one_window_whatever_it_holds():
    x, _, _, _ = long_recording(3, seed=0)
    for wave in (x, np.zeros(100, np.float32), np.ones(1, np.float32)):
        windows = split_windows(wave, RATE, max_seconds=len(x) / RATE)
        assert [(w.start, w.end) for w in windows] == [(0, len(wave))]


@pytest.mark.parametrize("max_seconds", [2.5, 4.0, 8.0])  # an utterance and its half-silences: < 2.3 s
def test_long_recordings_are_cut_in_the_silences_and_the_longest_silences_first(max_seconds):
    x, _, words, gaps = long_recording(12, seed=1)
    windows = split_windows(x, RATE, max_seconds)
    assert all(w.end - w.start <= max_seconds * RATE for w in windows)
    assert all(a.end <= b.start for a, b in pairwise(windows))  # in order, no overlap
    assert not any(w.overlaps_previous for w in windows)
    where = {}  # utterance -> the windows holding its words
    for a, b, k in words:  # every word whole in one window, and an utterance's words in the same one
        holding = [i for i, w in enumerate(windows) if w.start <= a and b <= w.end]
        assert len(holding) == 1, (a / RATE, b / RATE)
        where.setdefault(k, set()).update(holding)
    assert all(len(v) == 1 for v in where.values()), where  # cut between utterances only
    # the longest silence first, and a window is cut only while it is too long
    pauses = [(a[1], b[0]) for a, b in pairwise(words) if a[2] != b[2]]  # between utterances
    g0, g1 = max(pauses, key=lambda g: g[1] - g[0])
    assert any(a.end <= (g0 + g1) // 2 <= b.start for a, b in pairwise(windows))
    assert len(windows) - 1 < len(gaps) or max_seconds < 3
    for w in windows:  # trimmed to the voiced part and 0.1 s around it
        assert w.start <= w.speech_start < w.speech_end <= w.end
        assert w.speech_start - w.start <= 0.1 * RATE and w.end - w.speech_end <= 0.1 * RATE
        assert any(w.speech_start <= a + 0.02 * RATE for a, _, _ in words if w.start <= a)


@pytest.mark.parametrize("max_seconds", [3.0, 6.0])
def test_real_speech_is_cut_between_the_digits(max_seconds):
    """FSDD digits of five speakers, 0.3-1 s apart, in noise at 30 dB SNR: no digit is cut."""
    from conftest import DATA, require_data

    folder = DATA / "fsdd" / "recordings"
    require_data(folder)
    rng = np.random.default_rng(0)
    names = sorted(p.name for p in folder.glob("*.wav"))
    parts, cores, at = [], [], 0
    for name in rng.choice(names, size=40, replace=False):
        x, rate = sf.read(folder / name, dtype="float32")
        assert rate == RATE
        loud = np.flatnonzero(np.abs(x) > 0.1 * np.abs(x).max())  # the digit itself, without its margins
        cores.append((at + loud[0], at + loud[-1] + 1))
        pause = np.zeros(int(rng.uniform(0.3, 1.0) * RATE), np.float32)
        parts += [x, pause]
        at += len(x) + len(pause)
    x = np.concatenate(parts)
    x += rng.normal(0, np.sqrt(np.mean(x**2)) / 10 ** 1.5, len(x)).astype(np.float32)
    windows = split_windows(x, RATE, max_seconds)
    assert all(w.end - w.start <= max_seconds * RATE for w in windows) and len(windows) >= len(x) / RATE / max_seconds
    for a, b in cores:
        assert sum(w.start <= a and b <= w.end for w in windows) == 1, (a / RATE, b / RATE)


def test_without_a_pause_windows_are_fixed_and_overlap():
    t = np.arange(30 * RATE) / RATE
    x = (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)  # 30 s of one tone: no pause
    windows = split_windows(x, RATE, max_seconds=8.0)
    assert windows[0].start == 0 and windows[-1].end == len(x) and len(windows) == 5
    assert all(w.end - w.start == 8 * RATE for w in windows)
    assert [w.overlaps_previous for w in windows] == [False] + [True] * 4
    assert all(a.end - b.start >= RATE for a, b in pairwise(windows))  # >= 1 s overlap
    assert join_texts(["one two three", "three four", "five"], windows[:3]) == "one two three four five"


def test_silent_windows_are_dropped():
    x, _, _, _ = long_recording(2, seed=2)
    silence = np.zeros(10 * RATE, np.float32)
    windows = split_windows(np.concatenate([x, silence, x]), RATE, max_seconds=3.0)
    covered = sum(w.end - w.start for w in windows)
    assert covered < len(x) * 2 + 5 * RATE and all(w.speech_end > w.speech_start for w in windows)


def test_word_times_share_the_voiced_span_in_order():
    times = word_times("one three", 1.0, 3.0)
    assert [w for w, _, _ in times] == ["one", "three"]
    assert times[0][1] == 1.0 and times[-1][2] == 3.0 and times[0][2] == times[1][1] == 1.75
    assert word_times("", 0.0, 1.0) == []


# --------------------------------------------------------------------------------------------
# A tiny trained model on tone words: a long file against its windows
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tone_model(tmp_path_factory):
    """A model trained 400 steps on 60 utterances of 1-3 tone words; model.encoder.max_seconds 2."""
    import yaml
    from click.testing import CliRunner

    from seq2seq.cli import cli

    root = tmp_path_factory.mktemp("long_audio")
    rng = np.random.default_rng(0)
    for split, n in (("train", 60), ("val", 8)):
        rows = ["audio\ttext"]
        (root / split).mkdir()
        for i in range(n):
            words = [str(w) for w in rng.choice(list(TONES), size=int(rng.integers(1, 4)))]
            sf.write(root / split / f"{i}.wav", utterance(words, rng)[0], RATE)
            rows.append(f"{split}/{i}.wav\t{' '.join(words)}")
        (root / f"{split}.tsv").write_text("\n".join(rows) + "\n")
    encoder = {"type": "audio", "sample_rate": RATE, "n_fft": 256, "win_length": 200, "hop_length": 80, "n_mels": 20,
               "conv_channels": 8, "freq_masks": 0, "time_masks": 0, "max_seconds": 2.0}
    cfg = {
        "data": {"train": str(root / "train.tsv"), "valid": str(root / "val.tsv")},
        "tokenizer": {"joint": False, "vocab_size": 16},
        "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "layers": 1, "dropout": 0.0, "encoder": encoder},
        "training": {"output_dir": str(root / "model"), "max_steps": 400, "valid_every": 400, "max_tokens": 400,
                     "lr": 0.003, "warmup_steps": 30, "device": "cpu", "threads": 1, "log_every": 100,
                     "best_metric": "loss", "seed": 1},
        "decoding": {"beam": 2},
    }
    (root / "config.yaml").write_text(yaml.safe_dump(cfg))
    result = CliRunner().invoke(cli, ["train", str(root / "config.yaml")])
    assert result.exit_code == 0, result.output
    return root / "model"


@pytest.fixture(scope="module")
def files(tone_model, tmp_path_factory):
    """A 20 s recording of 12 utterances (float WAV at the model's rate, so that its windows are
    exact slices), and three short utterances."""
    root = tmp_path_factory.mktemp("long_files")
    x, texts, _, gaps = long_recording(12, seed=3)
    sf.write(root / "long.wav", x, RATE, subtype="FLOAT")
    rng = np.random.default_rng(4)
    short = []
    for i, words in enumerate((["low"], ["mid", "high"], ["high", "low", "mid"])):
        sf.write(root / f"short{i}.wav", utterance(words, rng)[0], RATE)
        short.append(str(root / f"short{i}.wav"))
    return {"long": str(root / "long.wav"), "wave": x, "texts": texts, "gaps": gaps, "short": short, "dir": root}


def test_short_files_give_exactly_what_they_gave_before_windows(tone_model, files):
    from seq2seq.inference.generator import Generator, Transcriber

    transcriber = Transcriber.load(tone_model, device="cpu")
    before = Generator.load(tone_model, device="cpu")  # the generation loop without windows
    for options in ({}, {"beam": 3, "nbest": 2}, {"greedy": True}):
        ours = transcriber.generate(files["short"], **options)
        theirs = before.generate(files["short"], **options)
        assert [[h.to_json() for h in n] for n in ours] == [[h.to_json() for h in n] for n in theirs]
    with pytest.raises(ValueError, match="max_seconds=2"):  # a Generator decodes files whole: refused
        before.generate([files["long"]])


def test_a_long_file_is_the_join_of_its_windows(tone_model, files, tmp_path):
    from click.testing import CliRunner

    from seq2seq.cli import cli
    from seq2seq.inference.generator import Transcriber
    from seq2seq.text.metrics import wer

    transcriber = Transcriber.load(tone_model, device="cpu")
    assert transcriber.max_window_seconds == 2.0  # the model's encoder.max_seconds
    wave = transcriber.processor.load(files["long"]).numpy()
    windows = split_windows(wave, RATE, 2.0)
    assert len(windows) >= 10
    for before, after in pairwise(windows):  # cut in the silences between utterances
        assert any(before.end <= b and a <= after.start for a, b in files["gaps"])
    paths = []
    for k, w in enumerate(windows):  # each window as a file of its own
        paths.append(str(tmp_path / f"w{k}.wav"))
        sf.write(paths[-1], wave[w.start:w.end], RATE, subtype="FLOAT")
    per_window = transcriber.transcribe(paths)
    long_text = transcriber.transcribe([files["long"]])[0]
    assert long_text == " ".join(t for t in per_window if t)
    ref = " ".join(files["texts"])  # and the model hears the utterances it was trained on
    assert wer([long_text], [ref]) <= 35, (long_text, ref)

    # The command line: one line per input, the long file as its windows' join, the short ones as before
    sources = [files["short"][0], files["long"], *files["short"][1:]]
    runner = CliRunner()
    result = runner.invoke(cli, ["transcribe", str(tone_model), *sources, "--no-progress"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == len(sources)
    assert lines[1] == long_text
    assert [lines[0], *lines[2:]] == transcriber.transcribe(files["short"])

    result = runner.invoke(cli, ["transcribe", str(tone_model), *sources, "--timestamps", "--with-path"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == len(sources)
    path, timed = lines[1].split("\t")
    spans = re.findall(r"\[(\d+\.\d+)-(\d+\.\d+)\] ([^\[]*)", timed)
    assert path == files["long"] and len(spans) == len(windows)
    starts, ends = [float(a) for a, _, _ in spans], [float(b) for _, b, _ in spans]
    assert starts == sorted(starts) and all(e <= s + 1e-9 for e, s in zip(ends, starts[1:]))
    assert [round(w.start / RATE, 2) for w in windows] == starts
    assert " ".join(t.strip() for _, _, t in spans if t.strip()) == long_text

    result = runner.invoke(cli, ["transcribe", str(tone_model), *sources, "--timestamps", "--json"])
    objs = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(objs) == len(sources) and objs[1]["text"] == long_text
    segments = objs[1]["segments"]
    assert [s["text"] for s in segments] == per_window
    times = [t for s in segments for word in s["words"] for t in (word["start"], word["end"])]
    assert times == sorted(times) and segments[-1]["end"] == round(windows[-1].end / RATE, 3)
    assert len(objs[0]["segments"]) == 1 and objs[0]["segments"][0]["start"] == 0.0  # a short file: one window

    # a wider window than the file: decoded whole, as one utterance
    whole = runner.invoke(cli, ["transcribe", str(tone_model), files["long"], "--max-window-seconds", "60"])
    assert whole.exit_code == 0 and whole.stdout.strip() == transcriber.transcribe(
        [files["long"]], max_window_seconds=60)[0]
    assert transcriber.segments([files["long"]], max_window_seconds=60)[0][0].end == len(wave) / RATE


def test_recordings_without_pauses_and_bad_windows(tone_model, tmp_path, capsys):
    from click.testing import CliRunner

    from seq2seq.cli import cli
    from seq2seq.inference.generator import Transcriber

    rng = np.random.default_rng(5)
    hum = np.concatenate([tone_word("mid", rng) for _ in range(40)]).astype(np.float32)  # 4.8 s, no pause
    sf.write(tmp_path / "hum.wav", hum, RATE)
    transcriber = Transcriber.load(tone_model, device="cpu")
    [segments] = transcriber.segments([str(tmp_path / "hum.wav")], progress=True)
    assert len(segments) == 3 and all(b.start < a.end for a, b in pairwise(segments))  # fixed, overlapping
    assert "windows" in capsys.readouterr().err  # the progress bar
    for bad in (0, -1):
        with pytest.raises(ValueError, match="max_window_seconds"):
            transcriber.transcribe([str(tmp_path / "hum.wav")], max_window_seconds=bad)
    result = CliRunner().invoke(cli, ["transcribe", str(tone_model), str(tmp_path / "hum.wav"), "--max-window-seconds",
                                      "0"])
    assert result.exit_code == 2 and "max-window-seconds" in result.output


def test_a_recordings_steering_goes_to_its_windows_by_each_fields_rule():
    """The prefix starts the first window, banned phrases hold in every one, constraints need one window."""
    from seq2seq.inference.controls import SourceControls
    from seq2seq.inference.generator import Transcriber
    from seq2seq.inference.inputs import SourceInput
    from seq2seq.inference.steering import SteeringError

    steered = SourceControls(prefix=[5], avoid=[[7, 8]])
    got = Transcriber._window_controls(2, SourceInput("a.wav", "x", avoid=["y"]), steered, 3, 4)
    assert got == {(2, 0): steered, (2, 1): SourceControls(avoid=[[7, 8]]), (2, 2): SourceControls(avoid=[[7, 8]])}
    constrained = SourceControls(constraints=[[9]], avoid=[[7]])
    given = SourceInput("a.wav", constraints=["z"], avoid=["y"])
    assert Transcriber._window_controls(0, given, constrained, 1, 4) == {(0, 0): constrained}
    with pytest.raises(SteeringError) as e:
        Transcriber._window_controls(0, given, constrained, 2, 4)
    assert str(e.value) == ("line 4: constraints hold for a recording decoded in one window, but this one is split "
                            "into 2; raise --max-window-seconds (if the model allows)")
    assert (e.value.diagnostic.field, e.value.diagnostic.code) == ("constraints", "constraints_windowed")
