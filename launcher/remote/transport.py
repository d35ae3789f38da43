"""The steps of a submission over SSH, each one command line over the one shared connection
(launcher.remote.connection; docs/remote.md), built by the same functions whether they run or a dry
run shows them:

1. the preflight, one round trip before anything is queued: ssh works, rsync and the Python there
   exist, remote_dir can be written, and which content-addressed folders of the code and the project
   are there already (`check_cluster_side`);
2. the missing ones rsynced from where they are (launcher.remote.sync);
3. the submission, planned here, sent as JSON on standard input to the same tool run there from its
   synced code, which checks what only it can see and queues exactly that (`submission_command`,
   `ship`; launcher.commands.receive there).

So every SLURM command of a run (sbatch through submitit, squeue, sacct, scontrol, scancel) runs on
the cluster side through launcher.cluster.slurm.env, as on a login node; none runs here. Nothing here
prints: each step returns what it found, or raises a ConfigError naming the cause.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable

from launcher.config.profile import Profile
from launcher.remote import folders
from launcher.remote.cluster_side import interpreter
from launcher.remote.connection import Connection, connection_error, remote_path
from trainer.config.schema import ConfigError

MISSING = "missing: "
# Run on the cluster side from the synced code: its modules are imported first; where they are missing,
# one marker line (`problem_there`), exit 3. Then the command line's own `receive` (launcher.commands.receive).
# (One line, and no single quote in it: a dry run shows it as it runs, quoted once.)
BOOT = ('import sys,importlib.util as u;m=[n for n in ("submitit","yaml") if u.find_spec(n) is None];'
        f'm and (print("{MISSING}modules"),sys.exit(3));'
        'from launcher.commands.main import main;sys.exit(main(["receive",*sys.argv[1:]]))')
# An operating command run there (launcher.remote.relay).
MAIN_BOOT = "import sys;from launcher.commands.main import main;sys.exit(main(sys.argv[1:]))"


def preflight_script(profile: Profile, wanted: tuple[str, ...]) -> str:
    """The preflight's shell line there: markers for what is missing, then which of `wanted` (relative
    to remote_dir) exist, then remote_dir's absolute path (its last line)."""
    py = shlex.quote(interpreter(profile))
    probe = "".join(f"test -d {shlex.quote(f)} && echo found:{shlex.quote(f)}; " for f in wanted)
    made = " ".join(f'"$D/{name}"' for name in folders.MADE_FIRST)
    return (f"D={remote_path(profile.remote_dir)}; command -v rsync >/dev/null 2>&1 || {{ echo \"{MISSING}rsync\"; "
            f"exit 3; }}; command -v {py} >/dev/null 2>&1 || {{ echo \"{MISSING}python\"; exit 3; }}; "
            f"mkdir -p {made} 2>/dev/null && test -w \"$D\" || {{ echo unwritable; exit 4; }}; "
            f"cd \"$D\" && {{ {probe}pwd -P; }}")


def check_cluster_side(conn: Connection, profile: Profile, wanted: tuple[str, ...] = ()) -> tuple[str, set[str]]:
    """The preflight: remote_dir as an absolute path there, and which of `wanted` exist there. (Whether
    that Python imports submitit and yaml is asked by the submission itself, BOOT: starting one more
    Python there to import them cost 0.3-0.5 s, a third of the budget over a login node.)"""
    done = conn.run(preflight_script(profile, wanted), timeout=120)
    if (said := connection_error(conn.login, done.returncode, done.stderr)) is not None:
        raise ConfigError(f"profile.login: {said}")
    out = done.stdout.strip().splitlines()
    last = out[-1] if out else ""
    found = {line[len("found:"):] for line in out if line.startswith("found:")}
    if (problem := problem_there(conn.login, profile, last)) is not None:
        raise ConfigError(problem)
    if done.returncode != 0 or not last.startswith("/"):
        raise ConfigError(f"login {conn.login}: the preflight failed (exit {done.returncode}): "
                          f"{(done.stderr or done.stdout).strip()[-300:]}")
    return last, found


def problem_there(login: str, profile: Profile, said: str) -> str | None:
    """The error line for what the cluster side reported missing (`said`: its marker line), else None."""
    problems = {
        f"{MISSING}rsync": "rsync is not installed on the cluster side (install it there, e.g. apt-get install rsync)",
        f"{MISSING}python": f"there is no {interpreter(profile)} on the cluster side's PATH (set profile.python to "
                            f"its interpreter there)",
        f"{MISSING}modules": f"{interpreter(profile)} on the cluster side cannot import submitit and yaml "
                             f"(pip install submitit pyyaml there, or set profile.python)",
        "unwritable": f"profile.remote_dir {profile.remote_dir!r} cannot be created or written on the cluster side",
    }
    return f"login {login}: {problems[said]}" if said in problems else None


def submission_command(root: str, name: str, python: str, code_dir: str) -> str:
    """The shell line there that keeps the submission (standard input) as submissions/NAME.json and
    starts the tool from the synced code on it. Private (umask 077), as the run folder is: it may carry
    a function pickled by value, and unpickling runs code."""
    kept = folders.submission_file(name)
    return (f"umask 077 && cd {remote_path(root)} && mkdir -p {folders.SUBMISSIONS} && cat > {shlex.quote(kept)} && "
            f"PYTHONPATH={remote_path(code_dir)} exec {shlex.quote(python)} -c {shlex.quote(BOOT)} "
            f"{shlex.quote(kept)}")


def ship(conn: Connection, command: str, text: str, on_line: Callable[[str], None]) -> tuple[int, str]:
    """Run `command` there with `text` on its standard input; each line of its output handed to
    `on_line` as it comes, but the last (the JSON summary, or a marker) held back and returned with
    the exit status (255: ssh itself failed)."""
    process = subprocess.Popen(conn.argv(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(text)
    process.stdin.close()
    held = ""
    for line in process.stdout:
        if held:
            on_line(held.rstrip("\n"))
        held = line
    return process.wait(), held.strip()


def lost(login: str, returncode: int) -> str | None:
    """What a cut connection (ssh's 255) means for a submission whose record is already written."""
    if returncode != 255:
        return None
    return f"{connection_error(login, 255, '') or 'the connection was lost'}; the run may be queued"
