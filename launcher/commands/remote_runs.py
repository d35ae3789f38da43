"""The runs submitted over SSH as this machine knows them (docs/remote.md): their local records
(RUN/remote.json: name, profile, login, job ids, remote path), `list`'s rows from them (offline), and
`status`, `logs`, `watch`, `cancel` and `--resume` of a recorded run relayed over the connection to
the cluster side's copy of the tool, with the remote run folder."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from launcher.cluster.ssh import Connection, connection_error
from launcher.commands.console import EXIT_BAD_INPUT, error_line
from launcher.rundir import shapes
from trainer.config.schema import ConfigError

RECORD = "remote.json"
RELAYED = ("status", "logs", "cancel", "watch")
# Options of the relayed commands that take a value (the RUN argument is the first other word).
_VALUED = {"--profile", "--runs-dir", "--task", "--rank", "--attempt", "-n", "--interval"}
_MAIN_BOOT = "import sys;from launcher.commands.main import main;sys.exit(main(sys.argv[1:]))"


def write_record(local: Path, record: dict[str, Any]) -> None:
    (local / RECORD).write_text(json.dumps(record, indent=1) + "\n")


def read_record(folder: Path) -> dict[str, Any] | None:
    """`folder`'s remote.json, every field it has checked against its one shape (launcher.rundir.shapes.REMOTE):
    None where there is none (or it is no JSON object: not a record); a ConfigError naming the file and
    the field where one has the wrong shape (job ids as one string, a number written as `true`)."""
    path = folder / RECORD
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # (UnicodeDecodeError is a ValueError)
        return None
    return shapes.check(path, value, shapes.REMOTE) if isinstance(value, dict) else None


# What relaying a command reads of remote.json: each reaches the ssh command line (quoted).
_RELAYED_FIELDS = ("login", "remote_run_dir", "remote_dir", "code", "python")


def checked_record(folder: Path, fields: tuple[str, ...] = _RELAYED_FIELDS) -> dict[str, Any]:
    """A remote.json whose fields a relayed command reads (launcher.rundir.shapes), else a ConfigError
    naming the file and the field: an edited or broken record is one `error:` line, not a KeyError."""
    record = read_record(folder) or {}
    for key in fields:
        if key not in record:
            raise ConfigError(f"{folder / RECORD}: field '{key}' is missing (a record written by a submission over "
                              f"SSH has it)")
    return record


def relayed(argv: list[str]) -> int | None:
    """status/logs/watch/cancel/--resume of a run recorded here: run on the cluster side. None: not one."""
    if argv and argv[0] in RELAYED:
        words, at = argv[1:], None
        skip = False
        for i, word in enumerate(words):
            if skip:
                skip = False
            elif word in _VALUED:
                skip = True
            elif not word.startswith("-"):
                at = i
                break
        head, run = [argv[0]], at
    elif "--resume" in argv and argv.index("--resume") + 1 < len(argv):
        words, head, run = argv, [], argv.index("--resume") + 1
    else:
        return None
    if run is None:
        return None
    folder = _record_folder(words[run], words)
    if folder is None:
        return None
    record = checked_record(folder)
    # --runs-dir: the cluster side has none of this machine's profiles to look runs up in.
    rest = _without_runs_dir(words[:run] + [record["remote_run_dir"]] + words[run + 1:])
    rest += ["--runs-dir", f"{record['remote_dir']}/runs"]
    conn = Connection(record["login"])
    command = (f"cd {shlex.quote(record['remote_dir'])} && PYTHONPATH=\"$PWD/code/{record['code']}\" exec "
               f"{shlex.quote(record['python'])} -c {shlex.quote(_MAIN_BOOT)} {shlex.join(head + rest)}")
    # `watch` on a terminal: one there too (ssh -t), so it redraws in place and reads `q`.
    tty = head == ["watch"] and sys.stdin.isatty() and sys.stdout.isatty()
    code = subprocess.run(conn.argv(command, tty=tty), check=False).returncode
    if code == 255:
        print(error_line(connection_error(record["login"], 255, "") or "ssh failed"), file=sys.stderr)
        return EXIT_BAD_INPUT
    return code


def _record_folder(word: str, words: list[str]) -> Path | None:
    if read_record(Path(word)) is not None:
        return Path(word)
    if "/" in word:
        return None
    try:
        from launcher.config.resolve import runs_dir

        profile = words[words.index("--profile") + 1] if "--profile" in words[:-1] else "local"
        explicit = words[words.index("--runs-dir") + 1] if "--runs-dir" in words[:-1] else None
        folder = runs_dir(profile, explicit) / word
    except (ConfigError, OSError):
        return None
    return folder if read_record(folder) is not None else None


def _without_runs_dir(words: list[str]) -> list[str]:
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in ("--profile", "--runs-dir"):
            skip = True
        else:
            out.append(word)
    return out


def with_records(rows: list[dict[str, Any]], where: Path, most: int) -> list[dict[str, Any]]:
    """`list`'s rows with the runs recorded here merged in, newest first (as run_folders orders)."""
    if not (recorded := record_rows(where)):
        return rows
    when = lambda r: r["created"] if isinstance(r.get("created"), (int, float)) else 0  # noqa: E731
    return sorted(rows + recorded, key=lambda r: (when(r), str(r["run"])), reverse=True)[:max(0, most)]


def record_rows(where: Path) -> list[dict[str, Any]]:
    """`list`'s rows for the runs recorded here (offline: what the record says)."""
    rows: list[dict[str, Any]] = []
    for folder in sorted(where.glob(f"*/{RECORD}"), reverse=True):
        try:
            record = read_record(folder.parent)
        except ConfigError as err:
            rows.append({"run": folder.parent.name, "run_dir": str(folder.parent), "state": f"unreadable ({err})"})
            continue
        if record is not None:
            ids = ",".join(str(i) for i in record.get("job_ids") or []) or "?"
            rows.append({"run": record.get("name", folder.parent.name), "run_dir": str(folder.parent),
                         "profile": record.get("profile", ""), "job": record.get("job", ""),
                         "tasks": record.get("tasks", ""), "created": record.get("created"),
                         "state": f"on {record.get('login')} (job {ids})", "remote_run_dir": record.get("remote_run_dir"),
                         "target_metric": "", "best": None})
    return rows

