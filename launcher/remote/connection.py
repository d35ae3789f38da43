"""The one connection to a cluster reached over SSH (profile `login:`; docs/remote.md).

Everything goes through the system's OpenSSH client, so the user's ~/.ssh/config, agent, keys,
ProxyJump and a one-time password prompt work as in their shell, and host keys are checked as their
config says (this module never passes StrictHostKeyChecking or UserKnownHostsFile). Connection
sharing (ControlMaster/ControlPersist, sockets in a folder private to this user) makes every later
ssh and rsync of a submission, and of `status` a minute later, reuse one authenticated connection.
`DDP_SUBMIT_SSH` replaces the `ssh` command itself (e.g. "ssh -F ~/work/ssh_config"), as
GIT_SSH_COMMAND does for git: read once, where it enters (`ssh_command`), so that quoting that does not
parse or a program that is not there is one `error:` line, not a traceback.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from launcher.config import destination
from launcher.reports.root_cause import last_line
from trainer.config import values
from trainer.config.schema import ConfigError

# How long the shared connection outlives its last use: long enough for `submit` then `status`.
PERSIST_S = 600
SSH_VARIABLE = "DDP_SUBMIT_SSH"


def socket_dir() -> Path:
    """A folder only this user can enter: whoever can reach a control socket can use the connection."""
    base = Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir())
    folder = base / f"ddp-submit-ssh-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    info = folder.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise ConfigError(f"{folder}: the ssh control-socket folder must be private to this user (mode 700)")
    return folder


def ssh_command(must_exist: bool = True) -> list[str]:
    """The ssh command as DDP_SUBMIT_SSH gives it (default `ssh`), split as a shell would; a value that
    does not parse, or whose program is not there (`must_exist`), is a ConfigError naming the variable."""
    given = os.environ.get(SSH_VARIABLE) or "ssh"
    shown = values.shown_name(given)
    try:
        words = shlex.split(given)
    except ValueError as err:
        raise ConfigError(f"{SSH_VARIABLE}={shown}: {err} (expected an ssh command line, quoted as in a shell, "
                          f"e.g. \"ssh -F ~/work/ssh_config\")") from None
    if not words or (problem := values.argument(words[0])) is not None:
        raise ConfigError(f"{SSH_VARIABLE}={shown}: expected an ssh command line whose first word is the program "
                          f"({problem or 'it is empty'})")
    if must_exist and shutil.which(words[0]) is None:
        raise ConfigError(f"{SSH_VARIABLE}={shown}: the program {words[0]!r} is not there (not an executable file, "
                          f"nor a command on PATH); set it to your ssh, e.g. \"ssh -F ~/work/ssh_config\"")
    return words


def ssh_argv(control: Path | None = None, must_exist: bool = True) -> list[str]:
    """ssh with connection sharing; the user's own options come from their config."""
    where = control if control is not None else socket_dir()
    return [*ssh_command(must_exist), "-o", "ControlMaster=auto", "-o", f"ControlPath={where}/%C",
            "-o", f"ControlPersist={PERSIST_S}"]


def remote_path(path: str) -> str:
    """`path` for a remote shell line: quoted, with a leading ~/ left for that shell to expand."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


@dataclass
class Connection:
    """ssh and rsync to one `login:` destination (launcher.config.destination: checked at profile load).
    `control`: the socket folder (a dry run names one without making it, and runs nothing)."""

    login: str
    control: Path | None = None
    to: destination.Destination = field(init=False)

    def __post_init__(self) -> None:
        self.to = destination.parse(self.login)

    def _ssh(self) -> list[str]:
        return [*ssh_argv(self.control, must_exist=self.control is None), *self.to.ssh_options()]

    def argv(self, command: str, tty: bool = False) -> list[str]:
        # "--": the destination and command can never be read as ssh options.
        return [*self._ssh(), *(["-t"] if tty else []), "--", self.to.ssh_host, command]

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
        rsh = shlex.join(self._ssh())
        return ["rsync", "-slc", "--stats", "--from0", "--files-from=-",
                *([f"--copy-dest={copy_dest}"] if copy_dest else []), "-e", rsh, f"{source}/",
                f"{self.to.rsync_host}:{dest}/"]

    def rsync_files(self, source: Path, names: list[str], dest: str, copy_dest: str = "") -> int:
        """`names` of `source` into `dest`; how many files were transferred."""
        listed = "\0".join(names).encode("utf-8", "surrogateescape")
        done = subprocess.run(self.files_rsync_argv(source, dest, copy_dest), input=listed, capture_output=True,
                              check=False)
        out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
        if done.returncode != 0:
            raise ConfigError(f"login {self.login}: rsync to {dest} failed: "
                              f"{_said(err) or f'exit {done.returncode}'}")
        found = re.search(r"Number of regular files transferred: ([\d,]+)", out)
        return int(found.group(1).replace(",", "")) if found else -1


def connection_error(login: str, returncode: int, stderr: str) -> str | None:
    """ssh's own failure (exit 255) as one sentence naming the cause; None if ssh itself worked."""
    if returncode != 255:
        return None
    said = _said(stderr)
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


def _said(text: str) -> str:
    """ssh's (or rsync's) last line that is not one of its warnings."""
    return last_line("\n".join(line for line in text.splitlines() if not line.strip().startswith("Warning:")))
