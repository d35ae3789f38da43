"""What the subcommands do: install, up, down, status, env, and the is_up() check."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

from launcher.devcluster.config import (
    Spec,
    ensure_hosts,
    load_spec,
    make_dirs,
    make_fake_gpus,
    save_spec,
    write_configs,
)
from launcher.devcluster.daemons import (
    node_states,
    register_accounting,
    start_mariadb,
    start_munge,
    start_slurm,
    start_slurmdbd,
    stop_slurm,
    unready,
    wait_nodes_ready,
)
from launcher.devcluster.paths import (
    COMMAND,
    DEFAULT_MAX_ARRAY_SIZE,
    STATE_DIR,
    ClusterError,
    client_env,
    slurm_conf_path,
)
from launcher.devcluster.processes import (
    cluster_leftovers,
    kill_all,
    probe,
    running_pid,
    started_names,
    stop_daemon,
)

APT_PACKAGES = ["slurm-wlm", "slurmdbd", "munge", "mariadb-server"]
REQUIRED_BINARIES = [
    "slurmctld", "slurmd", "slurmdbd", "sbatch", "sinfo", "sacct", "sacctmgr",
    "munged", "mungekey", "mariadbd", "mariadb-install-db", "mariadb", "mariadb-admin",
]


def missing_binaries() -> list[str]:
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [b for b in REQUIRED_BINARIES if not shutil.which(b, path=path)]


def install() -> None:
    missing = missing_binaries()
    if not missing:
        print("slurm, slurmdbd, munge and mariadb are installed")
        return
    print(f"missing {missing}; installing {APT_PACKAGES}", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # Keep the packages' init scripts from starting system-wide daemons on the
    # default ports; `up` runs its own copies.
    policy = Path("/usr/sbin/policy-rc.d")
    own_policy = not policy.exists()
    if own_policy:
        policy.write_text("#!/bin/sh\nexit 101\n")
        policy.chmod(0o755)
    try:
        subprocess.run(["apt-get", "update"], check=True, env=env)
        subprocess.run(["apt-get", "install", "-y", *APT_PACKAGES], check=True, env=env)
    finally:
        if own_policy:
            policy.unlink(missing_ok=True)


def _require_root() -> None:
    if os.geteuid() != 0:
        raise ClusterError("must run as root (daemons run as SlurmUser=root, /etc/hosts)")


def up(nodes: int | None, max_array_size: int | None) -> None:
    _require_root()
    if missing := missing_binaries():
        raise ClusterError(f"missing {missing}: run `{COMMAND} install`")
    old = load_spec()
    spec = Spec(
        nodes=nodes or (old.nodes if old else 2),
        max_array_size=max_array_size or (old.max_array_size if old else DEFAULT_MAX_ARRAY_SIZE),
    )
    started = time.monotonic()
    make_dirs(spec)
    make_fake_gpus()
    ensure_hosts(spec)
    changed = write_configs(spec)
    save_spec(spec)
    if "slurm" in changed or "slurmdbd" in changed:
        stop_slurm()  # running daemons hold the old config
    if "slurmdbd" in changed:
        stop_daemon("slurmdbd")
    start_mariadb()
    start_munge()
    start_slurmdbd()
    register_accounting()
    start_slurm(spec)
    wait_nodes_ready(spec)
    names = ", ".join(n.name for n in spec.all_nodes())
    print(f"SLURM dev cluster up in {time.monotonic() - started:.1f}s: {names}")
    print(f"use it with: eval \"$({COMMAND} env)\"")


def _queued_jobs() -> list[str] | None:
    """Ids of every job slurmctld knows, or None when it does not answer."""
    jobs = probe(["squeue", "-h", "-o", "%A"])
    return jobs.stdout.split() if jobs else None


def _cancel_jobs() -> None:
    """Cancel all jobs so their slurmstepd exit before the slurmd stop."""
    if not running_pid("slurmctld"):
        return
    ids = _queued_jobs()
    if not ids:
        return
    probe(["scancel", *ids], timeout=15)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and _queued_jobs():
        time.sleep(0.5)


def down() -> None:
    _cancel_jobs()
    for name in reversed(started_names()):
        stop_daemon(name, timeout=30 if name == "mariadb" else 15)
    # Job-step daemons (slurmstepd) and job processes we never spawned
    # directly; found by our environment marker, never by process name.
    if leftovers := cluster_leftovers():
        kill_all(leftovers)
    print("SLURM dev cluster stopped")


def is_up() -> bool:
    """True when every daemon of the last `up` runs and all nodes are usable."""
    spec = load_spec()
    if spec is None or not slurm_conf_path().exists():
        return False
    expected = ["mariadb", "munged", "slurmdbd", "slurmctld"]
    expected += [f"slurmd-{n.name}" for n in spec.all_nodes()]
    if not all(running_pid(name) for name in expected):
        return False
    return not unready(spec, node_states())


def status() -> bool:
    print(f"state dir: {STATE_DIR}")
    for name in started_names():
        pid = running_pid(name)
        print(f"  {name:<14} {'running, pid ' + str(pid) if pid else 'NOT running'}")
    if not started_names():
        print("  (no daemons started)")
    sinfo = probe(["sinfo"]) if slurm_conf_path().exists() else None
    print(sinfo.stdout if sinfo else "sinfo: slurmctld not reachable")
    ok = is_up()
    print("cluster is UP" if ok else "cluster is NOT up")
    return ok


def print_env() -> None:
    for key, value in client_env().items():
        print(f"export {key}={shlex.quote(value)}")
