"""A real OpenSSH server on 127.0.0.1 standing in for the dev cluster's login node, for the tests and benchmarks
(docs/remote.md).

The cluster side is an unprivileged account (`ddpremote`) whose login environment alone reaches
the dev cluster: its `~/.ssh/environment` sets SLURM_CONF (the server allows it with
PermitUserEnvironment) and puts this machine's Python first on PATH. The submitting side gets an
ssh config file of its own (Host, HostName, Port, User, IdentityFile, UserKnownHostsFile), passed
as `DDP_SUBMIT_SSH="ssh -F FILE"` the way a user's ~/.ssh/config would be read; it never reads the
remote home directly.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"
USER = "ddpremote"
ALIAS = "mylab"
NORSYNC = "127.0.0.2"


@dataclass
class Server:
    """One running sshd and the client files that reach it."""

    root: Path
    port: int
    ssh_config: Path
    known_hosts: Path
    process: subprocess.Popen | None = None

    @property
    def ssh_command(self) -> str:
        return f"ssh -F {self.ssh_config}"

    def client_env(self) -> dict[str, str]:
        """The submitting side: no SLURM_CONF, no agent, the ssh config named by DDP_SUBMIT_SSH."""
        env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF" and k != "SSH_AUTH_SOCK"}
        env["DDP_SUBMIT_SSH"] = self.ssh_command
        return env

    def run_remote(self, command: str, check: bool = True) -> subprocess.CompletedProcess:
        """A shell command run as the cluster-side user, through ssh (as the tests may look)."""
        return subprocess.run(["ssh", "-F", str(self.ssh_config), ALIAS, command], capture_output=True,
                              text=True, check=check, timeout=60)

    def start(self) -> None:
        self.process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.root / "sshd_config")],
                                        stdout=subprocess.DEVNULL, stderr=open(self.root / "sshd.log", "ab"))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if self.process.poll() is not None:
                raise RuntimeError(f"sshd exited: {(self.root / 'sshd.log').read_text()[-2000:]}")
            time.sleep(0.05)
        raise RuntimeError("sshd did not listen within 10 s")

    def cut(self) -> None:
        """Stop the server and every connection it holds (as a network cut or a reboot would)."""
        if self.process is None:
            return
        # Every sshd process under the server (per connection: a privileged one and the user's
        # own), not the commands they run: on the cluster side those live on, as after a real cut.
        todo, found = [self.process.pid], []
        while todo:
            for child in _children(todo.pop()):
                todo.append(child)
                found.append(child)
        for pid in found:
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "sshd":
                    os.kill(pid, signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass
        self.stop()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)
        self.process = None


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (sshd's per-connection processes)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_user(slurm_conf: Path) -> Path:
    """The cluster-side account and its login environment; its home."""
    try:
        home = Path(pwd.getpwnam(USER).pw_dir)
    except KeyError:
        # -p '*': no password, yet not "locked" (sshd without PAM refuses locked accounts even with a key).
        subprocess.run(["useradd", "-m", "-s", "/bin/bash", "-p", "*", USER], check=True)
        home = Path(pwd.getpwnam(USER).pw_dir)
    # The tests' own Python (and torch, submitit) must be reachable by the account: where it lives under a
    # private home (pyenv in /root, a venv in a root's clone), grant that account alone the right to pass
    # through, on the way to the venv and to the interpreter it links to.
    here = Path(sys.executable).absolute()
    for parent in dict.fromkeys([*here.parents, *here.resolve().parents]):
        if parent.stat().st_mode & 0o001 == 0 and shutil.which("setfacl"):
            subprocess.run(["setfacl", "-m", f"u:{USER}:x", str(parent)], check=True)
    # Its own folder, unresolved: a venv's bin holds a link to the base interpreter, and that link (not the
    # interpreter it names) is what makes `python3` there the venv's, with the venv's packages.
    bin_dir = here.parent
    ssh_dir = home / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    (ssh_dir / "environment").write_text(
        f"SLURM_CONF={slurm_conf}\nPATH={bin_dir}:/usr/local/bin:/usr/bin:/bin:/usr/sbin\n")
    shutil.chown(ssh_dir, USER, USER)
    shutil.chown(ssh_dir / "environment", USER, USER)
    return home


def make_server(root: Path, slurm_conf: Path) -> Server:
    """Host keys, a client key authorised for the account, the server and client configs."""
    root.mkdir(parents=True, exist_ok=True)
    home = ensure_user(slurm_conf)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation folder
    keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", ""]
    for name in ("host_key", "client_key"):
        if not (root / name).exists():
            subprocess.run([*keygen, "-f", str(root / name)], check=True)
    authorized = home / ".ssh" / "authorized_keys"
    # Added, not replaced, under a lock: another test worker, session or benchmark may be adding its own
    # key to the account at the same moment (read-then-write lost one of two keys).
    key_line = (root / "client_key.pub").read_text()
    with authorized.open("a+") as keys:
        fcntl.flock(keys, fcntl.LOCK_EX)
        keys.seek(0)
        known_keys = keys.read()
        if key_line not in known_keys:
            keys.write(("" if known_keys.endswith("\n") or not known_keys else "\n") + key_line)
    shutil.chown(authorized, USER, USER)
    authorized.chmod(0o600)
    port = _free_port()
    (root / "sshd_config").write_text(
        f"ListenAddress 127.0.0.1\nPort {port}\nHostKey {root / 'host_key'}\nPidFile {root / 'sshd.pid'}\n"
        f"AllowUsers {USER}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
        "PermitUserEnvironment yes\nUsePAM no\nStrictModes no\nMaxSessions 50\nMaxStartups 50\n"
        "Subsystem sftp /usr/lib/openssh/sftp-server\n"
        # A second address of the same server is a cluster side without rsync: every command there
        # runs with a PATH that finds nothing (alias ALIAS-norsync).
        f"ListenAddress {NORSYNC}\nMatch LocalAddress {NORSYNC}\n"
        '  ForceCommand /usr/bin/env PATH=/nonexistent /bin/sh -c "$SSH_ORIGINAL_COMMAND"\n')
    known = root / "known_hosts"
    kind, key = (root / "host_key.pub").read_text().split(" ")[:2]
    known.write_text("".join(f"[{address}]:{port} {kind} {key}\n" for address in ("127.0.0.1", NORSYNC)))
    config = root / "ssh_config"
    config.write_text(
        f"Host {ALIAS}\n  HostName 127.0.0.1\n  Port {port}\n  User {USER}\n  IdentityFile {root / 'client_key'}\n"
        f"  IdentitiesOnly yes\n  UserKnownHostsFile {known}\n  StrictHostKeyChecking yes\n  BatchMode yes\n"
        f"Host {ALIAS}-norsync\n  HostName {NORSYNC}\n  Port {port}\n  User {USER}\n  IdentityFile {root / 'client_key'}\n"
        f"  IdentitiesOnly yes\n"
        # (Any other name of this server, e.g. an ssh://user@127.0.0.1:PORT login, with the same key.)
        f"Host *\n  UserKnownHostsFile {known}\n  StrictHostKeyChecking yes\n  BatchMode yes\n"
        f"  IdentityFile {root / 'client_key'}\n  IdentitiesOnly yes\n")
    return Server(root, port, config, known)
