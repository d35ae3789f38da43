"""The SLURM dev cluster (python -m launcher.devcluster up --nodes 4): real jobs on it, and its own files."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.devcluster import config

# The tests that need the running cluster; the file and import tests below do not.
on_cluster = pytest.mark.usefixtures("slurm_cluster")

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
def two_node_job(slurm_cluster: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    out = tmp_path_factory.mktemp("slurm") / "two_node.out"
    job_id = sbatch_wait(
        out, "-N2", "--ntasks-per-node=2", "--time=00:05:00",
        # Single quotes: each task's shell must expand these, not the batch script's.
        "--wrap", "srun bash -c 'echo rank=$SLURM_PROCID node=$SLURMD_NODENAME'",
    )
    return job_id, out.read_text().splitlines()


@pytest.mark.slurm
@on_cluster
def test_cpu_partition_nodes_are_up() -> None:
    states = node_states("cpu")
    assert len(states) >= 2, states
    assert all(s in USABLE for s in states.values()), states
    assert set(node_states("gpu").values()) <= USABLE


@pytest.mark.slurm
@on_cluster
def test_two_node_job_runs_ranks_on_distinct_nodes(two_node_job: tuple[str, list[str]]) -> None:
    _, lines = two_node_job
    ranks = dict(line.split() for line in lines)  # "rank=N" -> "node=NAME"
    assert sorted(ranks) == [f"rank={i}" for i in range(4)], lines
    assert len(set(ranks.values())) == 2, lines


@pytest.mark.slurm
@on_cluster
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


@pytest.mark.slurm
@on_cluster
def test_gpu_partition_maps_gpus(tmp_path: Path) -> None:
    out = tmp_path / "gpu.out"
    sbatch_wait(out, "-p", "gpu", "--gpus-per-node=2", "--time=00:05:00", "--wrap", "env")
    env = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
    assert env["SLURM_GPUS_ON_NODE"] == "2"
    assert len(env["CUDA_VISIBLE_DEVICES"].split(",")) == 2
    assert env["SLURMD_NODENAME"].startswith("gpu")


@pytest.mark.slurm
@on_cluster
def test_no_daemon_listens_on_a_port_a_job_derives_for_its_rendezvous() -> None:
    """Every job on this machine derives its MASTER_PORT in [PORT_BASE, PORT_BASE + PORT_SPAN): a daemon
    there made a run's rank 0 fail with EADDRINUSE. The ports are read from the live controller."""
    from trainer.distributed.environment import PORT_BASE, PORT_SPAN

    shown = run("scontrol", "show", "config")
    ports = {key: int(line.split("=")[1]) for line in shown.splitlines()
             for key in ("SlurmctldPort", "AccountingStoragePort") if line.startswith(key + " ")}
    for line in run("scontrol", "-o", "show", "node").splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        ports[fields["NodeName"]] = int(fields["Port"])
    ports["mariadb"] = config.MARIADB_PORT
    assert len(ports) == 3 + len(node_states("cpu")) + len(node_states("gpu")), ports
    inside = {name: port for name, port in ports.items() if PORT_BASE <= port < PORT_BASE + PORT_SPAN}
    assert not inside, f"listening where jobs derive their rendezvous ports: {inside}"


@pytest.mark.slurm
@on_cluster
def test_scontrol_show_hostnames_resolve_to_distinct_addresses() -> None:
    names = run("scontrol", "show", "hostnames", "cpu[1-2],gpu1").split()
    assert names == ["cpu1", "cpu2", "gpu1"]
    # Jobs use these names as e.g. MASTER_ADDR, so they must resolve (/etc/hosts).
    addrs = {socket.gethostbyname(name) for name in names}
    assert len(addrs) == 3 and all(a.startswith("127.0.1.") for a in addrs)


