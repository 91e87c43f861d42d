"""Tests for seq2seq.data: readers and their errors, cleaning counts, prepare and its cache."""

from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path

import datasets
import numpy as np
import pytest

from seq2seq.config import ConfigError, from_dict
from seq2seq.data import (
    CleaningReport, DataConfig, DataError, fingerprint, hf_pairs, keep_mask, prepare, read_lines,
    read_parallel, read_table, truncate_ids,
)
from seq2seq.data.shared_cache import default_cache_root
from seq2seq.text.tokenizer import BOS_ID, EOS_ID, JOINT_MODEL
from seq2seq.config import TokenizerConfig


def write(path: Path, text: str | bytes) -> Path:
    data = text.encode("utf-8") if isinstance(text, str) else text
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


# ---------------------------------------------------------------------------- reading


def test_mismatched_line_counts_name_both_files(tmp_path: Path) -> None:
    src = write(tmp_path / "a.en", "one\ntwo\nthree\n")
    tgt = write(tmp_path / "a.de", "eins\nzwei\n")
    with pytest.raises(DataError) as info:
        read_parallel(src, tgt)
    msg = str(info.value)
    assert str(src) in msg and str(tgt) in msg and "3 lines" in msg and "2 lines" in msg


def test_bad_utf8_names_file_and_line(tmp_path: Path) -> None:
    src = write(tmp_path / "bad.en", b"fine\nalso fine\nbroken \xff\xfe here\nfine again\n")
    with pytest.raises(DataError, match=r"bad\.en, line 3: invalid UTF-8"):
        read_lines(src)
    gz = write(tmp_path / "bad.en.gz", b"ok\n\xff\xfe\n")
    with pytest.raises(DataError, match=r"bad\.en\.gz, line 2"):
        read_parallel(gz, gz)


def test_missing_file(tmp_path: Path) -> None:
    tgt = write(tmp_path / "b.de", "x\n")
    with pytest.raises(DataError, match=r"not found: .*nope\.en"):
        read_parallel(tmp_path / "nope.en", tgt)
    with pytest.raises(DataError, match="not found"):
        read_table(tmp_path / "nope.tsv")


def test_empty_corpus(tmp_path: Path) -> None:
    empty = write(tmp_path / "empty.en", "")
    with pytest.raises(DataError, match=r"empty\.en is empty"):
        read_parallel(empty, empty)
    with pytest.raises(DataError, match="empty"):
        read_table(write(tmp_path / "empty.jsonl", "\n"))


def test_gz_crlf_bom_and_whitespace(tmp_path: Path) -> None:
    src = write(tmp_path / "c.en.gz", "\ufeffHello world  \r\nsecond\rline\r\n\n")
    tgt = write(tmp_path / "c.de.gz", "Hallo Welt\nzweite Zeile\n\n")
    ds = read_parallel(src, tgt)
    assert ds.column_names == ["src", "tgt"]
    # a lone \r does not split a line (it would break alignment); the empty last line is kept
    assert ds["src"][:] == ["Hello world", "second line", ""]
    assert ds["tgt"][:] == ["Hallo Welt", "zweite Zeile", ""]


def test_tsv_with_and_without_header(tmp_path: Path) -> None:
    no_header = write(tmp_path / "a.tsv", "Hello\tHallo\textra\nBye\tTschüss\n")
    assert read_table(no_header)[:] == {"src": ["Hello", "Bye"], "tgt": ["Hallo", "Tschüss"]}
    header = write(tmp_path / "b.tsv.gz", "id\tde\ten\n1\tHallo\tHello\n2\t\"Tschüss\"\tBye\n")
    ds = read_table(header, src_column="en", tgt_column="de")
    assert ds[:] == {"src": ["Hello", "Bye"], "tgt": ["Hallo", '"Tschüss"']}  # TSV: quotes are text
    short = write(tmp_path / "c.tsv", "a\tb\nonly one column\n")
    with pytest.raises(DataError, match=r"c\.tsv, line 2: expected at least 2 columns, found 1"):
        read_table(short)


