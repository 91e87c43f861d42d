"""Back-translation and distillation corpora (`seq2seq back-translate`, `seq2seq distill`,
seq2seq.corpora.translation) and the word noise of noised back-translation, on the session's
tiny model (`tiny_model_dir`, English -> German: here it plays the reverse model of English text)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from seq2seq.cli import cli
from seq2seq.corpora.translation import (
    CORPUS_FILE, FILTERS, PARTIAL, SRC_FILE, STATE_FILE, SUMMARY_FILE, TGT_FILE, CorpusJob, CorpusTranslation,
    chunk_seed,
)
from seq2seq.corpora.noise import WordNoise, bounded_permutation, noise_line, noise_words
from seq2seq.inference.results import Translation
from seq2seq.inference.translator import Translator

ROOT = Path(__file__).resolve().parents[1]


def run(args, **kw):
    return CliRunner().invoke(cli, [str(a) for a in args], **kw)


def one_line_error(result, *parts: str) -> str:
    """The `Error: ...` line of a refused command: exit 1, one line, holding `parts`."""
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for part in parts:
        assert part in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def translator(tiny_model_dir) -> Translator:
    return Translator.load(tiny_model_dir, device="cpu")


@pytest.fixture(scope="module")
def mono(multi30k_small, tmp_path_factory) -> Path:
    """60 English lines, with two blank lines among them: the 'monolingual' file."""
    lines = multi30k_small["val.en"].read_text(encoding="utf-8").splitlines()
    path = tmp_path_factory.mktemp("mono") / "mono.en"
    path.write_text("\n".join(lines[:20] + ["", "   "] + lines[20:]) + "\n", encoding="utf-8")
    return path


def outputs(directory: Path) -> tuple[bytes, bytes]:
    return (directory / SRC_FILE).read_bytes(), (directory / TGT_FILE).read_bytes()


# --------------------------------------------------------------------------------------------
# word noise
# --------------------------------------------------------------------------------------------


def test_bounded_permutation_moves_no_word_further_than_k():
    rng = np.random.default_rng(0)
    moved = Counter()
    for n in (2, 3, 7, 40):
        for k in (1, 2, 3, 5):
            for _ in range(200):
                order = bounded_permutation(n, k, rng)
                assert sorted(order) == list(range(n))
                shifts = np.abs(order - np.arange(n))
                assert shifts.max() <= k
                moved[k] += int(shifts.max() == k)
    assert all(moved[k] > 0 for k in (1, 2, 3))  # the bound is reached, not just respected


def test_noise_rates_are_about_right_and_zero_rates_are_the_identity():
    rng = np.random.default_rng(1)
    words = [f"w{i}" for i in range(20)]
    total, kept, blanks = 0, 0, 0
    for _ in range(1000):
        out = noise_words(words, rng, WordNoise(0.1, 0.1, 3))
        total += len(words)
        kept += len(out)
        blanks += out.count("<BLANK>")
        swapped = noise_words(words, rng, WordNoise(0, 0, 3))  # swaps alone: each word within 3 places
        assert max(abs(p - int(w[1:])) for p, w in enumerate(swapped)) <= 3 and sorted(swapped) == sorted(words)
    assert abs(1 - kept / total - 0.1) < 0.01  # deletions
    assert abs(blanks / kept - 0.1) < 0.01  # fillers, of the words kept
    line = "a man rides a red bike ."
    assert noise_line(line, rng, WordNoise(0, 0, 0)) == line
    assert sorted(noise_line(line, rng, WordNoise(0, 0, 3)).split()) == sorted(line.split())
    assert noise_line("", rng) == ""
    assert noise_words(["one"], np.random.default_rng(2), WordNoise(0.99, 0, 0)) == ["one"]
    same = [noise_line(line, np.random.default_rng([7, 3])) for _ in range(2)]
    assert same[0] == same[1]  # seeded
    with pytest.raises(ValueError, match="delete"):
        WordNoise(delete=1.0)


def test_chunk_seeds_depend_on_seed_and_chunk_only():
    assert chunk_seed(1, 0) == chunk_seed(1, 0) != chunk_seed(1, 1) != chunk_seed(2, 1)
    assert 0 <= chunk_seed(123, 456) < 2**63


# --------------------------------------------------------------------------------------------
# resuming: a stopped run, continued, writes what an uninterrupted one writes
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["beam", "sample", "noised-beam"])
def test_a_resumed_run_is_byte_identical_to_an_uninterrupted_one(translator, mono, tmp_path, method):
    def job(out: Path) -> CorpusTranslation:
        return CorpusTranslation(translator, CorpusJob(str(mono), str(out), method=method, chunk_lines=8, seed=3,
                                                       search={"min_len": 2, "beam": 2} if method != "sample"
                                                       else {"min_len": 2, "topk": 10}), models="m")

    whole = job(tmp_path / "whole").run()
    stopped = job(tmp_path / "resumed").run(stop_after_chunks=3)
    assert not stopped["finished"] and stopped["lines_consumed"] == 24
    # As if killed after a chunk's lines were written but before state.json recorded them:
    with open(tmp_path / "resumed" / (SRC_FILE + PARTIAL), "ab") as f:
        f.write(b"half a chunk\n")
    assert not (tmp_path / "resumed" / SRC_FILE).exists()
    stopped = job(tmp_path / "resumed").run(stop_after_chunks=2)  # stopped twice
    resumed = job(tmp_path / "resumed").run()
    assert outputs(tmp_path / "resumed") == outputs(tmp_path / "whole")
    assert resumed["counts"] == whole["counts"]
    src, tgt = (x.decode().splitlines() for x in outputs(tmp_path / "whole"))
    assert len(src) == len(tgt) == whole["counts"]["pairs"] > 0
    assert whole["counts"]["input_lines"] == 62 and whole["counts"]["empty_input"] == 2
    assert sum(whole["counts"][k] for k in FILTERS) + whole["counts"]["pairs"] == 62
    mono_lines = [line.strip() for line in mono.read_text(encoding="utf-8").splitlines()]
    assert all(t in mono_lines for t in tgt)  # targets are the monolingual lines, in order
    assert [mono_lines.index(t) for t in tgt] == sorted(mono_lines.index(t) for t in tgt)
    assert not (tmp_path / "resumed" / STATE_FILE).exists()
    assert json.loads((tmp_path / "resumed" / SUMMARY_FILE).read_text())["finished"]
    # The finished directory: the same command again does nothing.
    assert job(tmp_path / "resumed").run()["counts"] == whole["counts"]
    if method == "noised-beam":
        assert any("<BLANK>" in s for s in src)
    if method == "sample":
        other = CorpusTranslation(translator, CorpusJob(str(mono), str(tmp_path / "seed4"), method=method,
                                                        chunk_lines=8, seed=4, search={"min_len": 2, "topk": 10}),
                                  models="m").run()
        assert other["counts"]["input_lines"] == 62
        assert outputs(tmp_path / "seed4") != outputs(tmp_path / "whole")


def test_a_killed_command_continues_where_it_stopped(tiny_model_dir, multi30k_small, tmp_path):
    """SIGKILL of `seq2seq back-translate` mid-run, then the same command: the files of an uninterrupted run."""
    lines = multi30k_small["train.en"].read_text(encoding="utf-8").splitlines()[:160]
    source = tmp_path / "mono.en"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    args = ["back-translate", tiny_model_dir, "-i", source, "--method", "sample", "--chunk-lines", "4",
            "--min-len", "2", "--device", "cpu", "--no-progress"]
    assert run([*args, "-o", tmp_path / "whole"]).exit_code == 0
    command = [sys.executable, "-m", "seq2seq", *map(str, args), "-o", str(tmp_path / "killed")]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = tmp_path / "killed" / STATE_FILE
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        try:
            if json.loads(state.read_text())["lines_consumed"] >= 8:
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    consumed = json.loads(state.read_text())["lines_consumed"]
    assert 8 <= consumed < 160, "the run was not killed mid-way"
    result = run([*args, "-o", tmp_path / "killed"])
    assert result.exit_code == 0, result.output
    assert outputs(tmp_path / "killed") == outputs(tmp_path / "whole")


def test_other_settings_or_another_input_are_refused_in_one_line(tiny_model_dir, mono, tmp_path):
    base = ["back-translate", tiny_model_dir, "-i", mono, "-o", tmp_path / "out", "--chunk-lines", "8",
            "--device", "cpu", "--min-len", "2"]
    translator = Translator.load(tiny_model_dir, device="cpu")
    from seq2seq.corpora.fingerprint import model_fingerprint

    job = CorpusJob(str(mono), str(tmp_path / "out"), chunk_lines=8, search={"min_len": 2}, seed=1)
    CorpusTranslation(translator, job, model_fingerprint([tiny_model_dir])).run(stop_after_chunks=2)
    one_line_error(run([*base, "--beam", "3"]), "other settings", "search")
    one_line_error(run([*base, "--method", "sample"]), "other settings", "method")
    changed = tmp_path / "changed.en"
    changed.write_text("something else\n" + mono.read_text(encoding="utf-8"), encoding="utf-8")
    one_line_error(run([*base[:2], "-i", changed, *base[4:]]), "is not the input this run started on")
    result = run(base)  # the same command continues
    assert result.exit_code == 0, result.output
    one_line_error(run([*base, "--max-ratio", "2"]), "a finished corpus", "max_ratio")


# --------------------------------------------------------------------------------------------
# filters and bad input
# --------------------------------------------------------------------------------------------


class Scripted:
    """A translator whose outputs are scripted by the input line: the real model's tokenizers and
    config, `translate_nbest` replaced."""

    def __init__(self, real: Translator, script: dict[str, str]) -> None:
        self.real, self.script = real, script
        self.members, self.loaded, self.languages = real.members, real.loaded, real.languages

    def search_config(self, **options):
        return self.real.search_config(**options)

    def translate_nbest(self, texts, **kw):
        out = []
        for text in texts:
            hyp = self.script[text]
            out.append([Translation(text=hyp, score=0.0, logprob=0.0, token_ids=list(range(len(hyp.split()))),
                                    pieces=[], token_logprobs=[])] if hyp else [])
        return out


def test_each_filter_drops_the_pair_from_both_sides_and_is_counted(translator, tmp_path):
    long_words = " ".join(["word"] * 60)  # (the scripted outputs count a token a word; the inputs are subwords)
    script = {"a dog runs .": "ein hund rennt .", "same text here": "same  text here", "no output": "",
              "two words": long_words, "a cat sleeps on the mat .": "eine katze schläft auf der matte .",
              "a b c": "x y z w v u"}
    lines = ["a dog runs .", "", "same text here", "no output", "two words", "too " * 40,
             "a cat sleeps on the mat .", "a b c"]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    summary = CorpusTranslation(Scripted(translator, script),
                                CorpusJob(str(source), str(tmp_path / "bt"), chunk_lines=3, max_len=30),
                                models="m").run()
    assert summary["counts"] == {"input_lines": 8, "pairs": 3, "empty_input": 1, "too_long_input": 1,
                                 "empty_output": 1, "copy": 1, "bad_ratio": 1}
    src, tgt = (x.decode().splitlines() for x in outputs(tmp_path / "bt"))
    assert src == ["ein hund rennt .", "eine katze schläft auf der matte .", "x y z w v u"]
    assert tgt == ["a dog runs .", "a cat sleeps on the mat .", "a b c"]
    summary = CorpusTranslation(Scripted(translator, script),
                                CorpusJob(str(source), str(tmp_path / "kd"), direction="distill", chunk_lines=3,
                                          max_len=30), models="m").run()
    src, tgt = (x.decode().splitlines() for x in outputs(tmp_path / "kd"))
    assert src == ["a dog runs .", "a cat sleeps on the mat .", "a b c"] and tgt[0] == "ein hund rennt ."


@pytest.mark.parametrize("bad", [b"caf\xe9 au lait", b"\x00\x01\x02\xff binary"])
def test_bad_input_stops_in_one_line_naming_file_and_line_and_loses_nothing(tiny_model_dir, mono, tmp_path, bad):
    lines = mono.read_bytes().splitlines()
    broken = tmp_path / "broken.en"
    broken.write_bytes(b"\n".join(lines[:13] + [bad] + lines[13:]) + b"\n")
    args = ["back-translate", tiny_model_dir, "-i", broken, "-o", tmp_path / "out", "--chunk-lines", "4",
            "--device", "cpu", "--min-len", "2"]
    error = one_line_error(run(args), str(broken), "line 14")
    assert "UTF-8" in error or "NUL" in error
    state = json.loads((tmp_path / "out" / STATE_FILE).read_text())
    assert state["lines_consumed"] == 12  # the chunks before the bad line are kept
    broken.write_bytes(b"\n".join(lines[:13] + [b"fixed line ."] + lines[13:]) + b"\n")
    assert run(args).exit_code == 0  # fixed after the consumed lines: the run continues
    fresh = tmp_path / "fresh"
    assert run([*args[:5], fresh, *args[6:]]).exit_code == 0
    assert outputs(tmp_path / "out") == outputs(fresh)


# --------------------------------------------------------------------------------------------
# languages, tokenizers, the commands' files
# --------------------------------------------------------------------------------------------


def en_de_model(tiny_model_dir: Path, root: Path, multi30k_small) -> Path:
    """A copy of the tiny model whose config says it translates en -> de (data.corpora languages)."""
    model = Path(shutil.copytree(tiny_model_dir, root / "en-de", ignore=shutil.ignore_patterns("checkpoints")))
    config = yaml.safe_load((model / "config.yaml").read_text(encoding="utf-8"))
    data = config["data"]
    data["corpora"] = [{"train_src": data.pop("train_src"), "train_tgt": data.pop("train_tgt"),
                        "src_lang": "en", "tgt_lang": "de"}]
    (model / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return model


def test_a_reverse_model_of_other_languages_is_refused(tiny_model_dir, mono, multi30k_small, tmp_path):
    model = en_de_model(tiny_model_dir, tmp_path, multi30k_small)
    args = ["back-translate", model, "-i", mono, "--device", "cpu", "--min-len", "2", "--tag"]
    one_line_error(run([*args, "-o", tmp_path / "fr", "--mono-lang", "fr"]), "translates from en", "--mono-lang fr")
    assert not (tmp_path / "fr").exists()
    result = run([*args, "-o", tmp_path / "en", "--mono-lang", "en"])
    assert result.exit_code == 0, result.output
    entry = yaml.safe_load((tmp_path / "en" / CORPUS_FILE).read_text())["data"]["corpora"][0]
    assert entry["src_lang"] == "de" and entry["tgt_lang"] == "en" and entry["tag"] == "<BT>"
    one_line_error(run([*args, "-o", tmp_path / "x", "--tgt-lang", "de"]), "one language")
    misuse = run([*args, "-o", tmp_path / "y", "--topk", "5"])  # a usage error, as translate's
    assert misuse.exit_code == 2 and "Error: --topk: only with --method sample" in misuse.output


def test_distill_refuses_a_student_with_another_tokenizer_and_prints_the_train_command(tiny_model_dir, mono,
                                                                                        tmp_path):
    other = tmp_path / "other.model"
    other.write_bytes((tiny_model_dir / "spm.model").read_bytes() + b"x")
    student = tmp_path / "student.yaml"
    student.write_text(yaml.safe_dump({"tokenizer": {"src_model": str(other)}, "model": {"decoder_layers": 1}}))
    args = ["distill", tiny_model_dir, "-i", mono, "--device", "cpu", "--min-len", "2", "--student-config", student]
    error = one_line_error(run([*args, "-o", tmp_path / "refused"]), "is not the teacher's tokenizer",
                           f"tokenizer.src_model={tiny_model_dir / 'spm.model'}")
    assert str(other) in error and not (tmp_path / "refused").exists()
    shutil.copy(tiny_model_dir / "spm.model", other)  # the same bytes: accepted
    result = run([*args, "-o", tmp_path / "kd"])
    assert result.exit_code == 0, result.output
    assert "seq2seq train" in result.output and f"data.train_src={(tmp_path / 'kd' / SRC_FILE)}" in result.output
    src = (tmp_path / "kd" / SRC_FILE).read_text().splitlines()
    assert set(src) <= {line.strip() for line in mono.read_text().splitlines()}  # sources are the input lines


def test_distill_references_add_the_real_pairs_to_the_student_command(tiny_model_dir, mono, tmp_path):
    """--references: refused unless parallel to the input (before any translation); else the printed
    command trains on two data.corpora entries, the teacher's pairs and the real ones, and loads."""
    import shlex

    from seq2seq.config import load_config

    student = ROOT / "configs" / "student_fast.yaml"
    args = ["distill", tiny_model_dir, "-i", mono, "--device", "cpu", "--min-len", "2", "--student-config", student]
    n = len(mono.read_text(encoding="utf-8").splitlines())
    short = tmp_path / "short.de"
    short.write_text("ein Hund\n" * (n - 1), encoding="utf-8")
    one_line_error(run([*args, "-o", tmp_path / "refused", "--references", short]),
                   f"--references {short} has {n - 1} lines but the input {mono} has {n}")
    assert not (tmp_path / "refused").exists()
    no_student = run(["distill", tiny_model_dir, "-i", mono, "-o", tmp_path / "x", "--references", short])
    assert no_student.exit_code == 2 and "--references: only with --student-config" in no_student.output
    refs = tmp_path / "refs.de"
    refs.write_text("ein Hund\n" * n, encoding="utf-8")
    result = run([*args, "-o", tmp_path / "kd", "--references", refs])
    assert result.exit_code == 0, result.output
    command = shlex.split(result.output.split("train the student with:")[1].strip().splitlines()[0])
    sets = [command[i + 1] for i, word in enumerate(command) if word == "--set"]
    corpora = load_config(student, sets).data.corpora
    assert [(Path(c.train_src), Path(c.train_tgt)) for c in corpora] == [
        ((tmp_path / "kd" / SRC_FILE).resolve(), (tmp_path / "kd" / TGT_FILE).resolve()),
        (mono.resolve(), refs.resolve())]


