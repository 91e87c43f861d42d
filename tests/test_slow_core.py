"""benchmarks/slow_core.py: the busy loop's nice value for a slowdown, and a command run pinned beside it."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.slow_core import core_share, loop_nice, run_slowed  # noqa: E402


def test_loop_nice_leaves_the_share_asked_for():
    assert loop_nice(2.0) == 0  # equal weights: half the core
    assert loop_nice(1.5) == 3  # 1024 / (1024 + 526): 66%
    assert core_share(3) == 1024 / (1024 + 526) and core_share(None) == 1.0
    for slowdown in (1.25, 1.5, 2.0, 3.0):
        assert abs(1 / core_share(loop_nice(slowdown)) - slowdown) / slowdown < 0.12  # the nearest weight is close
    with pytest.raises(SystemExit, match="must be > 1"):
        loop_nice(1.0)


def busy_loops() -> set[str]:
    """The pids of the busy loops running now (from /proc)."""
    pids = set()
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if b"while :; do :; done" in cmdline.read_bytes():
                pids.add(cmdline.parent.name)
        except OSError:  # the process ended meanwhile
            pass
    return pids


@pytest.mark.skipif(shutil.which("taskset") is None or not Path("/proc/self").is_dir(),
                    reason="needs taskset and /proc")
def test_command_runs_on_the_core_and_the_loop_stops(tmp_path):
    out = tmp_path / "affinity"
    code = "import os, sys; open(sys.argv[1], 'w').write(str(sorted(os.sched_getaffinity(0))))"
    before = busy_loops()
    assert run_slowed([sys.executable, "-c", code, str(out)], 0, 3, dict(os.environ)) == 0
    assert out.read_text() == "[0]"
    assert busy_loops() <= before  # the busy loop was killed with the command's end
    assert run_slowed([sys.executable, "-c", "raise SystemExit(3)"], 0, None, dict(os.environ)) == 3
