"""A second SLURM cluster beside the first (`up --clusters 2`), registered in the same slurmdbd: what a site with
several clusters behind one login is, for the submitter's `-M` (profile key `clusters:`).

Cluster `second` has its own slurmctld (port 11818, its own state, pid and log files: `slurmctld-second`), its own
slurm.conf (`second/slurm.conf` in the state folder) and its own nodes, sec1..sec2 (partition `cpu`, the default, as
on the first: a profile's partition means the same on both; feature `second`), each a slurmd on 127.0.2.I:11920+I. Its jobs go to
the same slurmdbd, so a client of the first cluster reaches it with `-M second` (`sbatch -M second`,
`squeue -M second`, `sacct -M second`): SLURM finds its controller through slurmdbd, as on a real site. The
clients' SLURM_CONF stays the first cluster's.
"""

from __future__ import annotations

from pathlib import Path

from launcher.devcluster.config import GENERATED, Node, Spec, _write_if_changed, render_slurm_conf, spool
from launcher.devcluster.paths import ACCOUNT, NODE_PORT_BASE, STATE_DIR, ClusterError, log_file
from launcher.devcluster.processes import Daemon, probe, run, running_pid, start_daemon, stop_daemon, wait_for

NAME = "second"
CTLD = "slurmctld-second"
CTLD_PORT = 11818
NODES = 2
# A feature only the second cluster's nodes have: `constraint: second` is a request only it can run, so a run
# that names both clusters lands there whatever the first's load (tests/test_clusters.py).
FEATURE = "second"


def nodes(spec: Spec) -> list[Node]:
    """The second cluster's nodes ([] when `up` was asked for one cluster)."""
    if spec.clusters < 2:
        return []
    return [Node(f"sec{i}", f"127.0.2.{i}", NODE_PORT_BASE + 20 + i, 0, FEATURE) for i in range(1, NODES + 1)]


def conf_path() -> Path:
    return STATE_DIR / NAME / "slurm.conf"


def write_configs(spec: Spec) -> bool:
    """Its slurm.conf (and an empty gres.conf beside it: GresTypes names gpu); True when either changed."""
    conf_path().parent.mkdir(mode=0o755, exist_ok=True)
    (STATE_DIR / spool(spec) / CTLD).mkdir(mode=0o755, parents=True, exist_ok=True)
    for node in nodes(spec):
        (STATE_DIR / spool(spec) / f"slurmd-{node.name}").mkdir(mode=0o755, exist_ok=True)
    slurm = _write_if_changed(conf_path(), render_slurm_conf(spec, NAME, CTLD_PORT, nodes(spec), CTLD))
    gres = _write_if_changed(conf_path().with_name("gres.conf"), f"{GENERATED}\n")
    return slurm or gres


def register() -> None:
    """The cluster, and root's association on it under the first cluster's account, in slurmdbd (before its
    slurmctld starts: a controller whose cluster slurmdbd does not know sends it no jobs)."""
    listed = run(["sacctmgr", "-n", "-P", "list", "cluster", "format=cluster"]).stdout.split()
    if NAME not in listed:
        run(["sacctmgr", "-i", "add", "cluster", NAME])
    held = run(["sacctmgr", "-n", "-P", "list", "assoc", "user=root", f"cluster={NAME}", "format=account"]).stdout
    if ACCOUNT not in held.split():
        run(["sacctmgr", "-i", "add", "account", ACCOUNT, f"Cluster={NAME}", "Description=dev cluster",
             "Organization=dev"], check=False)  # (the account exists already on the first: only its association)
        run(["sacctmgr", "-i", "add", "user", "root", f"Account={ACCOUNT}", f"Cluster={NAME}"])


def daemons(spec: Spec) -> list[Daemon]:
    rel = spec.release
    stepd = ["-d", rel.daemon("slurmstepd")] if rel.unpacked else []
    conf = ["-f", str(conf_path())]
    return [Daemon(CTLD, [rel.daemon("slurmctld"), "-D", *conf]),
            *(Daemon(f"slurmd-{n.name}", [rel.daemon("slurmd"), "-D", "-N", n.name, *conf, *stepd])
              for n in nodes(spec))]


def start(spec: Spec) -> None:
    """Its slurmctld, once `scontrol -M second ping` answers through slurmdbd, then its slurmd."""
    if spec.clusters < 2:
        return
    register()
    ctld, *slurmds = daemons(spec)
    start_daemon(ctld)
    wait_for(f"{CTLD} (through slurmdbd)", lambda: probe(["scontrol", "-M", NAME, "ping"]) is not None, CTLD, 60)
    for daemon in slurmds:
        start_daemon(daemon)


def stop() -> None:
    for name in [f"slurmd-sec{i}" for i in range(1, NODES + 1)] + [CTLD]:
        if running_pid(name):
            stop_daemon(name)


def node_states() -> dict[str, str] | None:
    """{node: sinfo short state} of the second cluster, or None when it does not answer."""
    proc = probe(["sinfo", "-M", NAME, "-h", "-N", "-o", "%N %t"])
    if proc is None:
        return None
    return dict(fields for line in proc.stdout.splitlines() if len(fields := line.split()) == 2)


def wait_ready(spec: Spec, usable: set[str], timeout: float) -> None:
    import time

    deadline = time.monotonic() + timeout
    while nodes(spec):
        states = node_states() or {}
        missing = [n.name for n in nodes(spec) if states.get(n.name) not in usable]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise ClusterError(f"the second cluster's nodes are not ready; states: {states}",
                               [log_file(CTLD), log_file(f"slurmd-{missing[0]}")])
        time.sleep(1)


def cancel_all() -> None:
    """Cancel every job of the second cluster (before its slurmd stop, as for the first)."""
    if not running_pid(CTLD):
        return
    listed = probe(["squeue", "-M", NAME, "-h", "-o", "%A"])
    ids = [word for word in (listed.stdout.split() if listed else []) if word.isdigit()]
    if ids:
        probe(["scancel", "-M", NAME, *ids], timeout=15)
