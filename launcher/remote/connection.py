"""The one connection to a cluster reached over SSH (profile `login:`; docs/remote.md).

Everything goes through the system's OpenSSH client, so the user's ~/.ssh/config, agent, keys,
ProxyJump and a one-time password prompt work as in their shell, and host keys are checked as their
config says (this module never passes StrictHostKeyChecking or UserKnownHostsFile). Connection
sharing (ControlMaster/ControlPersist, sockets in a folder private to this user) makes every later
ssh and rsync of a submission, and of `status` a minute later, reuse one authenticated connection.
`DDP_SUBMIT_SSH` replaces the `ssh` command itself (e.g. "ssh -F ~/work/ssh_config"), as
GIT_SSH_COMMAND does for git.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from trainer.config.schema import ConfigError

# How long the shared connection outlives its last use: long enough for `submit` then `status`.
PERSIST_S = 600


def socket_dir() -> Path:
    """A folder only this user can enter: whoever can reach a control socket can use the connection."""
    base = Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir())
    folder = base / f"ddp-submit-ssh-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    info = folder.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise ConfigError(f"{folder}: the ssh control-socket folder must be private to this user (mode 700)")
    return folder


def ssh_argv(control: Path | None = None) -> list[str]:
    """ssh with connection sharing; the user's own options come from their config."""
    base = shlex.split(os.environ.get("DDP_SUBMIT_SSH") or "ssh")
    where = control if control is not None else socket_dir()
    return [*base, "-o", "ControlMaster=auto", "-o", f"ControlPath={where}/%C", "-o", f"ControlPersist={PERSIST_S}"]


def remote_path(path: str) -> str:
    """`path` for a remote shell line: quoted, with a leading ~/ left for that shell to expand."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


@dataclass
class Connection:
    """ssh and rsync to one login destination."""

    login: str
    control: Path | None = None

    def argv(self, command: str, tty: bool = False) -> list[str]:
        # "--": the destination and command can never be read as ssh options.
        return [*ssh_argv(self.control), *(["-t"] if tty else []), "--", self.login, command]

    def run(self, command: str, stdin: str | None = None, capture: bool = True,
            timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(command), input=stdin, text=True, capture_output=capture,
                              timeout=timeout, check=False)

    def files_rsync_argv(self, source: Path, dest: str, copy_dest: str = "") -> list[str]:
        """Copy the files named on standard input (NUL-separated, relative to `source`) into the remote
        folder `dest` (absolute), comparing contents (-c); `copy_dest`: a folder there whose identical
        files are copied there instead of sent (an earlier version of the same project); --stats says
        how many moved. -s (--protect-args): paths and options go to the remote rsync through its own
        protocol, never through the remote shell, so a folder with spaces (or quotes) arrives as it is
        on every rsync since 3.0 (the path is not quoted here: with -s a quote would be part of it)."""
        rsh = shlex.join(ssh_argv(self.control))
        return ["rsync", "-slc", "--stats", "--from0", "--files-from=-",
                *([f"--copy-dest={copy_dest}"] if copy_dest else []), "-e", rsh, f"{source}/",
                f"{self.login}:{dest}/"]

    def rsync_files(self, source: Path, names: list[str], dest: str, copy_dest: str = "") -> int:
        """`names` of `source` into `dest`; how many files were transferred."""
        listed = "\0".join(names).encode("utf-8", "surrogateescape")
        return self._transfer(self.files_rsync_argv(source, dest, copy_dest), dest, listed)

    def _transfer(self, argv: list[str], dest: str, stdin: bytes | None = None) -> int:
        done = subprocess.run(argv, input=stdin, capture_output=True, check=False)
        out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
        if done.returncode != 0:
            raise ConfigError(f"login {self.login}: rsync to {dest} failed: "
                              f"{_last_line(err) or f'exit {done.returncode}'}")
        found = re.search(r"Number of regular files transferred: ([\d,]+)", out)
        return int(found.group(1).replace(",", "")) if found else -1


def connection_error(login: str, returncode: int, stderr: str) -> str | None:
    """ssh's own failure (exit 255) as one sentence naming the cause; None if ssh itself worked."""
    if returncode != 255:
        return None
    said = _last_line(stderr)
    causes = (
        (r"REMOTE HOST IDENTIFICATION HAS CHANGED|Host key verification failed|No .* host key is known|"
         r"host key .* not verified",
         "the host key is unknown or does not match your known_hosts (connect once with `ssh {login}` to check "
         "and accept it)"),
        (r"Permission denied|Too many authentication failures|no more authentication methods",
         "authentication failed (check the key or agent your ssh config uses for it)"),
        (r"Could not resolve hostname|Name or service not known|nodename nor servname",
         "the host name is unknown (is `{login}` in your ~/.ssh/config?)"),
        (r"Connection refused|timed out|No route to host|Network is unreachable|Connection closed|reset by peer",
         "the host is unreachable"),
    )
    for pattern, sentence in causes:
        if re.search(pattern, stderr, re.IGNORECASE):
            return f"login {login}: {sentence.format(login=login)}: ssh said: {said}"
    return f"login {login}: ssh failed: {said or 'exit 255'}"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("Warning:")]
    return lines[-1] if lines else ""
