"""Running the daemons: our pid files, start/stop, leftovers, commands and waiting.

No systemd and no usable cgroups in the container: daemons run in the
foreground (-D/-F) as children of a new session, and their pids are tracked
in our own pid files (``run/<name>.pid``: the pid and the executable, so a
recycled pid is never signalled). `down` also finds job-step daemons
(slurmstepd) it never spawned, by the ``DAEMON_MARK_VAR`` environment marker.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from launcher.devcluster.paths import (
    DAEMON_MARK_VAR,
    STATE_DIR,
    ClusterError,
    client_env,
    daemon_logs,
    out_file,
    pid_file,
)

# Start order; `down` stops in reverse (nodes, controller, accounting, auth, db).
START_ORDER = ["mariadb", "munged", "slurmdbd", "slurmctld", "slurmd-"]


@dataclass(frozen=True)
class Daemon:
    """A daemon of the dev cluster, by the name of its pid and log files and its command line."""

    name: str  # stem of its pid and log files, e.g. "slurmd-cpu1"
    argv: list[str]

    @property
    def exe(self) -> str:
        return os.path.realpath(shutil.which(self.argv[0]) or self.argv[0])


def _daemon_env() -> dict[str, str]:
    # A small fixed environment: reproducible, and SLURM_CONF also tells
    # slurmdbd where slurmdbd.conf is (next to slurm.conf).
    return {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
        "HOME": os.environ.get("HOME", "/root"),
        **client_env(),
        DAEMON_MARK_VAR: str(STATE_DIR),
    }


def _read_pid(name: str) -> tuple[int, str] | None:
    try:
        pid, exe = pid_file(name).read_text().split("\n")[:2]
        return int(pid), exe
    except (OSError, ValueError):
        return None


def _pid_alive(pid: int, exe: str) -> bool:
    """True if `pid` is a live (non-zombie) process running `exe`.

    Checking the executable guards against a recycled pid, so we never
    signal a stranger that inherited the number.
    """
    try:
        if os.readlink(f"/proc/{pid}/exe") != exe:
            return False
    except OSError:
        return False
    return _is_live(pid)


def _is_live(pid: int) -> bool:
    """True if `pid` exists and is not a zombie (dead, waiting to be reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def running_pid(name: str) -> int | None:
    rec = _read_pid(name)
    return rec[0] if rec and _pid_alive(*rec) else None


def start_daemon(daemon: Daemon) -> int:
    """Start `daemon` in the foreground of its own session, unless it already runs."""
    pid = running_pid(daemon.name)
    if pid:
        return pid
    with out_file(daemon.name).open("ab") as out:
        out.write(f"--- {time.ctime()} starting: {shlex.join(daemon.argv)}\n".encode())
        out.flush()
        # New session: immune to the caller's Ctrl-C/hangup, outlives `up`.
        proc = subprocess.Popen(
            daemon.argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env=_daemon_env(), cwd=STATE_DIR, start_new_session=True,
        )
    pid_file(daemon.name).write_text(f"{proc.pid}\n{daemon.exe}\n")
    return proc.pid


def stop_daemon(name: str, timeout: float = 20.0) -> None:
    """SIGTERM the daemon from its pid file, wait, then SIGKILL; remove the pid file."""
    rec = _read_pid(name)
    if rec and _pid_alive(*rec):
        _terminate(rec[0], lambda: _pid_alive(*rec), timeout)
    pid_file(name).unlink(missing_ok=True)


def _signal(pid: int, sig: int) -> bool:
    """Send `sig` to `pid`; False when the process is already gone."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def _terminate(pid: int, alive: Callable[[], bool], timeout: float) -> None:
    if not _signal(pid, signal.SIGTERM):
        return
    deadline = time.monotonic() + timeout
    while alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    if alive():
        _signal(pid, signal.SIGKILL)


def _start_rank(name: str) -> int:
    for rank, prefix in enumerate(START_ORDER):
        if name == prefix or (prefix.endswith("-") and name.startswith(prefix)):
            return rank
    return len(START_ORDER)


def started_names() -> list[str]:
    """Names with a pid file (i.e. that we started), in start order."""
    names = [p.stem for p in (STATE_DIR / "run").glob("*.pid")]
    return sorted(names, key=lambda name: (_start_rank(name), name))


def _parents() -> dict[int, int]:
    """{pid: parent pid} for every process."""
    parents = {}
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        except (ValueError, OSError, IndexError):
            continue
    return parents


def _marked(pid: int, marker: bytes) -> bool:
    try:
        return marker in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def cluster_leftovers() -> set[int]:
    """Processes carrying our marker (e.g. slurmstepd), plus their descendants.

    The descendants are the jobs' own processes: they do not inherit the
    marker, and survive their slurmstepd, so `down` must end them too when
    scancel was impossible (slurmctld already dead).
    """
    marker = f"{DAEMON_MARK_VAR}={STATE_DIR}".encode()
    parents = _parents()
    found = {pid for pid in parents if pid != os.getpid() and _marked(pid, marker)}
    grew = True
    while grew:  # add children of found processes until nothing new appears
        children = {pid for pid, ppid in parents.items() if ppid in found} - found
        found |= children
        grew = bool(children)
    return found - {os.getpid()}


def kill_all(pids: set[int], timeout: float = 5.0) -> None:
    """SIGTERM all of `pids` at once, then SIGKILL whatever is still alive."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in [p for p in pids if _is_live(p)]:
            _signal(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(_is_live(p) for p in pids):
            time.sleep(0.2)
        if not any(_is_live(p) for p in pids):
            return


def run(
    argv: list[str], timeout: float = 30.0, check: bool = True, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a command with the cluster's client environment; ClusterError if it fails."""
    env = {**os.environ, **client_env()}
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, env=env, input=input
    )
    if check and proc.returncode != 0:
        raise ClusterError(
            f"{shlex.join(argv)} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}"
        )
    return proc


def probe(argv: list[str], timeout: float = 10.0) -> subprocess.CompletedProcess[str] | None:
    """Run a probe; None on failure or timeout instead of raising."""
    try:
        proc = run(argv, timeout=timeout, check=False)
    except (subprocess.TimeoutExpired, OSError):  # OSError: binary not installed
        return None
    return proc if proc.returncode == 0 else None


def wait_for(what: str, ready: Callable[[], bool], daemon: str, timeout: float) -> None:
    """Poll `ready` until it holds; fail fast if `daemon` died meanwhile."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if not running_pid(daemon):
            raise ClusterError(f"{daemon} exited while waiting for {what}", daemon_logs(daemon))
        time.sleep(0.5)
    raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}", daemon_logs(daemon))


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False