def test_the_corpus_trains_as_a_tagged_corpora_entry(tiny_model_dir, mono, multi30k_small, tmp_path):
    """A noised back-translation with --tag, its corpus.yaml entry beside the real pairs, <BLANK> reserved:
    a short training run reads it and the tokenizer keeps <BT> and <BLANK> whole."""
    result = run(["back-translate", tiny_model_dir, "-i", mono, "-o", tmp_path / "bt", "--method", "noised-beam",
                  "--tag", "--device", "cpu", "--min-len", "2", "--beam", "2"])
    assert result.exit_code == 0, result.output
    entry = yaml.safe_load((tmp_path / "bt" / CORPUS_FILE).read_text())["data"]["corpora"][0]
    files = multi30k_small
    config = {
        "data": {"corpora": [{"train_src": str(files["train.de"]), "train_tgt": str(files["train.en"])}, entry],
                 "valid_src": str(files["val.de"]), "valid_tgt": str(files["val.en"]), "reserved": ["<BLANK>"]},
        "tokenizer": {"vocab_size": 300},
        "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "layers": 1, "share_embeddings": True},
        "training": {"output_dir": str(tmp_path / "forward"), "max_steps": 2, "valid_every": 2, "max_tokens": 800,
                     "device": "cpu", "valid_bleu": False, "best_metric": "loss", "threads": 1},
    }
    path = tmp_path / "forward.yaml"
    path.write_text(yaml.safe_dump(config))
    result = run(["train", path])
    assert result.exit_code == 0, result.output
    from seq2seq.text.tokenizer import Tokenizer

    tok = Tokenizer.load(tmp_path / "forward" / "spm.model")
    assert tok.user_defined_pieces() == ["<BT>", "<BLANK>"]
    assert "<BLANK>" in tok.pieces("ein <BLANK> hund")
    meta = json.loads((tmp_path / "forward" / "metadata.json").read_text())
    assert meta["reserved_pieces"] == ["<BT>", "<BLANK>"]


def test_reserved_pieces_are_checked_like_tags():
    from seq2seq.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"data.reserved\[0\] 'BLANK' must look like <NAME>"):
        load_config(None, ["data.reserved=[BLANK]"])
    assert load_config(None, ["data.reserved=[<BLANK>]"]).data.reserved == ["<BLANK>"]


def test_student_config_is_a_deep_encoder_shallow_decoder():
    from seq2seq.config import load_config

    cfg = load_config(ROOT / "configs" / "student_fast.yaml")
    assert cfg.model.encoder_layers >= 6 and cfg.model.decoder_layers <= 2
    assert cfg.model.d_model < load_config(ROOT / "configs" / "multi30k_en_de.yaml").model.d_model
