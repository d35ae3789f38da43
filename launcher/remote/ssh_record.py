"""The local record of a run submitted over SSH: `RUN/remote.json` on this machine (docs/remote.md),
and its one typed reader.

The record names where the run is (login, remote_dir, the remote run folder, the code's content
address, the Python there) and what it queued (job ids). It is written before the cluster side
queues anything and read back by `status`, `logs`, `watch`, `cancel`, `--resume` (relayed there:
launcher.remote.relay), `--after` and `list`, possibly after an edit or by a hostile hand: every field
is checked against its type where it is read (trainer.config.schema, as profiles are), so a record
that does not fit is one ConfigError naming the file and the field (`job_ids: "4711"` is not three jobs).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from launcher.cluster.jobids import distinct_bases
from launcher.config import destination
from launcher.config.resolve import runs_dir
from trainer.config import values
from trainer.config.schema import ConfigError, build, require
from trainer.config.sweep import MAX_SWEEP_TASKS

RECORD = "remote.json"
_REQUIRED = ("login", "remote_run_dir", "remote_dir")  # RemoteRun's fields without a default


@dataclass
class RemoteRun:
    """What this machine knows of a run submitted over SSH."""

    login: str
    remote_dir: str  # as the preflight found it there (absolute)
    remote_run_dir: str
    name: str = ""  # the run folder's name, here and there ("": the record's folder's)
    code: str = ""  # the content address of the tool's code there (REMOTE_DIR/code/<code>)
    python: str = "python3"  # the cluster side's interpreter
    profile: str = ""
    job: str = ""
    tasks: int = 1
    created: float = 0.0
    job_ids: list[str] = field(default_factory=list)
    project: str = ""  # the synced project's folder there ("": a built-in job)

    def __post_init__(self) -> None:
        # Each of these reaches an ssh command line (quoted) or the terminal.
        for key in ("name", "remote_dir", "remote_run_dir", "code", "python", "profile", "job", "project"):
            problem = values.text(getattr(self, key))
            require(problem is None, key, getattr(self, key), problem or "")
        problem = destination.problem(self.login)
        require(problem is None and self.login != "", "login", self.login, problem or "an ssh destination")
        require(1 <= self.tasks <= MAX_SWEEP_TASKS, "tasks", self.tasks, f"an integer in [1, {MAX_SWEEP_TASKS}]")
        require(len(self.job_ids) <= MAX_SWEEP_TASKS * 4, "job_ids", self.job_ids,
                f"a list of at most {MAX_SWEEP_TASKS * 4} job ids")
        for key in ("remote_dir", "remote_run_dir"):
            require(getattr(self, key).startswith("/"), key, getattr(self, key), "an absolute folder on the cluster side")
        for i, job_id in enumerate(self.job_ids):
            require(job_id.replace("_", "").isdigit(), f"job_ids[{i}]", job_id, "a SLURM job id such as '123' or '123_4'")


def write_remote_record(folder: Path, run: RemoteRun) -> None:
    partial = folder / f".{RECORD}.tmp"
    partial.write_text(json.dumps(asdict(run), indent=1) + "\n")
    partial.replace(folder / RECORD)


def read_remote_record(folder: Path) -> RemoteRun | None:
    """The record in `folder`; None where there is none (a run folder of this machine, or no run)."""
    path = folder / RECORD
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:  # (UnicodeDecodeError is a ValueError)
        raise ConfigError(f"{path}: not a record of a submission over SSH that can be read ({type(err).__name__})") \
            from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(data).__name__}")
    for key in _REQUIRED:  # (in the order a relayed command reads them)
        if key not in data:
            raise ConfigError(f"{path}: field '{key}' is missing (a record written by a submission over SSH has it)")
    known = {f.name for f in fields(RemoteRun)}  # (a newer version's extra keys are not read)
    # job_ids null: nothing queued yet, as an empty list says.
    given = {k: v for k, v in data.items() if k in known and not (k == "job_ids" and v is None)}
    return build(RemoteRun, given, str(path), noun="field")


def find(word: str, profile: str = "local", explicit_runs_dir: str | None = None) -> Path | None:
    """The folder of the record that RUN (a path, or a name under the runs folder) names; None where
    it names no record here (a run of this machine's, or none)."""
    try:  # (a name the file system refuses is no record: the command itself says why)
        if (Path(word) / RECORD).is_file():
            return Path(word)
        if "/" in word:
            return None
        folder = runs_dir(profile, explicit_runs_dir) / word
        return folder if (folder / RECORD).is_file() else None
    except (ConfigError, OSError, ValueError):
        return None


def after_ids(folder: Path, login: str) -> list[str] | None:
    """The job ids `--after RUN` depends on when RUN is a record here (None: it is not one); only a
    submission through the same login may depend on it."""
    run = read_remote_record(folder)
    if run is None:
        return None
    if run.login != login:
        raise ConfigError(f"--after {folder}: that run was submitted over SSH to {run.login!r}; a run can depend on "
                          f"it only through the same login (a profile with login: {run.login})")
    if not run.job_ids:
        raise ConfigError(f"--after {folder}: that run has no SLURM job id to depend on")
    return distinct_bases(run.job_ids)


def _rows(where: Path) -> list[dict[str, Any]]:
    """`list`'s rows for the runs recorded here (offline: what each record says)."""
    out = []
    for path in sorted(where.glob(f"*/{RECORD}"), reverse=True):
        try:
            run = read_remote_record(path.parent)
        except ConfigError as err:
            out.append({"run": path.parent.name, "run_dir": str(path.parent), "state": f"unreadable ({err})"})
            continue
        assert run is not None
        out.append({"run": run.name or path.parent.name, "run_dir": str(path.parent), "profile": run.profile, "job": run.job,
                    "tasks": run.tasks, "created": run.created,
                    "state": f"on {run.login} (job {','.join(run.job_ids) or '?'})",
                    "remote_run_dir": run.remote_run_dir, "target_metric": "", "best": None})
    return out


def with_rows(rows: list[dict[str, Any]], where: Path, most: int) -> list[dict[str, Any]]:
    """`list`'s rows with the runs recorded here merged in, newest first (as run_folders orders)."""
    if not (recorded := _rows(where)):
        return rows
    when = lambda r: r["created"] if isinstance(r.get("created"), (int, float)) else 0  # noqa: E731
    return sorted(rows + recorded, key=lambda r: (when(r), str(r["run"])), reverse=True)[:max(0, most)]