@pytest.mark.slurm
@on_cluster
def test_the_cluster_runs_the_release_it_was_brought_up_with_and_its_commands_come_first(tmp_path: Path) -> None:
    """`up --slurm R`: the controller is R, the commands a shell or a job finds first on PATH are R's, and only
    an unpacked release links its commands into /usr/local/bin (22.05 is this machine's own /usr/bin)."""
    from launcher.devcluster import load_spec, releases

    spec = load_spec()
    assert spec is not None
    shown = run("scontrol", "show", "config")
    controller = next(line for line in shown.splitlines() if line.startswith("SLURM_VERSION")).split("=")[1].strip()
    assert controller.startswith(spec.slurm + "."), (controller, spec.slurm)
    assert run("sbatch", "--version").split()[-1].startswith(spec.slurm + "."), "a client of another release"
    linked = (releases.LINK_DIR / "sbatch").is_symlink()
    assert linked == spec.release.unpacked
    # And the batch script's own srun (a job's PATH is the submitter's): the same release.
    out = tmp_path / "srun-version.out"
    sbatch_wait(out, "--time=00:02:00", "--wrap", "srun --version")
    assert out.read_text().split()[-1].startswith(spec.slurm + ".")


OLD_MARK = "# dev-cluster node (tests/slurm_cluster.py)"


def test_hosts_lines_of_the_old_tests_module_are_replaced_not_duplicated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosts = tmp_path / "hosts"
    old = [f"127.0.1.{i}\tcpu{i}\t{OLD_MARK}" for i in range(1, 5)] + [f"127.0.1.11\tgpu1\t{OLD_MARK}"]
    hosts.write_text("\n".join(["127.0.0.1\tlocalhost", *old, "10.0.0.1\tother"]) + "\n")
    monkeypatch.setattr(config, "HOSTS_FILE", hosts)
    spec = config.Spec(nodes=2, max_array_size=1001)
    config.ensure_hosts(spec.all_nodes())
    first = hosts.read_text()
    config.ensure_hosts(spec.all_nodes())
    assert hosts.read_text() == first  # idempotent
    lines = first.splitlines()
    assert lines[:2] == ["127.0.0.1\tlocalhost", "10.0.0.1\tother"]  # others' lines kept
    assert not [line for line in lines if OLD_MARK in line]  # stale cpu3, cpu4 gone too
    assert lines[2:] == [f"{n.addr}\t{n.name}\t{config.HOSTS_MARK}" for n in spec.all_nodes()]
    assert [line.split()[1] for line in lines[2:]] == ["cpu1", "cpu2", "gpu1", "gpu2"]


def test_client_links_a_dev_cluster_left_in_another_folder_are_replaced_and_others_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A machine copied while another checkout's 24.11 was up (CI's clone of a session's machine) still has that
    checkout's links: `up` replaces them; a SLURM client someone installed there by hand stays and is refused."""
    from launcher.devcluster import releases
    from launcher.devcluster.paths import ClusterError

    links = tmp_path / "local-bin"
    links.mkdir()
    monkeypatch.setattr(releases, "LINK_DIR", links)
    monkeypatch.setattr(releases, "active_clients", lambda: tmp_path / "state" / "bin")
    (tmp_path / "state").mkdir()
    for name in releases.CLIENTS:  # what a session in /work/main left, pointing into its own state folder
        (links / name).symlink_to(f"/elsewhere/main/.dev-cluster/slurm/24.11/bin/{name}")
    rel = releases.Release("24.11", "trixie", unpacked=True)
    ours = tmp_path / "state" / "slurm" / "24.11" / "bin"
    ours.mkdir(parents=True)
    for name in releases.CLIENTS:
        (ours / name).touch()
    monkeypatch.setattr(releases.Release, "client_dir", lambda self: ours)
    releases.link_clients(rel)
    assert {os.readlink(links / n) for n in releases.CLIENTS} == {str(ours / n) for n in releases.CLIENTS}

    releases.unlink_clients()
    (links / "sbatch").symlink_to("/opt/slurm/bin/sbatch")  # someone's own SLURM
    (links / "sacct").symlink_to("/elsewhere/.dev-cluster/slurm/24.11/bin/sbatch")  # not its own name
    with pytest.raises(ClusterError, match="sacct exists and is not the dev cluster's"):
        releases.link_clients(rel)
    assert os.readlink(links / "sbatch") == "/opt/slurm/bin/sbatch"


def test_the_package_stands_alone_and_imports_nothing_heavy() -> None:
    code = ("import json, sys, launcher.devcluster; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('launcher', 'trainer', 'torch')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = json.loads(out)
    assert [m for m in loaded if not m.startswith("launcher.devcluster")] == ["launcher"], loaded
