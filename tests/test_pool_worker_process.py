"""A pool worker's rank runs hundreds of points in one process; each must start as in a fresh one. Each point's
output goes to that point's own log files (launcher/node/pool_point.py own_logs): its children's output too (the
file descriptors are redirected), and afterwards the worker's own log again; a log that cannot be opened is an
error that leaves no descriptor open. The GPU math settings a point's function changed are set back before the
next (trainer.distributed.process.gpu_defaults: a GPU is mocked nowhere here; the flags are plain settings)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.reports import pool_claims
from launcher.node import pool_point
from tests.helpers import ROOT


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


WORKER = """
import subprocess, sys
from launcher.node import pool_point
from tests.helpers import ROOT
print("before", flush=True)
with pool_point.own_logs(sys.argv[1], "42_1", 0):
    print("in the point", flush=True)
    subprocess.run(["sh", "-c", "echo from a child; echo child error >&2"], check=True)
print("after", flush=True)
"""


def test_a_points_output_and_its_childrens_go_to_its_log_then_back(tmp_path: Path) -> None:
    # In a process of its own, as a worker's rank is: pytest's capture would stand in for sys.stdout.
    done = subprocess.run([sys.executable, "-c", WORKER, str(tmp_path)], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 0 and done.stdout == "before\nafter\n" and done.stderr == "", done
    out = pool_claims.point_log(tmp_path, "42_1", 0, "out").read_text()
    err = pool_claims.point_log(tmp_path, "42_1", 0, "err").read_text()
    assert out == "in the point\nfrom a child\n" and err == "child error\n"


def test_a_log_that_cannot_be_opened_leaves_no_descriptor_open(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    pool_claims.point_log(tmp_path, "42_1", 0, "err").mkdir(parents=True)  # a folder where the error log goes
    before = open_fds()
    with pytest.raises(IsADirectoryError):
        with pool_point.own_logs(str(tmp_path), "42_1", 0):
            pass
    assert open_fds() == before
    print("still the worker's", flush=True)
    assert capfd.readouterr().out == "still the worker's\n"


def test_gpu_settings_a_point_changed_are_set_back_for_the_next(tmp_path: Path) -> None:
    import torch

    from trainer.distributed import process

    saved = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic,
             torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        # What a user's function may do for its own reproducibility or speed.
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = False, True
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        process.gpu_defaults()
        assert torch.backends.cudnn.benchmark and not torch.backends.cudnn.deterministic
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    finally:
        (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic,
         torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) = saved
