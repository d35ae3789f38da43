"""Real jobs against the SLURM dev cluster (python -m tests.slurm_cluster up --nodes 4)."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_cluster")]

# Other users may run jobs on the shared dev cluster, so busy nodes are fine;
# down/drained/not responding ("*") are not.
USABLE = {"idle", "mix", "alloc", "comp"}


def run(*argv: str, timeout: float = 60) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{argv} failed: {proc.stdout}{proc.stderr}"
    return proc.stdout


def sbatch_wait(out: Path, *args: str) -> str:
    """Submit, block until the job ends (it must succeed), return its job id."""
    job_id = run("sbatch", "--parsable", "--wait", f"--output={out}", *args, timeout=180)
    return job_id.strip().split(";")[0]


def node_states(partition: str) -> dict[str, str]:
    out = run("sinfo", "-h", "-N", "-p", partition, "-o", "%N %t")
    return dict(line.split() for line in out.splitlines())


@pytest.fixture(scope="module")
def two_node_job(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    out = tmp_path_factory.mktemp("slurm") / "two_node.out"
    job_id = sbatch_wait(
        out, "-N2", "--ntasks-per-node=2", "--time=00:05:00",
        # Single quotes: each task's shell must expand these, not the batch script's.
        "--wrap", "srun bash -c 'echo rank=$SLURM_PROCID node=$SLURMD_NODENAME'",
    )
    return job_id, out.read_text().splitlines()


def test_cpu_partition_nodes_are_up() -> None:
    states = node_states("cpu")
    assert len(states) >= 2, states
    assert all(s in USABLE for s in states.values()), states
    assert set(node_states("gpu").values()) <= USABLE


def test_two_node_job_runs_ranks_on_distinct_nodes(two_node_job: tuple[str, list[str]]) -> None:
    _, lines = two_node_job
    ranks = dict(line.split() for line in lines)  # "rank=N" -> "node=NAME"
    assert sorted(ranks) == [f"rank={i}" for i in range(4)], lines
    assert len(set(ranks.values())) == 2, lines


def test_sacct_records_completed_job(two_node_job: tuple[str, list[str]]) -> None:
    job_id, _ = two_node_job
    state = ""
    # slurmctld forwards job records to slurmdbd asynchronously.
    for _ in range(30):
        state = run("sacct", "-j", job_id, "-n", "-X", "-o", "State").strip()
        if state == "COMPLETED":
            break
        time.sleep(1)
    assert state == "COMPLETED"


def test_gpu_partition_maps_gpus(tmp_path: Path) -> None:
    out = tmp_path / "gpu.out"
    sbatch_wait(out, "-p", "gpu", "--gpus-per-node=2", "--time=00:05:00", "--wrap", "env")
    env = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    assert env["SLURM_GPUS_ON_NODE"] == "2"
    assert len(env["CUDA_VISIBLE_DEVICES"].split(",")) == 2
    assert env["SLURMD_NODENAME"].startswith("gpu")


def test_scontrol_show_hostnames_resolve_to_distinct_addresses() -> None:
    names = run("scontrol", "show", "hostnames", "cpu[1-2],gpu1").split()
    assert names == ["cpu1", "cpu2", "gpu1"]
    # Jobs use these names as e.g. MASTER_ADDR, so they must resolve (/etc/hosts).
    addrs = {socket.gethostbyname(name) for name in names}
    assert len(addrs) == 3 and all(a.startswith("127.0.1.") for a in addrs)
