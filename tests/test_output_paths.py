"""Outputs that never destroy inputs, and weights checked at load (issue 70, parts 1 and 5).

Every command refuses an output path that is the same file (by inode) as one of its inputs, in one
line naming both; a symlink is written through to its target (the link stays a link); a FIFO, a
character device and /dev/stdout are written directly; /dev/null, /dev/stdin and /dev/fd/N are inputs
like any file; nothing is written before the options are checked. A model directory (or --weights,
or an ensemble member) whose tensors hold NaN/inf or have the wrong dtype is refused in one line
naming the tensor and the file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from seq2seq.cli import cli

SOURCES = "a dog runs .\ntwo men sit on a bench .\n"


@pytest.fixture(scope="module")
def sandbox(tiny_model_dir, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("output_paths")
    shutil.copytree(tiny_model_dir, root / "model", ignore=shutil.ignore_patterns("cache", "train_state"))
    (root / "src.txt").write_text(SOURCES, encoding="utf-8")
    (root / "ref.txt").write_text("ein hund rennt .\nzwei männer sitzen auf einer bank .\n", encoding="utf-8")
    (root / "prefix.txt").write_text("ein\nzwei\n", encoding="utf-8")
    (root / "constraints.txt").write_text("hund\nbank\n", encoding="utf-8")
    (root / "avoid.txt").write_text("katze\nkatze\n", encoding="utf-8")
    (root / "glossary.tsv").write_text("dog\thund\n", encoding="utf-8")
    shutil.copy(root / "model" / "model.safetensors", root / "weights.safetensors")
    return root


def digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def run(*args: str | Path, **kwargs) -> tuple[int, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args], **kwargs)
    return result.exit_code, result.output.strip()


def one_line_error(code: int, message: str) -> str:
    assert code == 1, message
    assert "Traceback" not in message, message
    assert len(message.splitlines()) == 1, message
    return message


# ---- outputs onto inputs ------------------------------------------------------------------------------

STEERING = {"--prefix-file": "prefix.txt", "--constraints-file": "constraints.txt", "--avoid-file": "avoid.txt",
            "--glossary": "glossary.tsv", "--weights": "weights.safetensors"}


@pytest.mark.parametrize("flag", list(STEERING))
def test_translate_refuses_an_output_onto_any_of_its_input_files(sandbox, flag):
    """`--constraints-file c ... -o c` (and --prefix-file, --avoid-file, --glossary, --weights) replaced the
    input by the translation with exit 0."""
    target = sandbox / STEERING[flag]
    before = digests(sandbox)
    code, message = run("translate", sandbox / "model", "-i", sandbox / "src.txt", flag, target, "-o", target,
                        "--greedy")
    line = one_line_error(code, message)
    assert f"-o {target}" in line and "destroy the input" in line and line.count(str(target)) == 2, line
    assert digests(sandbox) == before


@pytest.mark.parametrize("name", ["config.yaml", "model.safetensors", "spm.model", "metadata.json"])
def test_translate_refuses_an_output_onto_a_file_of_the_model_directory(sandbox, name):
    target = sandbox / "model" / name
    before = digests(sandbox)
    code, message = run("translate", sandbox / "model", "-i", sandbox / "src.txt", "-o", target, "--greedy")
    line = one_line_error(code, message)
    assert str(target) in line and "destroy the input" in line, line
    assert digests(sandbox) == before


def test_an_output_path_that_is_a_hard_link_or_a_symlink_to_an_input_is_the_input(sandbox, tmp_path):
    """Same file by inode, not by name: a hard link to -i, and a symlink to --prefix-file."""
    hard, soft = tmp_path / "hard.txt", tmp_path / "soft.txt"
    os.link(sandbox / "src.txt", hard)
    soft.symlink_to(sandbox / "prefix.txt")
    before = digests(sandbox)
    for output, extra in ((hard, []), (soft, ["--prefix-file", sandbox / "prefix.txt"])):
        code, message = run("translate", sandbox / "model", "-i", sandbox / "src.txt", *extra, "-o", output)
        line = one_line_error(code, message)
        assert str(output) in line and "destroy the input" in line, line
    assert digests(sandbox) == before and soft.is_symlink()


def test_test_and_average_refuse_outputs_onto_their_inputs(sandbox):
    before = digests(sandbox)
    ref = sandbox / "ref.txt"
    line = one_line_error(*run("test", sandbox / "model", "--src", sandbox / "src.txt", "--ref", ref, "-o", ref))
    assert f"-o {ref}" in line and "destroy the input" in line, line
    checkpoint = sorted((sandbox / "model" / "checkpoints").iterdir())[-1]
    line = one_line_error(*run("average", sandbox / "model", "-o", checkpoint, "--force"))
    assert str(checkpoint) in line and "destroy the input" in line, line
    assert digests(sandbox) == before


def test_show_attention_onto_the_output_or_an_input_is_refused(sandbox, tmp_path):
    one = tmp_path / "one.txt"
    one.write_text("a dog runs .\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    for target in (one, out):
        code, message = run("translate", sandbox / "model", "-i", one, "-o", out, "--show-attention", target)
        line = one_line_error(code, message)
        assert f"--show-attention {target}" in line, line
    assert one.read_text(encoding="utf-8") == "a dog runs .\n" and not out.exists()


def test_nothing_is_written_before_the_options_are_checked(sandbox, tmp_path):
    """`test --metrics bogus -o X` exited 2 but wrote X."""
    out = tmp_path / "hyp.txt"
    code, message = run("test", sandbox / "model", "--src", sandbox / "src.txt", "--ref", sandbox / "ref.txt",
                        "--metrics", "bogus", "-o", out)
    assert code == 2 and "bogus" in message, message
    assert not out.exists()
    out.write_text("kept\n", encoding="utf-8")
    code, _ = run("test", sandbox / "model", "--src", sandbox / "src.txt", "--ref", sandbox / "ref.txt",
                  "--metrics", "", "-o", out)
    assert code == 2 and out.read_text(encoding="utf-8") == "kept\n"


# ---- special outputs: symlinks, FIFOs, devices ----------------------------------------------------

def greedy_translation(sandbox: Path) -> str:
    result = CliRunner().invoke(cli, ["translate", str(sandbox / "model"), "-i", str(sandbox / "src.txt"), "--greedy"])
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 2
    return result.stdout


def test_an_output_symlink_is_written_through_and_stays_a_link(sandbox, tmp_path):
    target, link = tmp_path / "target.txt", tmp_path / "link.txt"
    target.write_text("old\n", encoding="utf-8")
    link.symlink_to(target)
    code, message = run("translate", sandbox / "model", "-i", sandbox / "src.txt", "-o", link, "--greedy")
    assert code == 0, message
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text(encoding="utf-8") == greedy_translation(sandbox)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "target.txt"]  # no temporary left


def test_a_dangling_output_symlink_creates_its_target(sandbox, tmp_path):
    target, link = tmp_path / "new.txt", tmp_path / "link.txt"
    link.symlink_to(target)
    code, message = run("translate", sandbox / "model", "-i", sandbox / "src.txt", "-o", link, "--greedy")
    assert code == 0, message
    assert link.is_symlink() and target.read_text(encoding="utf-8") == greedy_translation(sandbox)


def test_an_output_fifo_is_written_directly_and_stays_a_fifo(sandbox, tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    try:
        code, message = run("translate", sandbox / "model", "-i", sandbox / "src.txt", "-o", fifo, "--greedy")
        received, _ = reader.communicate(timeout=30)
    finally:
        if reader.poll() is None:
            reader.kill()
    assert code == 0, message
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert received.decode("utf-8") == greedy_translation(sandbox)


def test_dev_null_is_an_output_and_an_input(sandbox):
    code, message = run("translate", sandbox / "model", "-i", sandbox / "src.txt", "-o", "/dev/null", "--greedy")
    assert code == 0, message
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    code, message = run("translate", sandbox / "model", "-i", "/dev/null", "--greedy")
    assert code == 0 and message == "", message
    code, message = run("evaluate", "--hyp", "/dev/null", "--ref", sandbox / "ref.txt")
    line = one_line_error(code, message)
    assert "/dev/null is empty" in line, line


def test_a_pipe_given_as_dev_fd_n_is_read_like_a_file(sandbox):
    """-i /dev/fd/N (a shell's process substitution) and a steering file from a pipe."""
    read_end, write_end = os.pipe()
    prefix_read, prefix_write = os.pipe()
    os.write(write_end, SOURCES.encode("utf-8"))
    os.close(write_end)
    os.write(prefix_write, b"ein\nzwei\n")
    os.close(prefix_write)
    try:
        code, message = run("translate", sandbox / "model", "-i", f"/dev/fd/{read_end}", "--greedy",
                            "--prefix-file", f"/dev/fd/{prefix_read}")
    finally:
        os.close(read_end)
        os.close(prefix_read)
    assert code == 0, message
    lines = message.splitlines()
    assert len(lines) == 2 and lines[0].startswith("ein") and lines[1].startswith("zwei"), lines


def test_dev_stdin_in_and_dev_stdout_out_in_a_real_process(sandbox, tmp_path):
    """/dev/stdin is read; /dev/stdout, here a regular file the shell opened, is written in place (a
    rename would leave the shell's file empty, and as root would replace /dev/stdout itself)."""
    out = tmp_path / "stdout.txt"
    with open(out, "wb") as stdout:
        done = subprocess.run([sys.executable, "-m", "seq2seq", "translate", str(sandbox / "model"), "--greedy",
                               "-i", "/dev/stdin", "-o", "/dev/stdout", "--device", "cpu"],
                              input=SOURCES.encode("utf-8"), stdout=stdout, stderr=subprocess.PIPE, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert os.path.islink("/dev/stdout")
    assert out.read_text(encoding="utf-8") == greedy_translation(sandbox)


# ---- weights checked at load ------------------------------------------------------------------------

def damaged_model(sandbox: Path, tmp_path: Path, damage) -> tuple[Path, str]:
    """A copy of the model directory whose model.safetensors has one tensor changed by `damage`; the
    changed tensor's name."""
    model = tmp_path / "damaged"
    shutil.copytree(sandbox / "model", model, ignore=shutil.ignore_patterns("checkpoints"))
    weights = str(model / "model.safetensors")
    state = load_file(weights)
    with safe_open(weights, framework="pt") as f:
        metadata = f.metadata()  # (the names of tied tensors)
    name = next(n for n, t in state.items() if t.dim() == 2)
    state[name] = damage(state[name])
    save_file(state, weights, metadata=metadata)
    return model, name


DAMAGES = {
    "NaN": lambda t: torch.full_like(t, float("nan")),
    "+inf": lambda t: torch.where(torch.arange(t.numel()).view(t.shape) == 7, torch.tensor(float("inf")), t),
    "int64": lambda t: t.to(torch.int64),
}


@pytest.mark.parametrize("kind", list(DAMAGES))
def test_weights_with_non_finite_values_or_the_wrong_dtype_are_refused_at_load(sandbox, tmp_path, kind):
    """All-NaN weights gave empty lines with score 0.0, int64 ones garbage, both with exit 0."""
    model, name = damaged_model(sandbox, tmp_path, DAMAGES[kind])
    weights = model / "model.safetensors"
    for args in (["translate", model], ["translate", sandbox / "model", "--weights", weights],
                 ["translate", sandbox / "model", model]):  # the model, --weights, an ensemble member
        code, message = run(*args, "-i", sandbox / "src.txt", "--greedy")
        line = one_line_error(code, message)
        assert str(weights) in line and f"'{name}'" in line, line
        assert ("int64" in line) if kind == "int64" else ("NaN or inf" in line), line


def test_the_weight_check_refuses_damaged_weights_from_the_python_api(sandbox, tmp_path):
    from seq2seq.storage import CheckpointError
    from seq2seq.storage.model_dir import load_model_dir

    model, name = damaged_model(sandbox, tmp_path, DAMAGES["NaN"])
    with pytest.raises(CheckpointError, match=f"tensor '{name}'"):
        load_model_dir(model, device="cpu")
    assert load_model_dir(sandbox / "model", device="cpu").model is not None


def test_export_and_back_translate_refuse_an_output_directory_that_holds_their_input(sandbox, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    weights = out / "weights.safetensors"
    shutil.copy(sandbox / "weights.safetensors", weights)
    source = out / "train.src"  # the name back-translate writes its sources under
    source.write_text(SOURCES, encoding="utf-8")
    before = digests(tmp_path)
    line = one_line_error(*run("export", sandbox / "model", out, "--to", "ctranslate2", "--weights", weights,
                               "--force"))
    assert str(out) in line and str(weights) in line, line
    line = one_line_error(*run("back-translate", sandbox / "model", "-i", source, "-o", out))
    assert f"-o {source} is the input file {source}" in line, line
    assert digests(tmp_path) == before


def test_the_writer_renames_regular_files_and_writes_special_ones_in_place(tmp_path):
    from seq2seq.storage.atomic import writes_directly
    from seq2seq.storage.outputs import OutputPathError, check_output_paths, open_output

    regular, link = tmp_path / "a.txt", tmp_path / "link"
    regular.write_text("old\n", encoding="utf-8")
    link.symlink_to(regular)
    assert not writes_directly(regular) and not writes_directly(link) and not writes_directly(tmp_path / "new")
    assert all(writes_directly(p) for p in ("/dev/null", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"))
    inode = os.stat(regular).st_ino
    with open_output(link) as out:
        out.write(b"new\n")
    assert link.is_symlink() and regular.read_text(encoding="utf-8") == "new\n"
    assert os.stat(regular).st_ino != inode  # renamed into place: a reader of the old file keeps it whole
    with pytest.raises(OutputPathError, match="writes too"):
        check_output_paths({"-o": tmp_path / "x.txt", "--show-attention": tmp_path / "x.txt"}, [])
    check_output_paths({"-o": "/dev/null", "--show-attention": "/dev/null"}, ["/dev/null"])  # nothing lost
