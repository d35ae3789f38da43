"""An operating command (`status`, `logs`, `watch`, `cancel`, `--resume`) of a run recorded here
(launcher.remote.ssh_record) run on the cluster side's copy of the tool, with the remote run folder in
place of RUN (docs/remote.md). Which commands and which of their words are relayed is the command
line's to say (launcher.commands.main reads it from its parsers); this module only runs the line
there, its output going straight to this terminal (`watch` on a terminal gets one there: ssh -t).
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from launcher.remote import folders
from launcher.remote.connection import Connection, connection_error
from launcher.remote.ssh_record import RECORD, RemoteRun
from launcher.remote.transport import MAIN_BOOT
from trainer.config.schema import ConfigError


def command_line(run: RemoteRun, argv: list[str]) -> str:
    """The shell line there: the tool from the run's synced code, on `argv`."""
    code = folders.content(folders.CODE, run.code)
    return (f"cd {shlex.quote(run.remote_dir)} && PYTHONPATH=\"$PWD/\"{shlex.quote(code)} exec "
            f"{shlex.quote(run.python)} -c {shlex.quote(MAIN_BOOT)} {shlex.join(argv)}")


def relay(folder: Path, run: RemoteRun, argv: list[str], tty: bool = False) -> int:
    """Run `argv` there for the run recorded in `folder`; its exit status (ssh's own failure: a ConfigError)."""
    if not run.code:
        raise ConfigError(f"{folder / RECORD}: field 'code' is missing (a record written by a submission over SSH "
                          f"has it)")
    argv = [*argv, "--runs-dir", folders.runs_dir(run.remote_dir)]  # it has none of this machine's profiles
    code = subprocess.run(Connection(run.login).argv(command_line(run, argv), tty=tty), check=False).returncode
    if code == 255:
        raise ConfigError(connection_error(run.login, 255, "") or f"login {run.login}: ssh failed")
    return code
