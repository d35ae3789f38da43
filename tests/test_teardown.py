"""A run leaves nothing of its process group behind: when `run_job()` returns or raises StopRequested,
the gloo worker and socket threads and rank 0's TCPStore server thread are gone.

A group still alive at interpreter exit keeps those threads running while Python finalizes and C++
static objects are destroyed; successful SLURM jobs then sometimes aborted at exit ("terminate called
without an active exception") and were reported FAILED.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

# One rank of a 2-rank job, started the way submitit's local executor starts it (its variables),
# without submitit. It prints the threads of its process once run_job() has returned or raised; for
# a stop it prints them while the StopRequested (and its traceback) is still alive, as it is in
# the launcher until the process exits.
RANK = """
import glob, json, sys
from trainer.config.job import JobConfig, RunSettings
from trainer.rank.stopping import StopRequested
from trainer.runners.dispatch import run_job

def threads():
    names = []
    for path in glob.glob("/proc/self/task/*/comm"):
        with open(path) as fh:
            names.append(fh.read().strip())
    return sorted(n for n in names if n.startswith(("pt_gloo", "gloo", "pt_tcpstore")))

job = JobConfig(name="teardown", epochs=1, log_every_steps=1000, interrupt_at=sys.argv[2])
try:
    run_job(job, RunSettings(run_dir=sys.argv[1]))
    print(json.dumps({"ended": "finished", "threads": threads()}))
except StopRequested:
    print(json.dumps({"ended": "stopped", "threads": threads()}))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="lists threads through /proc")
@pytest.mark.parametrize("interrupt_at", ["", "5"], ids=["finished", "stopped"])
def test_no_process_group_thread_outlives_run(tmp_path: Path, interrupt_at: str) -> None:
    port = free_port()
    procs = []
    for rank in range(2):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "SUBMITIT_LOCAL_JOB_ID": "teardown", "SUBMITIT_LOCAL_NTASKS": "2",
               "SUBMITIT_LOCAL_GLOBALID": str(rank), "SUBMITIT_LOCAL_LOCALID": str(rank)}
        procs.append(subprocess.Popen([sys.executable, "-c", RANK, str(tmp_path / "run"), interrupt_at],
                                      cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    outcomes = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
        outcomes.append(json.loads(out.strip().splitlines()[-1]))
    ended = "stopped" if interrupt_at else "finished"
    assert outcomes == [{"ended": ended, "threads": []}] * 2
