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
import launcher.devcluster.second as second
from launcher.devcluster.daemons import (
    USABLE_STATES,
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
from launcher.devcluster.releases import (
    DEFAULT_RELEASE,
    UNPACK_TOOLS,
    Release,
    link_clients,
    release,
    unlink_clients,
    unpack,
)
from launcher.devcluster.paths import (
    COMMAND,
    CRED_EXPIRE_S,
    DEFAULT_MAX_ARRAY_SIZE,
    READY_TIMEOUT_S,
    STATE_DIR,
    ClusterError,
    active_clients,
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

# The programs `up` runs, by the Debian package that has them: munge and MariaDB are this machine's for
# every release; SLURM's own only for the release this machine's packages are (releases.py).
HOST_PROGRAMS = {
    "munged": "munge", "mungekey": "munge", "mariadbd": "mariadb-server", "mariadb-install-db": "mariadb-server",
    "mariadb": "mariadb-server", "mariadb-admin": "mariadb-server",
}
SLURM_PROGRAMS = {
    "slurmctld": "slurm-wlm", "slurmd": "slurm-wlm", "slurmdbd": "slurmdbd", "sbatch": "slurm-wlm",
    "sinfo": "slurm-wlm", "sacct": "slurm-wlm", "sacctmgr": "slurm-wlm",
}
APT_PACKAGES = sorted({*HOST_PROGRAMS.values(), *SLURM_PROGRAMS.values()})
REQUIRED_BINARIES = [*SLURM_PROGRAMS, *HOST_PROGRAMS]


def _programs(rel: Release) -> dict[str, str]:
    """What `rel` needs from this machine's packages: program -> Debian package."""
    return {**HOST_PROGRAMS, **(UNPACK_TOOLS if rel.unpacked else SLURM_PROGRAMS)}


def missing_binaries(rel: Release | None = None) -> list[str]:
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return [b for b in _programs(rel or release(None)) if not shutil.which(b, path=path)]


def install(slurm: str | None = None) -> None:
    rel = release(slurm)
    missing = missing_binaries(rel)
    if missing:
        packages = sorted({_programs(rel)[b] for b in missing})
        print(f"missing {missing}; installing {packages}", flush=True)
        _apt_install(packages)
    else:
        print(f"{', '.join(sorted(set(_programs(rel).values())))} are installed")
    unpack(rel)
    print(f"SLURM {rel.version} is ready: `{COMMAND} up --slurm {rel.version}`")


def _apt_install(packages: list[str]) -> None:
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
        subprocess.run(["apt-get", "install", "-y", *packages], check=True, env=env)
    finally:
        if own_policy:
            policy.unlink(missing_ok=True)


def _require_root() -> None:
    if os.geteuid() != 0:
        raise ClusterError("must run as root (daemons run as SlurmUser=root, /etc/hosts)")


def up(nodes: int | None, max_array_size: int | None, slurm: str | None = None,
       cred_expire: int | None = None, clusters: int | None = None) -> None:
    _require_root()
    old = load_spec()
    rel = release(slurm or (old.slurm if old else None))
    if missing := missing_binaries(rel) + rel.missing():
        flag = "" if rel.version == DEFAULT_RELEASE else f" --slurm {rel.version}"
        raise ClusterError(f"missing {missing}: run `{COMMAND} install{flag}`")
    spec = Spec(
        nodes=nodes or (old.nodes if old else 2),
        max_array_size=max_array_size or (old.max_array_size if old else DEFAULT_MAX_ARRAY_SIZE),
        slurm=rel.version,
        cred_expire=cred_expire or (old.cred_expire if old else CRED_EXPIRE_S),
        clusters=clusters or (old.clusters if old else 1),
    )
    started = time.monotonic()
    if old and old.slurm != spec.slurm:
        second.cancel_all()
        _cancel_jobs()  # the other release's jobs: its daemons stop below (their configs change)
    link_clients(rel)
    make_dirs(spec)
    make_fake_gpus()
    ensure_hosts(spec.all_nodes() + second.nodes(spec))
    changed = write_configs(spec)
    if second.write_configs(spec) or (old is not None and old.clusters != spec.clusters):
        changed.add("slurm")
    save_spec(spec)
    if "slurm" in changed or "slurmdbd" in changed:
        second.stop()
        stop_slurm()  # running daemons hold the old config
    if "slurmdbd" in changed:
        stop_daemon("slurmdbd")
    start_mariadb(spec)
    start_munge()
    start_slurmdbd(spec)
    register_accounting()
    start_slurm(spec)
    second.start(spec)
    wait_nodes_ready(spec)
    second.wait_ready(spec, USABLE_STATES, READY_TIMEOUT_S)
    names = ", ".join(n.name for n in spec.all_nodes())
    if spec.clusters > 1:
        names += f"; cluster {second.NAME}: " + ", ".join(n.name for n in second.nodes(spec))
    print(f"SLURM {rel.version} dev cluster up in {time.monotonic() - started:.1f}s: {names}")
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
    second.cancel_all()
    _cancel_jobs()
    for name in reversed(started_names()):
        stop_daemon(name, timeout=30 if name == "mariadb" else 15)
    # Job-step daemons (slurmstepd) and job processes we never spawned
    # directly; found by our environment marker, never by process name.
    if leftovers := cluster_leftovers():
        kill_all(leftovers)
    unlink_clients()
    print("SLURM dev cluster stopped")


def is_up() -> bool:
    """True when every daemon of the last `up` runs and all nodes are usable."""
    spec = load_spec()
    if spec is None or not slurm_conf_path().exists():
        return False
    expected = ["mariadb", "munged", "slurmdbd", "slurmctld"]
    expected += [f"slurmd-{n.name}" for n in spec.all_nodes() + second.nodes(spec)]
    expected += [second.CTLD] if spec.clusters > 1 else []
    if not all(running_pid(name) for name in expected):
        return False
    theirs = second.node_states() or {} if spec.clusters > 1 else {}
    return not unready(spec, node_states()) and all(theirs.get(n.name) in USABLE_STATES for n in second.nodes(spec))


def status() -> bool:
    print(f"state dir: {STATE_DIR}")
    for name in started_names():
        pid = running_pid(name)
        print(f"  {name:<14} {'running, pid ' + str(pid) if pid else 'NOT running'}")
    if not started_names():
        print("  (no daemons started)")
    spec = load_spec()
    sinfo = probe(["sinfo", *(["-M", "all"] if spec and spec.clusters > 1 else [])]) \
        if slurm_conf_path().exists() else None
    print(sinfo.stdout if sinfo else "sinfo: slurmctld not reachable")
    ok = is_up()
    print("cluster is UP" if ok else "cluster is NOT up")
    return ok


def print_env() -> None:
    print(f"export SLURM_CONF={shlex.quote(client_env()['SLURM_CONF'])}")
    if active_clients().is_dir():  # a release's own clients, ahead of this machine's
        print(f'export PATH={shlex.quote(str(active_clients()))}:"$PATH"')
