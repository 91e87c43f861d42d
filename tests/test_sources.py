"""Image/audio training data (seq2seq.data.media): tables of (file, text) rows, loading with a bad-file
policy, the target-only tokenizer, multi-reference validation and collation."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch

from seq2seq.config import ConfigError, DataConfig
from seq2seq.data import DataError
from seq2seq.model.encoders import Modality, SourceError, SourceProcessor
from seq2seq.model.encoders.sources import SourceKind
from seq2seq.data.media import collate_media, load_sources, prepare_media, read_source_table, source_lengths
from seq2seq.config import TokenizerConfig


class BytesProcessor(SourceProcessor):
    """A stand-in modality: a source file holds numbers; the example is their tensor."""

    kind = SourceKind("numbers", "numbers file")

    def load(self, path: str) -> torch.Tensor:
        p = Path(path)
        if not p.is_file():
            raise SourceError(f"{path}: file not found")
        text = p.read_text().split()
        if not text:
            raise SourceError(f"{path}: empty file")
        try:
            return torch.tensor([float(x) for x in text])
        except ValueError:
            raise SourceError(f"{path}: not a numbers file") from None

    def length(self, example: torch.Tensor) -> int:
        return int(example.numel())

    def collate(self, examples: list[torch.Tensor]) -> torch.Tensor:
        return torch.nn.utils.rnn.pad_sequence(examples, batch_first=True)


MODALITY = Modality("numbers", build_encoder=lambda cfg, shared: None, processor=lambda cfg: BytesProcessor())


def write_sources(root: Path, names_values: dict[str, str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name, value in names_values.items():
        (root / name).write_text(value)


def test_tsv_columns_default_to_conventional_names_and_paths_resolve_against_the_table(tmp_path):
    write_sources(tmp_path / "media", {"a.num": "1 2", "b.num": "3"})
    table = tmp_path / "media" / "train.tsv"
    table.write_text("image\tcaption\na.num\tone two\nb.num\tthree\n")
    rows = read_source_table(table, DataConfig(train=str(table)))
    assert [(Path(r.path), r.text) for r in rows] == [(tmp_path / "media" / "a.num", "one two"),
                                                       (tmp_path / "media" / "b.num", "three")]
    assert rows[1].where.endswith("train.tsv, row 3")  # the header is row 1


def test_media_root_overrides_the_table_directory_and_absolute_paths_stay(tmp_path):
    table = tmp_path / "t.csv"
    table.write_text(f"audio,text\nx.wav,hi\n{tmp_path / 'abs.wav'},there\n")
    rows = read_source_table(table, DataConfig(train=str(table), media_root="/data/wavs"))
    assert [r.path for r in rows] == ["/data/wavs/x.wav", str(tmp_path / "abs.wav")]


def test_jsonl_text_may_be_a_list_of_captions_and_gzip_is_read(tmp_path):
    table = tmp_path / "t.jsonl.gz"
    lines = [{"image": "a.png", "caption": ["a red circle", "a circle that is red"]}, {"image": "b.png", "caption": "x"}]
    with gzip.open(table, "wt") as f:
        f.write("\n".join(json.dumps(x) for x in lines) + "\n")
    rows = read_source_table(table, DataConfig(train=str(table)))
    assert [(Path(r.path).name, r.text) for r in rows] == [("a.png", "a red circle"), ("a.png", "a circle that is red"),
                                                          ("b.png", "x")]


@pytest.mark.parametrize("content, message", [
    ("image\tsentence_de\na.png\tx\n", "column 'tgt' not found"),
    ('{"image": "a.png", "caption": 3}\n', "must be a path string"),
    ("src\ttgt\n\tx\n", "row 2: empty numbers file path"),
])
def test_bad_tables_name_the_file_and_the_problem(tmp_path, content, message):
    table = tmp_path / ("t.jsonl" if content.startswith("{") else "t.tsv")
    table.write_text(content)
    with pytest.raises(DataError, match=message) as e:
        read_source_table(table, DataConfig(train=str(table)), noun="numbers file")
    assert str(table) in str(e.value)


def test_bad_files_fail_with_count_paths_and_the_skip_hint_or_are_skipped(tmp_path):
    write_sources(tmp_path, {"ok.num": "1", "empty.num": "", "text.num": "hello"})
    paths = [str(tmp_path / n) for n in ("ok.num", "empty.num", "missing.num", "text.num", "ok.num")]
    with pytest.raises(DataError) as e:
        load_sources(paths, BytesProcessor(), "fail", noun="numbers file")
    message = str(e.value)
    assert message.startswith("3 of 4 numbers files cannot be used")
    assert "empty.num: empty file" in message and "missing.num: file not found" in message
    assert "data.bad_sources=skip" in message
    examples, bad = load_sources(paths, BytesProcessor(), "skip")
    assert sorted(Path(p).name for p in examples) == ["ok.num"] and len(bad) == 3


def make_split(tmp_path: Path, rows: list[tuple[str, str]], name: str) -> Path:
    table = tmp_path / f"{name}.tsv"
    table.write_text("src\ttgt\n" + "".join(f"{a}\t{b}\n" for a, b in rows))
    return table


def test_prepare_media_skips_bad_files_groups_references_and_collates(tmp_path):
    values = {f"{i}.num": " ".join(["1"] * (i + 1)) for i in range(6)}
    write_sources(tmp_path, values)
    words = ["one", "two", "three", "four", "five", "six"]
    train = make_split(tmp_path, [(f"{i}.num", words[i]) for i in range(6)] + [("gone.num", "seven")]
                       + [("0.num", "")], "train")
    valid = make_split(tmp_path, [("1.num", "two"), ("1.num", "a second caption"), ("2.num", "three")], "valid")
    cfg = DataConfig(train=str(train), valid=str(valid), bad_sources="skip")
    data = prepare_media(cfg, TokenizerConfig(vocab_size=40), BytesProcessor(), tmp_path / "out")
    assert (tmp_path / "out" / "spm.model").is_file()
    assert len(data.train) == 6  # the missing file and the empty caption dropped
    assert "1 unreadable numbers files" in data.summary and "1 empty train texts" in data.summary
    assert data.valid is not None and len(data.valid) == 2  # one row per distinct source
    assert data.valid_references == [["two", "a second caption"], ["three"]]
    processor = BytesProcessor()
    assert source_lengths(data.train, processor) == [1, 2, 3, 4, 5, 6]
    batch = collate_media(data.train, processor, [0, 2])
    assert batch.src.shape == (2, 3) and batch.src[0].tolist() == [1.0, 0.0, 0.0]
    assert data.tokenizers.tgt.decode([batch.tgt_out[1, : batch.tgt_out[1].ne(0).sum() - 1].tolist()]) == ["three"]
    assert batch.n_tgt_tokens == int(batch.tgt_out.ne(0).sum()) and batch.indices == [0, 2]


def test_prepare_media_refuses_text_only_keys_and_missing_tables(tmp_path):
    with pytest.raises(ConfigError, match="set data.train"):
        prepare_media(DataConfig(), TokenizerConfig(), BytesProcessor(), tmp_path)
    cfg = DataConfig(train=str(tmp_path / "t.tsv"), valid_src="a", valid_tgt="b")
    with pytest.raises(ConfigError, match="data.valid_src is for text sources"):
        prepare_media(cfg, TokenizerConfig(), BytesProcessor(), tmp_path)
    with pytest.raises(DataError, match="data file not found"):
        prepare_media(DataConfig(train=str(tmp_path / "t.tsv")), TokenizerConfig(), BytesProcessor(), tmp_path)


def test_unknown_encoder_type_and_keys_are_refused_by_name():
    from seq2seq.config import load_config

    with pytest.raises(ConfigError, match="unknown encoder type 'video'; choose one of .*'audio'.*'image'.*'text'"):
        load_config(None, ["model.encoder.type=video"])
    with pytest.raises(ConfigError, match="unknown config key 'model.encoder.patch'"):
        load_config(None, ["model.encoder.type=text", "model.encoder.patch=3"])


def test_only_recordings_are_windowed_sources_and_the_transcriber_needs_one():
    from seq2seq.config import EncoderConfig
    from seq2seq.model.encoders.audio import AudioEncoderConfig, AudioProcessor
    from seq2seq.model.encoders.image import ImageEncoderConfig, ImageProcessor
    from seq2seq.model.encoders.sources import PrefixedSource, WindowedSource
    from seq2seq.model.encoders.text_processor import TextProcessor

    audio = AudioProcessor(AudioEncoderConfig(sample_rate=8000))
    assert isinstance(audio, WindowedSource) and not isinstance(audio, PrefixedSource)
    wave = torch.zeros(8000 * 3)
    wave[:8000] = wave[16000:] = 0.5  # a pause in the middle second
    windows = audio.split(wave, 2.0)
    assert len(windows) >= 2 and all(w.end - w.start <= 2 * 8000 for w in windows)
    assert torch.equal(audio.crop(wave, windows[0]), wave[windows[0].start:windows[0].end])
    for whole in (ImageProcessor(ImageEncoderConfig()), TextProcessor(EncoderConfig()), BytesProcessor()):
        assert not isinstance(whole, WindowedSource), type(whole).__name__  # decoded whole: no split to call
        assert not hasattr(whole, "split") and not hasattr(whole, "crop")
