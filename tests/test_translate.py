"""Translating and evaluating: `seq2seq translate/evaluate/test/average` and the Translator API,
on one tiny model trained once per session (the `tiny_model_dir` fixture)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sacrebleu
import torch
from click.testing import CliRunner

from seq2seq.storage import CheckpointError
from seq2seq.storage.weights import load_weights
from seq2seq.cli import cli
from seq2seq.inference.engine import translate_stream
from seq2seq.inference.inputs import Call
from seq2seq.inference.results import formatter
from seq2seq.text.lines import decoded_lines
from seq2seq.documents.line_translation import translate_lines
from seq2seq.inference.translator import Translator

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def translator(tiny_model_dir) -> Translator:
    return Translator.load(tiny_model_dir, device="cpu")


@pytest.fixture(scope="module")
def valid_src(multi30k_small) -> list[str]:
    return multi30k_small["val.en"].read_text(encoding="utf-8").splitlines()


def run(args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input)


def out_lines(result) -> list[str]:
    """stdout split on '\n' only (a trailing newline ends the last line)."""
    data = result.stdout_bytes.decode("utf-8")
    assert data == "" or data.endswith("\n"), repr(data[-50:])
    return data.split("\n")[:-1]


def copy_model(src: Path, dst: Path) -> Path:
    return Path(shutil.copytree(src, dst, ignore=shutil.ignore_patterns("cache", "train_state*", "checkpoints")))


# --------------------------------------------------------------------------------------------
# translate: one line out per line in
# --------------------------------------------------------------------------------------------


def test_one_output_line_per_input_line_for_empty_long_and_odd_lines(tiny_model_dir):
    long_line = ("a dog runs after the red ball " * 200)[:5000]
    lines = [
        "A man rides a bike.",
        "",
        "   ",
        long_line,
        "🙂 A dog 🐕 jumps 🎉",
        "שלום עולם مرحبا بالعالم",
        "control \x00\x07\x1b[31m chars",
        "a lone \r carriage return",
        "separators \u2028 \u2029 \x85 \x0b \x0c inside",
        "tab\tinside",
        "A woman.",
    ]
    data = "\n".join(lines)  # no final newline: the last line still counts
    result = run(["translate", tiny_model_dir, "--beam", "2"], input=data.encode("utf-8"))
    assert result.exit_code == 0, result.output
    out = out_lines(result)
    assert len(out) == len(lines)
    assert out[1] == "" and out[2] == ""
    assert out[0] and out[3] and out[-1]
    assert "line 4" in result.stderr and "truncated" in result.stderr
    assert "line 1:" not in result.stderr


def test_invalid_utf8_is_replaced_with_a_warning_naming_the_line(tiny_model_dir):
    data = b"A man.\nbroken \xff\xfe bytes \xc3\nA dog.\n"
    result = run(["translate", tiny_model_dir, "--greedy"], input=data)
    assert result.exit_code == 0, result.output
    assert len(out_lines(result)) == 3
    assert "line 2" in result.stderr and "UTF-8" in result.stderr


def test_input_and_output_files(tiny_model_dir, tmp_path):
    src = tmp_path / "in.en"
    src.write_text("A man.\n\nTwo dogs.\n", encoding="utf-8")
    out = tmp_path / "out.de"
    result = run(["translate", tiny_model_dir, "-i", src, "-o", out, "--greedy"])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert len(out.read_text(encoding="utf-8").split("\n")) == 4
    missing = run(["translate", tiny_model_dir, "-i", tmp_path / "nope.en"])
    assert missing.exit_code == 1 and "nope.en" in missing.output and "Traceback" not in missing.output


def test_streaming_writes_each_chunk_before_reading_on(translator):
    out = io.BytesIO()
    seen_at_read = []

    def source():
        for i, text in enumerate(["A man.", "A dog.", "", "A cat.", "Two women.", "A boy."]):
            seen_at_read.append((i, out.getvalue().count(b"\n")))
            yield text

    n = translate_stream(translator, source(), out, formatter("text", 1), chunk_lines=2,
                         call=Call({"greedy": True}, batch_tokens=100))
    assert n == 6 and out.getvalue().count(b"\n") == 6
    assert seen_at_read == [(0, 0), (1, 0), (2, 2), (3, 2), (4, 4), (5, 4)]


def test_the_command_resolves_its_search_once_whatever_the_chunks(tiny_model_dir, monkeypatch):
    import seq2seq.inference.engine as engine

    resolved = []
    real = engine.resolve_search
    monkeypatch.setattr(engine, "resolve_search", lambda *a, **k: resolved.append(1) or real(*a, **k))
    text = "A man.\nA dog.\nA cat.\nTwo women.\nA boy.\nA girl.\n"
    counts, outputs = [], []
    for chunk in ("6", "1"):
        resolved.clear()
        result = run(["translate", tiny_model_dir, "--beam", "2", "--no-repeat-ngram", "2", "--chunk-lines", chunk],
                     input=text)  # (with its own n-gram block, no output is searched again: `_guard_loops`)
        assert result.exit_code == 0, result.output
        counts.append(len(resolved))
        outputs.append(result.stdout_bytes)
    assert counts[0] == counts[1] and outputs[0] == outputs[1]  # 6 chunks of one line: no more resolutions


def test_progress_bar_goes_to_stderr_and_leaves_the_output_alone(tiny_model_dir, tmp_path):
    text = "A man.\n\nTwo dogs play.\nA woman.\n"
    plain = run(["translate", tiny_model_dir, "--greedy"], input=text)
    shown = run(["translate", tiny_model_dir, "--greedy", "--progress", "--chunk-lines", "2"], input=text)
    assert shown.exit_code == 0, shown.output
    assert shown.stdout_bytes == plain.stdout_bytes and len(out_lines(shown)) == 4
    assert "4 lines" in shown.stderr and "lines" not in plain.stderr  # stdin: a count, no total
    src = tmp_path / "in.en"
    src.write_text(text, encoding="utf-8")
    from_file = run(["translate", tiny_model_dir, "--greedy", "--progress", "-i", src])
    assert from_file.stdout_bytes == plain.stdout_bytes and "100%" in from_file.stderr and "4/4" in from_file.stderr


def _translate_with_stderr_on_a_terminal(args: list) -> tuple[bytes, str]:
    """`seq2seq translate ARGS` in a subprocess, stdout piped, stderr on a pseudo-terminal."""
    import fcntl
    import os
    import pty
    import select
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a new pty is 0 columns wide
    command = [sys.executable, "-c", "from seq2seq.cli import main; main()", "translate", *map(str, args)]
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    err = b""
    while True:  # drain the terminal while the command runs (a full pty buffer would block it)
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the command closed the terminal
                break
            if not chunk:
                break
            err += chunk
        elif proc.poll() is not None:
            break
    out = proc.stdout.read()
    assert proc.wait(timeout=300) == 0, err
    os.close(master)
    return out, err.decode()


def test_progress_bar_by_default_only_when_stderr_is_a_terminal(tiny_model_dir, valid_src, tmp_path):
    src = tmp_path / "in.en"
    src.write_bytes(("\n".join(valid_src[:10]) + "\n").encode())
    args = [tiny_model_dir, "--greedy", "--chunk-lines", "3", "--device", "cpu", "-i", src]
    piped = run(["translate", *args])  # stdout and stderr are pipes here: no bar, output untouched
    assert piped.exit_code == 0 and len(out_lines(piped)) == 10
    assert "lines" not in piped.stderr and "\r" not in piped.stderr
    out, err = _translate_with_stderr_on_a_terminal(args)
    assert out == piped.stdout_bytes  # the same output, exactly; the bar is on stderr only
    assert "10/10" in err and "100%" in err


def test_decoded_lines_split_on_newline_only():
    warnings = []
    raw = io.BytesIO("\ufeffa\r\nb\rc\n\u2028d\n\xff".encode("utf-8").replace("\xff".encode(), b"\xff"))
    assert list(decoded_lines(raw, "x", warnings.append)) == ["a", "b\rc", "\u2028d", "\ufffd"]
    assert [(str(w), w.code) for w in warnings] == [("x line 4: invalid UTF-8 (byte 0) replaced with U+FFFD",
                                                    "invalid_utf8")]


def test_json_output_has_text_score_tokens_and_optional_alignment(tiny_model_dir):
    result = run(["translate", tiny_model_dir, "--json", "--beam", "2"], input="A man.\n\nTwo dogs play.\n")
    assert result.exit_code == 0, result.output
    objs = [json.loads(line) for line in out_lines(result)]
    assert len(objs) == 3
    for obj in objs:
        assert {"text", "score", "logprob", "tokens"} <= set(obj) and "alignment" not in obj
    assert objs[1] == {"text": "", "score": 0.0, "logprob": 0.0, "tokens": []}
    assert objs[0]["tokens"] and isinstance(objs[0]["score"], float)

    aligned = run(["translate", tiny_model_dir, "--json", "--alignment", "--beam", "2"], input="A man.\n")
    obj = json.loads(out_lines(aligned)[0])
    assert len(obj["alignment"]) == len(obj["tokens"]) + 1  # + EOS
    assert all(len(row) == len(obj["src_tokens"]) for row in obj["alignment"])
    assert obj["src_tokens"][-1] == "</s>"
    assert all(abs(sum(row) - 1.0) < 1e-3 for row in obj["alignment"])
    refused = run(["translate", tiny_model_dir, "--alignment"], input="A man.\n")
    assert refused.exit_code != 0 and "--json" in refused.output


def test_scores_prefix_the_translation(tiny_model_dir):
    text = "A man.\nTwo dogs play.\n"
    plain = out_lines(run(["translate", tiny_model_dir, "--beam", "3"], input=text))
    scored = out_lines(run(["translate", tiny_model_dir, "--beam", "3", "--scores"], input=text))
    assert len(scored) == 2
    for p, s in zip(plain, scored):
        score, translation = s.split("\t", 1)
        assert float(score) < 0 and translation == p


def test_nbest_lines_are_grouped_by_input_and_sorted_by_score(tiny_model_dir):
    text = "A man rides a bike.\n\nTwo dogs play in the snow.\n"
    result = run(["translate", tiny_model_dir, "--beam", "4", "--nbest", "3"], input=text)
    assert result.exit_code == 0, result.output
    rows = [line.split(" ||| ") for line in out_lines(result)]  # Marian: i ||| text ||| F0= logprob ||| score
    assert all(len(r) == 4 and r[2].startswith("F0= ") for r in rows)
    ids = [int(r[0]) for r in rows]
    assert ids == sorted(ids) and set(ids) == {0, 1, 2}
    assert ids.count(1) == 1 and rows[ids.index(1)][1] == ""  # an empty line: one empty entry
    best = out_lines(run(["translate", tiny_model_dir, "--beam", "4"], input=text))
    as_json = run(["translate", tiny_model_dir, "--beam", "4", "--nbest", "3", "--json"], input=text)
    objs = [json.loads(line) for line in out_lines(as_json)]
    assert len(objs) == 3 and len(objs[0]["nbest"]) == 3 and objs[0]["text"] == best[0]
    for i in (0, 2):
        entries = [r for r in rows if int(r[0]) == i]
        assert len(entries) == 3
        scores = [float(r[3]) for r in entries]
        assert scores == sorted(scores, reverse=True)
        assert len({r[1] for r in entries}) == 3
        assert entries[0][1] == best[i]
        for r, h in zip(entries, objs[i]["nbest"]):  # F0 is the log-probability, the last field the score
            assert (r[1], float(r[2][4:]), float(r[3])) == (h["text"], round(h["logprob"], 4), round(h["score"], 4))
    too_many = run(["translate", tiny_model_dir, "--beam", "2", "--nbest", "3"], input=text)
    assert too_many.exit_code != 0 and "nbest (3) must be <= beam (2)" in too_many.output


def test_nbest_format_fairseq_gives_the_same_hypotheses_as_h_lines(tiny_model_dir):
    text = "A man rides a bike.\n\nTwo dogs play in the snow.\n"
    marian = [line.split(" ||| ") for line in out_lines(run(["translate", tiny_model_dir, "--beam", "4", "--nbest", "3",
                                                             "--nbest-format", "marian"], input=text))]
    result = run(["translate", tiny_model_dir, "--beam", "4", "--nbest", "3", "--nbest-format", "fairseq"], input=text)
    assert result.exit_code == 0, result.output
    fairseq = [line.split("\t") for line in out_lines(result)]  # H-i<TAB>score<TAB>text
    assert [(f"H-{m[0]}", m[3], m[1]) for m in marian] == [tuple(f) for f in fairseq]
    one = run(["translate", tiny_model_dir, "--beam", "4", "--nbest-format", "fairseq"], input="A man.\n")
    assert len(out_lines(one)) == 1 and out_lines(one)[0].startswith("H-0\t")  # an explicit format, also for 1-best
    for bad in (["--json"], ["--scores"]):
        refused = run(["translate", tiny_model_dir, "--nbest", "2", "--nbest-format", "fairseq", *bad], input="A man.\n")
        assert refused.exit_code == 2 and bad[0] in refused.output


def test_nbest_formats_exactly():
    from seq2seq.inference.translator import Translation

    def hyp(text, score, logprob):
        return Translation(text=text, score=score, logprob=logprob, token_ids=[], pieces=[], token_logprobs=[],
                           src_pieces=[])

    hyps = [hyp("Ein Hund rennt.", -0.65234, -1.73941), hyp("Ein Hund\u2028läuft.", -0.81201, -2.5)]
    assert formatter("text", 2)(7, hyps) == (
        "7 ||| Ein Hund rennt. ||| F0= -1.7394 ||| -0.6523\n7 ||| Ein Hund läuft. ||| F0= -2.5000 ||| -0.8120\n"
    )
    assert formatter("text", 2, "fairseq")(7, hyps) == "H-7\t-0.6523\tEin Hund rennt.\nH-7\t-0.8120\tEin Hund läuft.\n"
    assert formatter("text", 2, "marian")(0, []) == "0 |||  ||| F0= 0.0000 ||| 0.0000\n"
    assert formatter("text", 2, "fairseq")(0, []) == "H-0\t0.0000\t\n"
    assert formatter("text", 1)(0, hyps) == "Ein Hund rennt.\n"
    with pytest.raises(ValueError, match="moses"):
        formatter("text", 2, "moses")


def test_show_attention_writes_a_png_for_one_sentence_only(tiny_model_dir, tmp_path):
    png = tmp_path / "attention.png"
    result = run(["translate", tiny_model_dir, "--show-attention", png], input="A man rides a bike.\n")
    assert result.exit_code == 0, result.output
    assert len(out_lines(result)) == 1
    assert png.read_bytes()[:8] == PNG_MAGIC
    other = tmp_path / "two.png"
    refused = run(["translate", tiny_model_dir, "--show-attention", other], input="A man.\nA dog.\n")
    assert refused.exit_code != 0 and "one sentence" in refused.output and "2 lines" in refused.output
    assert "Traceback" not in refused.output and not other.exists()


def test_interactive_mode_prompts_and_translates_each_line(tiny_model_dir, monkeypatch):
    import seq2seq.cli.common as cli_module

    monkeypatch.setattr(cli_module, "stdin_is_tty", lambda: True)
    result = run(["translate", tiny_model_dir, "--greedy"], input="A man.\n\nTwo dogs.\n")
    assert result.exit_code == 0, result.output
    out = out_lines(result)
    assert len(out) == 3 and out[1] == "" and out[0]
    assert result.stderr.count("> ") == 4  # one prompt per line, and one answered by end of input


# --------------------------------------------------------------------------------------------
# refusing broken model directories
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("missing, message", [("spm.model", "no tokenizer in"), ("model.safetensors", "model.safetensors is missing"),
                                              ("config.yaml", "config.yaml is missing")])
def test_incomplete_model_dir_is_refused_with_one_clear_line(tiny_model_dir, tmp_path, missing, message):
    model = copy_model(tiny_model_dir, tmp_path / "model")
    (model / missing).unlink()
    result = run(["translate", model], input="A man.\n")
    assert result.exit_code == 1
    assert message in result.output and "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1


def test_tokenizer_of_another_size_is_refused(tiny_model_dir, tmp_path, multi30k_small):
    from seq2seq.text.tokenizer import train_tokenizer
    from seq2seq.config import TokenizerConfig

    model = copy_model(tiny_model_dir, tmp_path / "model")
    texts = multi30k_small["train.en"].read_text(encoding="utf-8").splitlines()
    train_tokenizer(texts, 200, TokenizerConfig(vocab_size=200)).save(model / "spm.model")
    result = run(["translate", model], input="A man.\n")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "200 pieces" in result.output and "does not belong to this model" in result.output
    with pytest.raises(CheckpointError, match="does not belong"):
        Translator.load(model)


def test_bad_options_are_one_line_errors(tiny_model_dir):
    for args, message in [
        (["--greedy", "--sample"], "choose one of greedy and sample"),
        (["--greedy", "--nbest", "2"], "greedy search gives one hypothesis"),
        (["--topp", "0.9"], "only for sampling"),
        (["--sample", "--topp", "1.5"], "topp must be in (0, 1]"),
        (["--device", "cuda:0"] if not torch.cuda.is_available() else ["--precision", "int8", "--device", "cuda"], "CUDA" if not torch.cuda.is_available() else "CPU only"),
    ]:
        result = run(["translate", tiny_model_dir, *args], input="A man.\n")
        assert result.exit_code != 0 and message in result.output, (args, result.output)
        assert "Traceback" not in result.output


# --------------------------------------------------------------------------------------------
# evaluate, test, average
# --------------------------------------------------------------------------------------------

HYPS = ["The cat sat on the mat.", "A dog runs in the park.", "It is raining today.", "Hello world"]
REFS = ["The cat sat on a mat.", "A dog is running in the park.", "Today it rains.", "Hello, world!"]
REFS2 = ["A cat sat on the mat.", "The dog runs in a park.", "It rains today.", "Hello world!"]


def test_evaluate_matches_sacrebleu(tmp_path):
    hyp, ref, ref2 = tmp_path / "hyp.txt", tmp_path / "ref.txt", tmp_path / "ref2.txt"
    for path, lines in ((hyp, HYPS), (ref, REFS), (ref2, REFS2)):
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run(["evaluate", "--hyp", hyp, "--ref", ref, "--json"])
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout)
    assert scores["bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert scores["chrf"]["score"] == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)
    assert scores["ter"]["score"] == pytest.approx(sacrebleu.metrics.TER(case_sensitive=True).corpus_score(HYPS, [REFS]).score)
    assert scores["bleu"]["signature"].startswith("nrefs:1|case:mixed")
    two = json.loads(run(["evaluate", "--hyp", hyp, "--ref", ref, "--ref", ref2, "--json"]).stdout)
    assert two["bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS, REFS2]).score)
    assert two["bleu"]["signature"].startswith("nrefs:2")
    text = run(["evaluate", "--hyp", hyp, "--ref", ref])
    assert text.exit_code == 0
    assert "BLEU = " in text.stdout and "chrF2 = " in text.stdout and "TER = " in text.stdout
    assert text.stdout.count("signature: ") == 3


def test_evaluate_refuses_files_of_different_lengths(tmp_path):
    hyp, ref = tmp_path / "system.out", tmp_path / "reference.de"
    hyp.write_text("\n".join(HYPS) + "\n", encoding="utf-8")
    ref.write_text("\n".join(REFS[:3]) + "\n", encoding="utf-8")
    result = run(["evaluate", "--hyp", hyp, "--ref", ref])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "system.out" in result.output and "reference.de" in result.output
    assert "4 lines" in result.output and "3" in result.output


def test_test_command_writes_hypotheses_and_prints_scores(tiny_model_dir, multi30k_small, tmp_path):
    hyp = tmp_path / "valid.hyp"
    result = run(["test", tiny_model_dir, "--src", multi30k_small["val.en"], "--ref", multi30k_small["val.de"],
                  "-o", hyp, "--greedy", "--progress"])
    assert result.exit_code == 0, result.output
    assert "60/60" in result.stderr and "60/60" not in result.stdout  # the progress bar, on stderr
    lines = hyp.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(lines) == 60
    for name in ("BLEU = ", "chrF2 = ", "TER = "):
        assert name in result.stdout
    assert result.stdout.count("signature: nrefs:1") == 3
    translated = run(["translate", tiny_model_dir, "-i", multi30k_small["val.en"], "--greedy"])
    assert out_lines(translated) == lines
    mismatch = run(["test", tiny_model_dir, "--src", multi30k_small["val.en"], "--ref", multi30k_small["train.de"]])
    assert mismatch.exit_code == 1 and "val.en" in mismatch.output and "train.de" in mismatch.output


def test_test_command_json_has_the_scores_and_the_translation_speed(tiny_model_dir, multi30k_small, tmp_path):
    hyp = tmp_path / "valid.hyp"
    result = run(["test", tiny_model_dir, "--src", multi30k_small["val.en"], "--ref", multi30k_small["val.de"],
                  "-o", hyp, "--greedy", "--metrics", "bleu,chrf", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert set(report) == {"bleu", "chrf", "decoding"}
    hyps = hyp.read_text(encoding="utf-8").split("\n")[:-1]
    refs = Path(multi30k_small["val.de"]).read_text(encoding="utf-8").split("\n")[:-1]
    assert report["bleu"]["score"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    speed = report["decoding"]
    assert speed["sentences"] == 60 and speed["seconds"] > 0
    assert speed["sentences_per_second"] == pytest.approx(60 / speed["seconds"], rel=0.01)
    assert f"{speed['sentences_per_second']} sentences/s" in result.stderr


def test_average_is_the_elementwise_mean_and_replaces_nothing(tiny_model_dir, tmp_path):
    model = Path(shutil.copytree(tiny_model_dir, tmp_path / "model", ignore=shutil.ignore_patterns("cache", "train_state*")))
    steps = sorted((model / "checkpoints").glob("step_*.safetensors"), key=lambda p: int(p.stem[5:]))
    assert [p.name for p in steps] == ["step_30.safetensors", "step_60.safetensors"]
    before = (model / "model.safetensors").read_bytes()
    result = run(["average", model, "--last", "2"])
    assert result.exit_code == 0, result.output
    out = model / "model.avg.safetensors"
    averaged = load_weights(out)
    a, b = (load_weights(p) for p in steps)
    assert set(averaged) == set(a)
    for name in a:
        torch.testing.assert_close(averaged[name], (a[name].float() + b[name].float()) / 2)
    assert (model / "model.safetensors").read_bytes() == before
    again = run(["average", model])
    assert again.exit_code == 1 and "--force" in again.output
    assert run(["average", model, "--force"]).exit_code == 0
    assert run(["average", model, "--last", "3"]).exit_code == 1
    translated = run(["translate", model, "--weights", out, "--greedy"], input="A man.\n\n")
    assert translated.exit_code == 0 and len(out_lines(translated)) == 2
    assert Translator.load(model, weights=out).translate(["A man."], greedy=True) == out_lines(translated)[:1]


def test_average_keeps_each_tensors_dtype_and_rounds_integer_ones(tmp_path):
    """BatchNorm's num_batches_tracked (int64) stays an integer; fp32 weights stay fp32."""
    from seq2seq.storage.weights import average_checkpoints, save_weights

    states = [{"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(10)}, {"w": torch.tensor([2.0, 5.0]), "n": torch.tensor(13)}]
    paths = []
    for i, state in enumerate(states):
        save_weights(state, tmp_path / f"{i}.safetensors")
        paths.append(tmp_path / f"{i}.safetensors")
    mean = average_checkpoints(paths)
    assert mean["w"].dtype == torch.float32 and mean["w"].tolist() == [1.5, 3.5]
    assert mean["n"].dtype == torch.int64 and mean["n"].item() == 12  # 11.5, rounded half to even


# --------------------------------------------------------------------------------------------
# the Python API
# --------------------------------------------------------------------------------------------


def test_translator_equals_the_cli(tiny_model_dir, translator, valid_src):
    texts = valid_src[:12] + [""]
    cli_out = out_lines(run(["translate", tiny_model_dir], input="\n".join(texts) + "\n"))
    assert [n[0].text if n else "" for n in translate_lines(translator, texts)] == cli_out
    raw = out_lines(run(["translate", tiny_model_dir, "--no-split-sentences", "--no-casing", "--no-loop-guard"],
                        input="\n".join(texts) + "\n"))
    assert translator.translate(texts) == raw  # the text pipeline's steps off: the engine's own outputs
    assert translator.translate(texts)[-1] == ""


def test_lazy_top_level_export():
    code = "import sys, seq2seq; assert 'torch' not in sys.modules; from seq2seq import Translator; print(Translator.__name__)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "Translator"


@pytest.mark.parametrize("options", [{"greedy": True}, {"beam": 4}])
def test_batch_invariance(translator, valid_src, options):
    texts = valid_src[:20]
    alone = [translator.translate([t], **options)[0] for t in texts[:6]]
    for batch_tokens in (50, 400, 100_000):
        together = translator.translate(texts, batch_tokens=batch_tokens, **options)
        assert together[:6] == alone, batch_tokens


def test_beam_finds_better_model_scores_than_greedy(translator, valid_src):
    assert len(valid_src) == 60
    greedy = translator.translate_nbest(valid_src, greedy=True)
    beam = translator.translate_nbest(valid_src, beam=5)
    assert all(len(g) == 1 and len(b) == 1 for g, b in zip(greedy, beam))
    mean = lambda results, key: sum(getattr(r[0], key) for r in results) / len(results)  # noqa: E731
    assert mean(beam, "score") >= mean(greedy, "score")
    # scores and log-probabilities are consistent: logprob is the sum of the token log-probabilities
    for r in beam[:5]:
        assert r[0].logprob == pytest.approx(sum(r[0].token_logprobs), abs=1e-4)
        assert len(r[0].token_logprobs) == len(r[0].pieces) + 1


def test_search_config_strategy_selection(translator):
    defaults = translator.defaults
    assert defaults.strategy == "beam" and defaults.beam == 4
    cap = translator.loaded.config.model.max_positions - 1
    assert translator.search_config().strategy == "beam"
    assert translator.search_config().max_len == cap
    assert translator.search_config(beam=1).strategy == "greedy"
    assert translator.search_config(greedy=True).nbest == 1
    cfg = translator.search_config(beam=6, nbest=3, lenpen=0.6)
    assert (cfg.strategy, cfg.beam, cfg.nbest, cfg.lenpen) == ("beam", 6, 3, 0.6)
    sample = translator.search_config(sample=True, nbest=8, topk=5, seed=1)
    assert (sample.strategy, sample.nbest, sample.topk) == ("sample", 8, 5)
    assert translator.search_config(max_len=10_000).max_len == cap
    assert translator.search_config(max_len=0).max_len == 0
    for bad, message in [({"nbest": 5}, "nbest \\(5\\) must be <= beam \\(4\\)"), ({"greedy": True, "beam": 3}, "conflicts"),
                         ({"bogus": 1}, "unknown search option"), ({"temperature": 0.5}, "only for sampling"),
                         ({"attention_layer": 1}, "does not exist")]:
        with pytest.raises(ValueError, match=message):
            translator.search_config(**bad)


def test_truncation_warning_names_the_line(translator):
    warnings = []
    long_line = "a dog runs after the red ball " * 200
    out = translator.translate_nbest(["A man.", "", long_line], first_line=41, warn=warnings.append, greedy=True)
    assert len(out) == 3 and out[1] == [] and out[2]
    assert len(warnings) == 1 and str(warnings[0]).startswith("line 43:") and "limit of 255" in warnings[0].message
    assert len(out[2][0].src_pieces) == 256  # 255 pieces + EOS


@pytest.mark.isa
@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_reduced_precision_translates_every_line(tiny_model_dir, valid_src, precision):
    texts = valid_src[:8] + ["", "A man."]
    result = run(["translate", tiny_model_dir, "--precision", precision, "--beam", "2"], input="\n".join(texts) + "\n")
    assert result.exit_code == 0, result.output
    out = out_lines(result)
    assert len(out) == len(texts) and out[8] == "" and all(out[:8])
    t = Translator.load(tiny_model_dir, device="cpu", precision=precision)
    assert [n[0].text if n else "" for n in translate_lines(t, texts, beam=2)] == out