def test_csv_quoting(tmp_path: Path) -> None:
    path = write(tmp_path / "d.csv", 'src,tgt\n"Hello, world","Hallo, Welt"\n"say ""hi""",sag hallo\n')
    assert read_table(path)[:] == {"src": ["Hello, world", 'say "hi"'], "tgt": ["Hallo, Welt", "sag hallo"]}


def test_missing_column_lists_available_columns(tmp_path: Path) -> None:
    tsv = write(tmp_path / "e.tsv", "en\tde\nHello\tHallo\n")
    with pytest.raises(DataError, match=r"e\.tsv: column 'fr' not found; available columns: en, de"):
        read_table(tsv, src_column="en", tgt_column="fr")
    jsonl = write(tmp_path / "f.jsonl", json.dumps({"english": "Hi", "german": "Hallo"}) + "\n")
    with pytest.raises(DataError, match=r"f\.jsonl, line 1: column 'src' not found; available columns: english, german"):
        read_table(jsonl)


def test_jsonl_plain_and_translation_rows(tmp_path: Path) -> None:
    rows = [{"src": "Hello", "tgt": "Hallo"}, {"translation": {"en": "x", "de": "y"}}]
    path = write(tmp_path / "g.jsonl", "\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(DataError, match="line 2: column 'src' not found"):
        read_table(path)
    path = write(tmp_path / "h.jsonl", json.dumps({"translation": {"en": "Hello", "de": "Hallo"}}) + "\n{oops\n")
    with pytest.raises(DataError, match=r"h\.jsonl, line 2: invalid JSON"):
        read_table(path, "en", "de")
    path = write(tmp_path / "i.jsonl", json.dumps({"translation": {"en": "Hello", "de": "Hallo"}}) + "\n")
    assert read_table(path, "en", "de")[:] == {"src": ["Hello"], "tgt": ["Hallo"]}


def test_hf_translation_style_rows() -> None:
    ds = datasets.Dataset.from_list([{"translation": {"de": "Hallo", "en": "Hello"}},
                                     {"translation": {"de": "Welt", "en": "World"}}])
    assert hf_pairs(ds, "en", "de")[:] == {"src": ["Hello", "World"], "tgt": ["Hallo", "Welt"]}
    with pytest.raises(DataError, match="column 'fr' not found; available columns: translation, translation.de"):
        hf_pairs(ds, "en", "fr")
    flat = datasets.Dataset.from_dict({"de": ["a"], "en": ["b"]})
    assert hf_pairs(flat, "en", "de")[:] == {"src": ["b"], "tgt": ["a"]}


def test_fingerprint_depends_on_content_only(tmp_path: Path) -> None:
    a = write(tmp_path / "a.txt", "same\n")
    b = write(tmp_path / "b.txt", "same\n")
    c = write(tmp_path / "c.txt", "other\n")
    assert fingerprint([a]) == fingerprint([b]) != fingerprint([c])
    assert fingerprint([a, c]) != fingerprint([c, a])


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="train_src and data.train_tgt"):
        from_dict(DataConfig, {"train_src": "a.en"})
    with pytest.raises(ConfigError, match="unknown config key 'max_lenght'"):
        from_dict(DataConfig, {"max_lenght": 3})
    with pytest.raises(ConfigError, match="no training data"):
        DataConfig().validate()


# ---------------------------------------------------------------------------- cleaning


