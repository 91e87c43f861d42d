"""recipes/jobs.py: the scheduler the experiment recipes run their steps with."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "recipes"))

from jobs import Job, RecipeStopped, markdown_table, schedule  # noqa: E402


def job(name: str, tmp: Path, log: list[str], after: tuple[str, ...] = (), fail: bool = False,
        seconds: float = 0.0) -> Job:
    def run() -> None:
        log.append(f"start {name}")
        time.sleep(seconds)
        if fail:
            raise RuntimeError(f"`seq2seq train` failed for {name}")
        (tmp / name).write_text("done")
        log.append(f"end {name}")

    return Job(name, run, tmp / name, after)


def test_jobs_run_after_what_they_need_and_finished_ones_are_skipped(tmp_path: Path) -> None:
    log: list[str] = []
    (tmp_path / "old").write_text("done")  # finished in an earlier run of the recipe
    jobs = [job("old", tmp_path, log), job("b", tmp_path, log, after=("a",)), job("a", tmp_path, log, seconds=0.05),
            job("c", tmp_path, log, after=("old",))]
    seconds = schedule(jobs, workers=2)
    assert "start old" not in log and set(seconds) == {"a", "b", "c"}
    assert log.index("end a") < log.index("start b")
    assert log.index("start c") < log.index("end a")  # c needs only "old": it ran beside a
    assert all((tmp_path / n).is_file() for n in "abc")


def test_workers_bound_how_many_jobs_run_at_once(tmp_path: Path) -> None:
    running, peak, lock = [0], [0], threading.Lock()

    def run(name: str) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        (tmp_path / name).write_text("done")

    schedule([Job(n, lambda n=n: run(n), tmp_path / n) for n in "abcde"], workers=2)
    assert peak[0] == 2


def test_a_failure_stops_the_recipe_with_its_message_and_nothing_after_it_runs(tmp_path: Path) -> None:
    log: list[str] = []
    jobs = [job("a", tmp_path, log, fail=True), job("b", tmp_path, log, after=("a",)),
            job("c", tmp_path, log, seconds=0.05)]
    with pytest.raises(RecipeStopped, match=r"recipe stopped: `seq2seq train` failed for a; .*run the recipe again"):
        schedule(jobs, workers=2)
    assert "start b" not in log and "end c" in log  # the job running beside it finished; none started after


def test_markdown_table_formats_floats_with_two_decimals() -> None:
    assert markdown_table(["run", "BLEU"], [["5k", 12.345], ["29k", 30]]) == (
        "| run | BLEU |\n|---|---:|\n| 5k | 12.35 |\n| 29k | 30 |\n")


def test_train_model_trains_a_new_run_resumes_a_stopped_one_and_keeps_a_finished_one(tmp_path: Path) -> None:
    from jobs import train_model

    calls: list[tuple[str, ...]] = []
    out = tmp_path / "model"

    def record(*args: object) -> str:
        calls.append(tuple(map(str, args)))
        return ""

    train_model(Path("c.yaml"), out, ["training.max_steps=10"], threads=1, run=record)
    assert calls[-1] == ("train", "c.yaml", "-o", str(out), "--set", "training.max_steps=10",
                         "--set", "training.threads=1")
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"w")
    (out / "train_state").mkdir()  # stopped at step 4: its complete train state is still there
    (out / "train_state" / "COMPLETE").write_text("")
    (out / "train_state" / "state.json").write_text('{"step": 4}')
    train_model(Path("c.yaml"), out, ["training.max_steps=10"], run=record)
    assert calls[-1][-1] == "--resume" and len(calls) == 2
    (out / "train_state" / "state.json").write_text('{"step": 10}')  # finished: at its budget (train state kept)
    assert train_model(Path("c.yaml"), out, ["training.max_steps=10"], run=record) == 0.0
    train_model(Path("c.yaml"), out, ["training.max_steps=20"], run=record)  # a larger budget goes on
    assert len(calls) == 3 and calls[-1][-1] == "--resume"
    (out / "train_state" / "COMPLETE").unlink()  # finished without a train state to resume
    assert train_model(Path("c.yaml"), out, ["training.max_steps=20"], run=record) == 0.0
    assert len(calls) == 3
