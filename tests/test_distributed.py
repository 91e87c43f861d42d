"""Training under torchrun (CPU, gloo, 2 processes): the same weights as one process with the same
global batch, rank 0 alone validates and writes, a killed rank ends the job and leaves the last
checkpoint intact."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from seq2seq.storage.atomic import read_json
from seq2seq.storage.model_dir import ModelDir, load_model_dir
from seq2seq.storage.weights import load_weights


def write_config(files: dict, out: Path, **training) -> Path:
    cfg = {
        "data": {"train_src": str(files["train.en"]), "train_tgt": str(files["train.de"]),
                 "valid_src": str(files["val.en"]), "valid_tgt": str(files["val.de"])},
        "tokenizer": {"vocab_size": 300},
        "model": {"d_model": 32, "heads": 2, "ffn_dim": 64, "layers": 1, "dropout": 0.0, "share_embeddings": True},
        "training": {"output_dir": str(out), "max_steps": 6, "valid_every": 3, "max_tokens": 600, "accum_steps": 2,
                     "lr": 0.003, "warmup_steps": 2, "device": "cpu", "threads": 1, "valid_bleu": False,
                     "best_metric": "loss", "log_every": 1, **training},
    }
    path = out.with_suffix(".yaml")
    path.write_text(yaml.safe_dump(cfg))
    return path


def torchrun(config: Path, *extra: str, background: bool = False):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "seq2seq",
           "train", str(config), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if background:
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def single(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "seq2seq", "train", str(config)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})


def test_two_processes_train_the_same_weights_as_one_and_only_rank_0_writes(multi30k_small, tmp_path):
    one = single(write_config(multi30k_small, tmp_path / "one"))
    assert one.returncode == 0, one.stderr[-3000:]
    two = torchrun(write_config(multi30k_small, tmp_path / "two"))
    assert two.returncode == 0, two.stderr[-3000:] + two.stdout[-3000:]
    for name in ("train_state/model.safetensors", "checkpoints/step_6.safetensors"):
        a, b = load_weights(tmp_path / "one" / name), load_weights(tmp_path / "two" / name)
        assert a.keys() == b.keys()
        for key in a:
            torch.testing.assert_close(b[key], a[key], rtol=1e-4, atol=2e-5, msg=f"{name}: {key}")
    log = two.stderr + two.stdout
    assert "processes: 2" in log
    assert log.count("step 3: valid_loss=") == 1 and log.count("step 6: valid_loss=") == 1  # rank 0 only
    history_one = read_json(tmp_path / "one" / "train_state" / "state.json")["history"]
    history_two = read_json(tmp_path / "two" / "train_state" / "state.json")["history"]
    valid = [(r["step"], round(r["valid_loss"], 4)) for r in history_one if "valid_loss" in r]
    assert valid == [(r["step"], round(r["valid_loss"], 4)) for r in history_two if "valid_loss" in r]
    assert sorted(p.name for p in (tmp_path / "two" / "checkpoints").iterdir()) == ["step_3.safetensors",
                                                                                   "step_6.safetensors"]
    assert not list((tmp_path / "two").glob("*.tmp*"))


def test_accum_steps_must_be_a_multiple_of_the_processes(multi30k_small, tmp_path):
    result = torchrun(write_config(multi30k_small, tmp_path / "odd", accum_steps=3))
    assert result.returncode != 0
    assert "training.accum_steps (3) must be a multiple of the number of processes (2)" in result.stderr


def _rank_pids(agent: int) -> dict[int, int]:
    """{rank: pid} of the worker processes under torchrun's agent process."""
    pids = {}
    for child in Path(f"/proc/{agent}/task/{agent}/children").read_text().split():
        try:
            environ = Path(f"/proc/{child}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in environ:
            if item.startswith(b"RANK="):
                pids[int(item[5:])] = int(child)
    return pids


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads worker pids from /proc (Linux)")
def test_a_killed_rank_ends_the_job_and_the_last_checkpoint_stays_intact(multi30k_small, tmp_path):
    out = tmp_path / "killed"
    job = torchrun(write_config(multi30k_small, out, max_steps=100000, valid_every=2, max_tokens=300),
                   background=True)
    try:
        deadline = time.time() + 120
        while not (out / "train_state" / "state.json").is_file():
            assert job.poll() is None, job.stdout.read()[-3000:]
            assert time.time() < deadline, "no checkpoint within 120 s"
            time.sleep(0.5)
        pids = _rank_pids(job.pid)
        assert set(pids) == {0, 1}
        os.kill(pids[1], signal.SIGKILL)
        output, _ = job.communicate(timeout=120)  # the job ends by itself: no hung process
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode != 0
    assert "rank" in output.lower() and ("SIGKILL" in output or "Signal 9" in output or "exitcode" in output)
    loaded = load_model_dir(out)  # the last written weights and config are whole
    assert loaded.model.num_parameters() > 0
    state = read_json(ModelDir(out).train_state() / "state.json")
    assert state["step"] >= 2


def test_tensorboard_logging_writes_event_files_next_to_log_csv(multi30k_small, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = single(write_config(multi30k_small, tmp_path / "tb", tensorboard=True, accum_steps=1))
    assert result.returncode == 0, result.stderr[-3000:]
    events = EventAccumulator(str(tmp_path / "tb" / "tensorboard"))
    events.Reload()
    losses = [(e.step, round(e.value, 4)) for e in events.Scalars("valid_loss")]
    history = read_json(tmp_path / "tb" / "train_state" / "state.json")["history"]
    assert losses == [(r["step"], round(r["valid_loss"], 4)) for r in history if "valid_loss" in r]
    assert len(events.Scalars("train_loss")) == 6 and (tmp_path / "tb" / "log.csv").is_file()


def test_collective_timeout_reaches_the_process_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """training.collective_timeout_s is the timeout every collective of the group waits for a dead
    peer (torch's default, 30 minutes, would leave the survivors of a killed worker blocked)."""
    import datetime

    from seq2seq.training import distributed

    seen: dict[str, object] = {}
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(distributed.dist, "init_process_group",
                        lambda backend, timeout: seen.update(backend=backend, timeout=timeout))
    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    monkeypatch.setattr(distributed, "is_main", lambda: True)
    assert distributed.init("cpu", 45.0)
    assert seen == {"backend": "gloo", "timeout": datetime.timedelta(seconds=45)}


def test_collective_timeout_must_be_positive() -> None:
    from seq2seq.config.schema import ConfigError
    from seq2seq.config.training_section import TrainingConfig

    assert TrainingConfig().collective_timeout_s == 90.0
    with pytest.raises(ConfigError, match="training.collective_timeout_s must be positive"):
        TrainingConfig(collective_timeout_s=0)