def counts(pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """The (src, tgt) subword counts of the pairs as keep_mask takes them: shapes [N], [N]."""
    return np.array([s for s, _ in pairs]), np.array([t for _, t in pairs])


def test_clean_counts_are_exact() -> None:
    pairs = [
        (3, 4), (10, 10),        # kept
        (0, 5), (5, 0), (0, 0),  # empty
        (11, 5), (5, 11),        # over max_len=10 (and (11, 2) is too long before bad ratio)
        (11, 2),
        (2, 7), (9, 2),          # ratio 3.5 and 4.5 > 3
        (1, 5), (5, 1),          # ratio 5 but short: exempt
        (3, 9),                  # ratio exactly 3: kept
    ]
    keep, report = keep_mask(*counts(pairs), max_len=10, max_ratio=3.0)
    assert (report.total, report.kept, report.empty, report.too_long, report.bad_ratio) == (13, 5, 3, 3, 2)
    assert [pairs[i][0] for i in np.flatnonzero(keep)] == [3, 10, 1, 5, 3]
    assert report.summary() == "kept 5 of 13 pairs; dropped 3 empty, 3 over 10 tokens, 2 with length ratio > 3.0"
    assert CleaningReport(total=29000, kept=29000).summary() == "kept 29,000 of 29,000 pairs"


def test_clean_dropping_everything_is_an_error(tmp_path: Path) -> None:
    train_src = write(tmp_path / "t.en", "a\n" + "b " * 40 + "\n")
    train_tgt = write(tmp_path / "t.de", "\n" + "c " * 40 + "\n")
    cfg = DataConfig(train_src=str(train_src), train_tgt=str(train_tgt), max_len=10, cache_dir=str(tmp_path / "c"))
    with pytest.raises(DataError, match="dropped every training pair"):
        prepare(cfg, TokenizerConfig(vocab_size=30, model_type="char"), tmp_path / "out")


def test_truncate_keeps_every_pair_and_the_source_eos() -> None:
    src = [[4, 5, 6, EOS_ID], list(range(4, 16)) + [EOS_ID]]
    tgt = [[4, 5, 6], list(range(4, 19))]
    cut_src, cut_tgt, report = truncate_ids(src, tgt, max_len=10)
    assert (report.total, report.kept, report.truncated) == (2, 2, 1)
    assert cut_src == [[4, 5, 6, EOS_ID], list(range(4, 14)) + [EOS_ID]]
    assert cut_tgt == [[4, 5, 6], list(range(4, 14))]
    tagged, _, report = truncate_ids([[1] + s for s in src], tgt, max_len=10, n_prefix=1)  # a tag is never cut
    assert tagged[1] == [1] + list(range(4, 14)) + [EOS_ID] and report.truncated == 1


# ---------------------------------------------------------------------------- prepare


WORDS = "the a cat dog sat ran on in park mat house red blue big small green tree water".split()


def corpus(tmp_path: Path, n: int, seed: int, name: str) -> tuple[Path, Path]:
    rng = random.Random(seed)
    src = [" ".join(rng.choices(WORDS, k=rng.randint(2, 12))) for _ in range(n)]
    tgt = [s.upper() for s in src]
    src[0] = ""  # one empty pair, dropped in train, kept in valid
    return write(tmp_path / f"{name}.en.gz", "\n".join(src) + "\n"), write(tmp_path / f"{name}.de", "\n".join(tgt) + "\n")


def test_prepare_builds_then_reuses_cache(tmp_path: Path) -> None:
    train_src, train_tgt = corpus(tmp_path, 300, 0, "train")
    valid_src, valid_tgt = corpus(tmp_path, 20, 1, "valid")
    cfg = DataConfig(train_src=str(train_src), train_tgt=str(train_tgt), valid_src=str(valid_src),
                     valid_tgt=str(valid_tgt), max_len=8)
    tok_cfg = TokenizerConfig(vocab_size=70)
    out = tmp_path / "out"
    first = prepare(cfg, tok_cfg, out, tmp_path / "cache")
    assert not first.from_cache and (out / JOINT_MODEL).is_file()
    assert first.report.total == 300 and first.report.empty == 1 and first.report.too_long > 0
    assert len(first.train) == first.report.kept
    assert len(first.valid) == 20 and first.valid_report.truncated > 0  # valid is complete, truncated
    row = first.train[0]
    assert row["src_ids"][-1] == EOS_ID and EOS_ID not in row["src_ids"][:-1]
    assert BOS_ID not in row["tgt_ids"] and EOS_ID not in row["tgt_ids"]
    assert row["src_len"] == len(row["src_ids"]) and row["tgt_len"] == len(row["tgt_ids"]) + 1
    assert first.tokenizers.tgt.decode([row["tgt_ids"]]) == [row["tgt"]]
    assert max(first.train["src_len"][:]) <= 8 + 1 and max(first.valid["src_len"][:]) <= 8 + 1

    model_mtime = (out / JOINT_MODEL).stat().st_mtime_ns
    second = prepare(cfg, tok_cfg, out, tmp_path / "cache")
    assert second.from_cache and second.fingerprint == first.fingerprint
    assert (out / JOINT_MODEL).stat().st_mtime_ns == model_mtime  # tokenizer reused, not retrained
    assert second.train[:] == first.train[:] and second.valid[:] == first.valid[:]
    assert second.report == first.report

    # a changed setting gives a new cache entry; a changed tokenizer setting retrains
    third = prepare(DataConfig(**{**cfg.__dict__, "max_len": 1000}), tok_cfg, out, tmp_path / "cache")
    assert not third.from_cache and third.fingerprint != first.fingerprint and third.report.too_long == 0
    fourth = prepare(cfg, TokenizerConfig(vocab_size=50), out, tmp_path / "cache")
    assert fourth.tokenizers.src.vocab_size == 50 and fourth.fingerprint not in (first.fingerprint, third.fingerprint)


def test_prepare_from_tsv_lowercased_without_valid(tmp_path: Path) -> None:
    rng = random.Random(3)
    lines = [f"{' '.join(rng.choices(WORDS, k=5)).title()}\t{' '.join(rng.choices(WORDS, k=6))}" for _ in range(200)]
    path = write(tmp_path / "train.tsv", "src\ttgt\n" + "\n".join(lines) + "\n")
    cfg = DataConfig(train=str(path), lowercase=True)
    data = prepare(cfg, TokenizerConfig(joint=False, vocab_size=60), tmp_path / "out")
    assert data.valid is None and data.report.kept == 200
    assert data.train["src"][0] == lines[0].split("\t")[0].lower()
    assert not data.tokenizers.joint and not (tmp_path / "out" / "cache").exists()
    assert data.cache_path.parent == default_cache_root() == Path(os.environ["SEQ2SEQ_CACHE"]) / "data"


def test_prepare_from_hf_dataset_translation_rows(tmp_path: Path, monkeypatch) -> None:
    rng = random.Random(4)
    splits = {
        name: datasets.Dataset.from_list([
            {"translation": {"en": " ".join(rng.choices(WORDS, k=6)), "de": " ".join(rng.choices(WORDS, k=7))}}
            for _ in range(n)
        ])
        for name, n in (("train", 150), ("validation", 10))
    }
    calls = []

    def fake_load_dataset(name, config=None, split=None):  # no network in tests
        calls.append((name, config, split))
        if split not in splits:
            raise ValueError(f'Unknown split "{split}". Should be one of {list(splits)}.')
        return splits[split]

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    cfg = DataConfig(hf_dataset="wmt/toy", hf_config="de-en", src_column="en", tgt_column="de")
    data = prepare(cfg, TokenizerConfig(vocab_size=50), tmp_path / "out")
    assert ("wmt/toy", "de-en", "train") in calls and ("wmt/toy", "de-en", "validation") in calls
    assert len(data.train) == 150 and len(data.valid) == 10
    assert data.valid["src"][0] == splits["validation"][0]["translation"]["en"]
    bad = DataConfig(hf_dataset="wmt/toy", hf_valid_split="dev", src_column="en", tgt_column="de")
    with pytest.raises(DataError, match="wmt/toy.*'dev'.*Unknown split"):
        prepare(bad, TokenizerConfig(vocab_size=50), tmp_path / "out")


# ---------------------------------------------------------------------------- the package's surface


def test_package_re_exports_what_its_users_import() -> None:
    """seq2seq.data is a package (readers, cleaning, cache); the names the recipes, seq2seq.training.experiment,
    seq2seq.data.media and these tests import from it stay there, as the same objects."""
    import seq2seq.config.data_section
    import seq2seq.data as data
    from seq2seq.data import cache, cleaning, readers

    assert data.DataConfig is seq2seq.config.data_section.DataConfig
    assert data.DataError is readers.DataError and issubclass(data.DataError, ValueError)
    assert (data.read_table, data.read_lines, data.fingerprint, data.read_text) == (
        readers.read_table, readers.read_lines, readers.fingerprint, readers.read_text)
    assert (data.keep_mask, data.truncate_ids, data.CleaningReport) == (
        cleaning.keep_mask, cleaning.truncate_ids, cleaning.CleaningReport)
    assert (data.prepare, data.PreparedData) == (cache.prepare, cache.PreparedData)
    assert all(hasattr(data, name) for name in data.__all__)
