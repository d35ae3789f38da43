"""The cluster's daemons, in start order, accounting registration, and node readiness.

Gotchas worked around here:

* Everything runs as root (SlurmUser=root). munged gets ``--force``, which
  turns its fatal checks (insecure folder permissions around the key or
  socket, e.g. a DEV_CLUSTER_DIR below a group-writable folder, or a stale
  socket left by a killed munged) into warnings.
* Several slurmd on one host (Debian builds with MULTIPLE_SLURMD): each
  gets ``-N <node>``, its own Port= and NodeAddr, and ``%n`` in its
  spool/pid/log paths, since slurmd binds its port on all addresses and
  would otherwise share (and kill, via the pid file) another's files.
* No cgroups: proctrack/linuxproc + task/none (see config.py).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable

from launcher.devcluster.config import Node, Spec, database
from launcher.devcluster.paths import (
    ACCOUNT,
    CLUSTER_NAME,
    DB_PASS,
    DB_USER,
    DBD_PORT,
    MARIADB_PORT,
    READY_TIMEOUT_S,
    STATE_DIR,
    ClusterError,
    daemon_logs,
    log_file,
    mariadb_datadir,
    mariadb_socket,
    munge_key,
    munge_socket,
    out_file,
    own_pid_file,
    slurm_conf_path,
)
from launcher.devcluster.processes import (
    Daemon,
    port_open,
    probe,
    run,
    running_pid,
    start_daemon,
    started_names,
    stop_daemon,
    wait_for,
)

# Node states (sinfo %t) in which a node is usable; '*' (not responding) is not.
USABLE_STATES = {"idle", "mix", "alloc", "comp"}


def _start_and_wait(daemon: Daemon, what: str, ready: Callable[[], bool], timeout: float) -> None:
    start_daemon(daemon)
    wait_for(what, ready, daemon.name, timeout)


def init_mariadb() -> None:
    if (mariadb_datadir() / "mysql").is_dir():
        return
    # Socket auth for root: we bootstrap over the unix socket as OS root,
    # slurmdbd gets its own password user over TCP.
    with out_file("mariadb-install-db").open("ab") as out:
        rc = subprocess.call(
            ["mariadb-install-db", "--no-defaults", "--user=root",
             f"--datadir={mariadb_datadir()}", "--auth-root-authentication-method=socket",
             "--skip-test-db"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    if rc != 0:
        shutil.rmtree(mariadb_datadir(), ignore_errors=True)  # so a retry starts clean
        raise ClusterError("mariadb-install-db failed", [out_file("mariadb-install-db")])


def mariadb_daemon() -> Daemon:
    return Daemon("mariadb", [
        "mariadbd", "--no-defaults", "--user=root",
        f"--datadir={mariadb_datadir()}", f"--socket={mariadb_socket()}",
        f"--pid-file={own_pid_file('mariadb')}", f"--log-error={log_file('mariadb')}",
        f"--port={MARIADB_PORT}", "--bind-address=127.0.0.1", "--skip-name-resolve",
        # Values slurmdbd checks for (it warns about smaller ones).
        "--innodb-buffer-pool-size=128M", "--innodb-lock-wait-timeout=900",
        "--innodb-log-file-size=64M", "--max-connections=50",
    ])


def start_mariadb(spec: Spec) -> None:
    init_mariadb()
    client = ["--no-defaults", f"--socket={mariadb_socket()}", "-uroot"]
    _start_and_wait(
        mariadb_daemon(), "MariaDB",
        lambda: probe(["mariadb-admin", *client, "ping"]) is not None and port_open(MARIADB_PORT),
        60,
    )
    grants = "".join(
        f"CREATE USER IF NOT EXISTS '{DB_USER}'@'{host}' IDENTIFIED BY '{DB_PASS}';"
        f"GRANT ALL ON {database(spec)}.* TO '{DB_USER}'@'{host}';"
        for host in ("127.0.0.1", "localhost")
    )
    run(["mariadb", *client], input=grants)


def create_munge_key() -> None:
    key = munge_key()
    if key.exists():
        return
    if shutil.which("mungekey"):
        subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True)
    else:  # munge < 0.5.14
        subprocess.run(["dd", "if=/dev/urandom", f"of={key}", "bs=1", "count=1024"],
                       check=True, capture_output=True)
    key.chmod(0o400)


def munged_daemon() -> Daemon:
    # --force: don't die on insecure folder permissions (wherever
    # DEV_CLUSTER_DIR lives) or on a stale socket from a killed munged.
    return Daemon("munged", [
        "munged", "--foreground", "--force", "--num-threads=2",
        f"--socket={munge_socket()}", f"--key-file={munge_key()}",
        # In the foreground munged logs to stderr, i.e. log/munged.out.
        f"--pid-file={own_pid_file('munged')}",
        f"--seed-file={STATE_DIR}/munge/munge.seed",
    ])


def _munge_works() -> bool:
    cred = probe(["munge", f"--socket={munge_socket()}", "-n"])
    if cred is None:
        return False
    proc = subprocess.run(["unmunge", f"--socket={munge_socket()}"], input=cred.stdout,
                          capture_output=True, text=True, timeout=10)
    return proc.returncode == 0


def start_munge() -> None:
    create_munge_key()
    _start_and_wait(munged_daemon(), "munged to answer", _munge_works, 30)


def slurmdbd_daemon(spec: Spec) -> Daemon:
    return Daemon("slurmdbd", [spec.release.daemon("slurmdbd"), "-D"])


def _sacctmgr_list(entity: str, field: str, *filters: str) -> list[str]:
    """The argv of `sacctmgr list ENTITY` printing one column."""
    return ["sacctmgr", "-n", "-P", "list", entity, *filters, f"format={field}"]


def start_slurmdbd(spec: Spec) -> None:
    ready = _sacctmgr_list("cluster", "cluster")
    _start_and_wait(slurmdbd_daemon(spec), "slurmdbd",
                    lambda: port_open(DBD_PORT) and probe(ready) is not None, 60)


def _column(entity: str, field: str, *filters: str) -> list[str]:
    """One column of `sacctmgr list ENTITY`, e.g. every cluster name."""
    return run(_sacctmgr_list(entity, field, *filters)).stdout.split()


def register_accounting() -> None:
    """Create the cluster, an account and root's association, once.

    The cluster must exist before slurmctld starts, or it will not send its
    jobs to slurmdbd and sacct shows nothing.
    """
    if CLUSTER_NAME not in _column("cluster", "cluster"):
        run(["sacctmgr", "-i", "add", "cluster", CLUSTER_NAME])
    if ACCOUNT not in _column("account", "account"):
        run(["sacctmgr", "-i", "add", "account", ACCOUNT, f"Cluster={CLUSTER_NAME}",
             "Description=dev cluster", "Organization=dev"])
    if ACCOUNT not in _column("assoc", "account", "user=root"):
        run(["sacctmgr", "-i", "add", "user", "root", f"Account={ACCOUNT}",
             f"Cluster={CLUSTER_NAME}"])


def slurmctld_daemon(spec: Spec) -> Daemon:
    return Daemon("slurmctld", [spec.release.daemon("slurmctld"), "-D", "-f", str(slurm_conf_path())])


def slurmd_daemon(spec: Spec, node: Node) -> Daemon:
    rel = spec.release
    # -d: the release's own slurmstepd (slurmd's compiled-in path is this machine's /usr/sbin one).
    stepd = ["-d", rel.daemon("slurmstepd")] if rel.unpacked else []
    return Daemon(f"slurmd-{node.name}", [rel.daemon("slurmd"), "-D", "-N", node.name,
                                          "-f", str(slurm_conf_path()), *stepd])


def start_slurmctld(spec: Spec) -> None:
    """slurmctld, once it answers `scontrol ping` (also after a stop: it recovers its jobs from its
    StateSaveLocation, as after a maintenance restart)."""
    _start_and_wait(slurmctld_daemon(spec), "slurmctld",
                    lambda: probe(["scontrol", "ping"]) is not None, 60)


def start_slurm(spec: Spec) -> None:
    start_slurmctld(spec)
    for node in spec.all_nodes():
        start_daemon(slurmd_daemon(spec, node))


def stop_slurm() -> None:
    """Stop slurmctld and every slurmd we started (e.g. to apply a new slurm.conf)."""
    for name in started_names():
        if name.startswith("slurmd-"):
            stop_daemon(name)
    stop_daemon("slurmctld")


def node_states() -> dict[str, str] | None:
    """{node: sinfo short state} or None when slurmctld does not answer."""
    proc = probe(["sinfo", "-h", "-N", "-o", "%N %t"])
    if proc is None:
        return None
    return dict(line.split() for line in proc.stdout.splitlines() if line.strip())


def unready(spec: Spec, states: dict[str, str] | None) -> list[str]:
    """The nodes of `spec` that are not usable in `states` (all when it is None)."""
    names = [n.name for n in spec.all_nodes()]
    if states is None:
        return names
    return [n for n in names if states.get(n) not in USABLE_STATES]


def _resume_stuck(states: dict[str, str], resumed: set[str]) -> None:
    """Resume nodes left down/drained (e.g. by a killed job) whose slurmd runs.

    ReturnToService=2 only revives nodes that were down for not responding.
    """
    for name, state in states.items():
        stuck = state.rstrip("*~#!%$@^-") in ("down", "drain", "drng")
        if stuck and not state.endswith("*") and name not in resumed \
                and running_pid(f"slurmd-{name}"):
            probe(["scontrol", "update", f"NodeName={name}", "State=RESUME"])
            resumed.add(name)


def wait_nodes_ready(spec: Spec, timeout: float = READY_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    resumed: set[str] = set()
    while True:
        states = node_states()
        missing = unready(spec, states)
        if not missing:
            return
        if states:
            _resume_stuck(states, resumed)
        dead = [n for n in missing if not running_pid(f"slurmd-{n}")]
        if dead or time.monotonic() > deadline:
            why = f"slurmd died on {dead}" if dead else f"timed out after {timeout:.0f}s"
            node = (dead or missing)[0]
            raise ClusterError(
                f"nodes not ready ({why}); states: {states}",
                [log_file("slurmctld"), *daemon_logs(f"slurmd-{node}")],
            )
        time.sleep(1)
