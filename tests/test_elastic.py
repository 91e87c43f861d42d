"""Elastic restarts under torchrun (issue 74): each round of workers joins a process group of its own
(`distributed._round_prefix`), a failed process leaves the group without waiting, and a job of two
launchers whose worker is killed (or whose network is cut) resumes from the last complete checkpoint
and ends with the weights of an uninterrupted run, leaving no process behind."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import run_benchmark

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.elastic_soak import (  # noqa: E402
    Launcher, Progress, job_processes, launch, reference_run, saved_step, weight_difference, write_config,
    write_corpus)


def _join(store, rank: int, world: int, out: dict, timeout_s: float = 20.0) -> None:
    from seq2seq.training import distributed

    try:
        out[rank] = distributed._round_prefix(store, rank, world, timeout_s)
    except Exception as e:  # noqa: BLE001 - the test reads it
        out[rank] = e


def test_a_round_never_joins_the_key_prefix_an_earlier_round_left_in_the_agents_store(monkeypatch):
    """The store torchrun's agents keep across restarts still names the previous round (and its welcomes):
    a rank that reads it before the new rank 0 has written the new name waits for an answer that never
    comes, reads again and joins the new round; all ranks end with one prefix, not the stale one."""
    import torch.distributed as dist

    from seq2seq.training import distributed

    monkeypatch.setattr(distributed, "HELLO_WAIT_S", 0.2)
    store = dist.HashStore()
    store.set(distributed.ROUND_KEY, "stale")  # what the killed round's rank 0 wrote
    store.set("seq2seq/stale/hello/1", "old")
    store.set("seq2seq/stale/welcome/old", "1")
    out: dict = {}
    late = [threading.Thread(target=_join, args=(store, r, 3, out)) for r in (1, 2)]
    for t in late:
        t.start()
    time.sleep(0.6)  # ranks 1 and 2 have read "stale" and are waiting for a welcome
    first = threading.Thread(target=_join, args=(store, 0, 3, out))
    first.start()
    for t in [*late, first]:
        t.join(timeout=30)
    assert not any(isinstance(v, Exception) for v in out.values()), out
    assert len(set(out.values())) == 1 and out[0] != "seq2seq/stale/pg/"
    assert re.fullmatch(r"seq2seq/[0-9a-f]{32}/pg/", out[0])


def test_a_rank_whose_rank_0_never_comes_fails_in_one_line_within_the_timeout(monkeypatch):
    import torch.distributed as dist

    from seq2seq.training import distributed

    monkeypatch.setattr(distributed, "HELLO_WAIT_S", 0.1)
    store = dist.HashStore()
    store.set(distributed.ROUND_KEY, "stale")
    t = time.monotonic()
    with pytest.raises(dist.DistStoreError, match=r"rank 1: rank 0 did not start this round of workers within 0.5 s "
                                                  r"\(training.collective_timeout_s\)"):
        distributed._round_prefix(store, 1, 2, 0.5)
    assert time.monotonic() - t < 3


def test_a_failed_process_leaves_the_group_without_a_barrier(monkeypatch):
    """After a failure a peer may be dead: a barrier would wait out the collective timeout once more."""
    from seq2seq.training import distributed

    calls: list[str] = []
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(distributed.dist, "barrier", lambda: calls.append("barrier"))
    monkeypatch.setattr(distributed.dist, "destroy_process_group", lambda: calls.append("destroy"))
    distributed.shutdown(clean=False)
    assert calls == ["destroy"]
    distributed.shutdown()
    assert calls == ["destroy", "barrier", "destroy"]


def test_a_run_resumed_with_another_number_of_processes_says_the_global_batch_is_kept(caplog):
    from seq2seq.training.trainer import Trainer

    fake = SimpleNamespace(cfg=SimpleNamespace(accum_steps=4, max_tokens=300), world=1)
    with caplog.at_level("INFO", logger="seq2seq.training.trainer"):
        Trainer._log_world_change(fake, 2)
    assert ("resumed with 1 process(es) where the run was saved by 2: the global batch stays 4 batches of 300 tokens "
            "a step (training.accum_steps), now 4 a process (was 2)") in caplog.text


def test_a_killed_worker_is_restarted_and_the_job_ends_with_the_weights_of_an_uninterrupted_run(tmp_path):
    """Loopback, two launchers (the smallest elastic soak): one worker SIGKILLed after step 10's checkpoint;
    both agents start a new round, which resumes from step 10; the job ends (both launchers exit 0) with the
    final weights of one uninterrupted process (to tests/test_distributed.py's tolerance), no process left."""
    out = run_benchmark("elastic_soak.py", "--kills", 1, "--steps", 30, "--checkpoint-every", 10,
                        "--collective-timeout", 10, "--work-dir", tmp_path / "soak").stdout
    kill = re.search(r"^kill  1 \(launcher [01]'s worker at step (\d+)\): resumed from step (\d+), (\d+) steps lost, "
                     r"trained again after ([\d.]+) s$", out, re.M)
    assert kill, out
    step, resumed, lost, _ = kill.groups()
    assert int(resumed) in (10, 20) and int(lost) == int(step) - int(resumed) <= 10  # (20: the kill came late)
    assert re.search(r"^1 kills, 1 restarts \(rounds that resumed\)", out, re.M), out
    assert re.search(r"^final weights against the uninterrupted single process: largest difference", out, re.M), out
    assert out.rstrip().endswith("0 failures; 0 orphan processes"), out
    assert not job_processes(str(tmp_path / "soak"))


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _netns_unavailable() -> str | None:
    """Why two network namespaces joined by a veth pair cannot be made here, or None."""
    if shutil.which("ip") is None:
        return "needs iproute2 (the ip command)"
    probe = f"s2sprobe{threading.get_native_id()}"
    result = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        return f"ip netns is not permitted here (root and CAP_SYS_ADMIN needed): {result.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
    return None


@pytest.fixture
def two_namespaces():
    """Two network namespaces joined by a veth pair: [(namespace, interface, address)] of each end."""
    reason = _netns_unavailable()
    if reason:
        pytest.skip(reason)
    tag = str(threading.get_native_id())[-6:]
    ends = [(f"s2s{tag}a", f"s2s{tag}va", "10.213.7.1"), (f"s2s{tag}b", f"s2s{tag}vb", "10.213.7.2")]
    try:
        for ns, _, _ in ends:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)  # (left by a run killed)
            _ip("netns", "add", ns)
        _ip("link", "add", ends[0][1], "type", "veth", "peer", "name", ends[1][1])
        for ns, dev, addr in ends:
            _ip("link", "set", dev, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield ends
    finally:
        for ns, _, _ in ends:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


def _wait(progress: Progress, launchers: list[Launcher], until, what: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not until():
        assert time.monotonic() < deadline, f"{what}: not within {seconds:g} s; logs: {[str(p.log) for p in launchers]}"
        assert all(p.proc.poll() is None for p in launchers), f"{what}: a launcher exited: " + "".join(
            p.log.read_text()[-2000:] for p in launchers)
        time.sleep(0.01)
        progress.read(launchers)


def test_across_network_namespaces_a_killed_worker_and_a_cut_link_are_survived(two_namespaces, tmp_path):
    """One launcher in each of two network namespaces joined by a veth pair (real network separation): the
    worker of the second killed after step 10's checkpoint, then, after the next checkpoint, the second's link cut for
    longer than the collective timeout (no connection reset reaches the survivors: they must time out) and
    restored. Each time a new round resumes from the last checkpoint; the job ends with the weights of an
    uninterrupted run, no process left."""
    timeout, steps = 5, 40
    write_corpus(tmp_path / "data")
    reference = write_config(tmp_path / "reference.yaml", tmp_path / "data", tmp_path / "reference", steps, 10, timeout)
    reference_run(reference)
    config = write_config(tmp_path / "elastic.yaml", tmp_path / "data", tmp_path / "elastic", steps, 10, timeout)
    (ns_a, dev_a, addr_a), (ns_b, dev_b, addr_b) = two_namespaces
    launchers = [launch(0, config, tmp_path, 29400, host=addr_a, netns=ns_a, local_addr=addr_a, max_restarts=3,
                        rdzv_conf="is_host=true", env={"GLOO_SOCKET_IFNAME": dev_a})]
    time.sleep(1)  # (the first launcher hosts the rendezvous store at its address)
    launchers.append(launch(1, config, tmp_path, 29400, host=addr_a, netns=ns_b, local_addr=addr_b, max_restarts=3,
                            rdzv_conf="is_host=false", env={"GLOO_SOCKET_IFNAME": dev_b}))
    progress = Progress()
    try:
        saved = lambda: saved_step(tmp_path / "elastic")  # noqa: E731 - the step of the checkpoint on disk
        # (a kill once the last checkpoint step's save is on disk: one in flight would die with rank 0)
        _wait(progress, launchers, lambda: progress.step >= 12 and progress.step - saved() < 10, "training to step 12",
              120)
        assert launchers[1].kill_worker() is not None
        _wait(progress, launchers, lambda: len(progress.resumes) == 1 and progress.steps_since_resume > 0,
              "a new round after the kill", 2 * timeout + 60)
        assert progress.resumes[0] in (10, 20)  # (the last checkpoint before the kill)
        _wait(progress, launchers, lambda: progress.step >= progress.resumes[0] + 12 and progress.step - saved() < 10,
              "training past a checkpoint", 60)
        cut = time.monotonic()
        _ip("-n", ns_b, "link", "set", dev_b, "down")
        time.sleep(timeout + 3)
        _ip("-n", ns_b, "link", "set", dev_b, "up")
        _wait(progress, launchers, lambda: len(progress.resumes) == 2 and progress.steps_since_resume > 0,
              "a new round after the cut", 2 * timeout + 60)
        assert len(progress.resumes) == 2 and progress.resumes[1] > progress.resumes[0]
        assert progress.resumes[1] % 10 == 0
        assert progress.step_at - cut < timeout + 3 + 2 * timeout + 60
        for p in launchers:
            assert p.proc.wait(timeout=120) == 0, p.log.read_text()[-3000:]
    finally:
        for p in launchers:
            p.stop()
    assert not job_processes(str(config))
    worst, close = weight_difference(tmp_path / "reference", tmp_path / "elastic")
    assert close, f"largest weight difference {worst}"



def _saved_run(out: Path, steps: list[int]):
    """A run directory whose train state was saved at each of `steps` (a tiny module), and the module."""
    import torch

    from seq2seq.training.run_state import Checkpoints

    model = torch.nn.Linear(2, 2)
    checkpoints = Checkpoints(out, keep_last=2, best_metric="loss")
    for step in steps:
        progress = {"step": step, "best": 1.0, "best_step": step, "elapsed": 1.0, "history": []}
        checkpoints.save(model, {"note": step}, progress, best=False)
    return checkpoints, model


def test_every_process_resumes_from_the_train_state_rank_0_chose(tmp_path, monkeypatch):
    """(rank 0's choice and step reach the others by broadcast_object: here, train_state.old/ at step 20, left
    by a swap cut short, while train_state/ holds step 30)"""
    from seq2seq.training import distributed

    checkpoints, model = _saved_run(tmp_path / "run", [20])
    shutil.copytree(tmp_path / "run" / "train_state", tmp_path / "step20")
    _saved_run(tmp_path / "run", [30])  # (a save removes train_state.old/ once its swap is done)
    shutil.copytree(tmp_path / "step20", tmp_path / "run" / "train_state.old")
    monkeypatch.setattr(distributed, "is_main", lambda: False)
    monkeypatch.setattr(distributed, "rank", lambda: 1)
    monkeypatch.setattr(distributed, "broadcast_object", lambda obj: ("train_state.old", 20))
    loaded = checkpoints.load(model)
    assert loaded is not None and loaded[1]["step"] == 20 and loaded[0]["note"] == 20


def test_a_process_that_cannot_read_rank_0s_train_state_says_the_directory_must_be_shared(tmp_path, monkeypatch):
    import torch

    from seq2seq.storage import CheckpointError
    from seq2seq.training import distributed
    from seq2seq.training.run_state import Checkpoints

    monkeypatch.setattr(distributed, "is_main", lambda: False)
    monkeypatch.setattr(distributed, "rank", lambda: 1)
    monkeypatch.setattr(distributed, "broadcast_object", lambda obj: ("train_state", 20))
    with pytest.raises(CheckpointError, match=r"^rank 1 cannot read \S+train_state, the train state rank 0 resumes "
                                              r"from \(step 20\): under torchrun on several machines "
                                              r"training.output_dir must be on a filesystem they all share$"):
        Checkpoints(tmp_path / "run", keep_last=2, best_metric="loss").load(torch.nn.Linear(2, 2))
