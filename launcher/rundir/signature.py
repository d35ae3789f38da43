"""A run's signature: a short hash of what decides its result, and nothing else (docs/signatures.md).

Each task (a single run's one, or each sweep point) hashes four parts (the run records the two that its job
and profile cannot give back, so that `submit.py diff` can say which part differs between two runs):
- `job`: the resolved job, its `config:` and the point's overrides included, less the keys that only say
  where things are or how they are shown (NOT_RESULT_JOB_KEYS);
- `shape`: the profile keys that change what the ranks compute (RESULT_PROFILE_KEYS: how many ranks and how
  they are laid out, CPUs or GPUs, the interpreter or container, the environment and setup lines);
- `code`: the tool's own code (launcher/, trainer/: its version, edits included, by bytes), your project's
  files as the snapshot copies them, by what they say (Python by its tokens, comments left out; YAML and
  JSON by their values; other files by bytes), less the job files beside the run's own (YAML in the folder
  it was found in: the run counts by the values it resolved, so a comment there, or a sweep file added
  beside it, changes nothing), and a function handed over from Python by value (its pickled bytes);
- `python`: the interpreter the ranks run (the profile's `python:` or `container:`, else this one's
  version and its torch release).
A sweep's signature hashes its points' signatures in order. Partition, account, time limit, runs folder,
names, trackers, checkpoint cadence and logging are left out: they change when or where, not what.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import io
import json
import os
import platform
import sys
import tokenize
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

import yaml

from launcher.config.profile import Profile
from launcher.rundir import snapshot
from trainer.config.job import JobConfig
from trainer.config.lookup import CODE_ROOT

LENGTH = 16  # hex digits shown and recorded: 64 bits, no collision among a lifetime's runs
NOT_RESULT_JOB_KEYS = frozenset({
    "name", "code_dir", "project_root", "data_dir", "download", "verify_checksums", "log_every_steps",
    "checkpoint_every_steps", "keep_checkpoints", "async_checkpoints",
    "auto_checkpoint_min_s", "auto_checkpoint_max_s", "tensorboard", "tracker", "target_metric", "target_mode",
    "interrupt_at",  # a stop and an exact resume: the same result (docs/failures-and-requeue.md)
})
RESULT_PROFILE_KEYS = ("nodes", "tasks_per_node", "launch", "cpus_per_task", "gpus_per_node", "gpus_per_task",
                       "gpu_type", "python", "container", "env", "setup")


@dataclass(frozen=True)
class Signed:
    """A submission's signatures, and the two parts a record cannot rebuild from its job and profile (`diff`)."""

    run: str
    tasks: list[str]
    code: str
    python: str

    def parts(self) -> dict[str, str]:
        return {"code": self.code, "python": self.python}


def counts(section: str, key: str) -> bool:
    """Whether a job or profile key (its top-level name) is part of the signature: `diff` sorts by it."""
    return key not in NOT_RESULT_JOB_KEYS if section == "job" else key in RESULT_PROFILE_KEYS


def digest(value: Any) -> str:
    """The short hash of a JSON-able value (keys sorted: the order they were written in does not count)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:LENGTH]


_JOB_KEYS = [f.name for f in fields(JobConfig) if f.name not in NOT_RESULT_JOB_KEYS]


def job_part(job: JobConfig) -> dict[str, Any]:
    """The job's part: its keys that count, a nested dataclass (`tracker`) as its mapping (no asdict of the
    whole job: its deep copy cost 40 ms in a 1,000-point sweep, and JSON changes nothing it is given)."""
    return {k: asdict(v) if is_dataclass(v) else v for k in _JOB_KEYS for v in (getattr(job, k),)}


def signatures(jobs: list[JobConfig], profile: Profile, code: str, is_sweep: bool) -> Signed:
    """The run's signature and each task's (a single run: the same one): each the hash of its four parts'
    hashes, the three the run's tasks share hashed once."""
    python = interpreter(profile)
    shared = {"shape": digest({key: getattr(profile, key) for key in RESULT_PROFILE_KEYS}), "code": digest(code),
              "python": digest(python)}
    tasks = [digest({"job": digest(job_part(job)), **shared}) for job in jobs]
    return Signed(of_run(tasks, is_sweep), tasks, code, python)


def of_run(tasks: list[str], is_sweep: bool) -> str:
    """A run's signature from its tasks' (the Python handles rebuild a sweep's from `status --json`)."""
    return digest(tasks) if is_sweep else tasks[0]


def code_digest(project: snapshot.Survey | None, root: Path | None, job: JobConfig, function: bytes | None) -> str:
    """The tool's code, your project's snapshot (`project`, its files read under `root`: over SSH the survey
    names the cluster side's folder, and the files hashed are this machine's, the same ones) and a function
    by value, hashed by content."""
    h = hashlib.sha256(_tool_code().encode())
    if project is not None:
        root = root or project.root
        jobs = _job_folder(root, job.code_dir)
        code = [f for f in project.files if not (f.endswith((".yaml", ".yml")) and os.path.dirname(f) == jobs)]
        _hash_files(h, root, code, _meaning)
    elif job.project_root:  # no snapshot: the ranks read the live tree, whose state is not the run's
        h.update(f"live:{job.project_root}".encode())
    if function is not None:
        h.update(b"function\0" + function)
    return h.hexdigest()[:LENGTH]


@functools.lru_cache(maxsize=1)
def _tool_code() -> str:
    """The tool's own Python files (launcher/, trainer/) by content: its version, your edits to it included.
    Walked, not asked of git (10 ms a submission): what is imported is every .py file there."""
    h = hashlib.sha256()
    files = [os.path.relpath(os.path.join(folder, name), CODE_ROOT)
             for package in snapshot.PACKAGES for folder, subfolders, names in os.walk(CODE_ROOT / package)
             if "__pycache__" not in folder for name in names if name.endswith(".py")]
    _hash_files(h, CODE_ROOT, files, _content)
    return h.hexdigest()


def _job_folder(root: Path, code_dir: str) -> str | None:
    """The job file's folder relative to the project root, as the snapshot lists it (None: outside it)."""
    try:
        folder = Path(code_dir).resolve().relative_to(root.resolve()).as_posix() if code_dir else None
    except ValueError:
        return None
    return "" if folder == "." else folder


def _hash_files(h: Any, root: Path, files: list[str], read: Callable[[Path], bytes]) -> None:
    for name in sorted(files):
        h.update(name.encode() + b"\0")
        try:
            h.update(hashlib.sha256(read(root / name)).digest())
        except OSError:  # a link to nothing, a file gone since it was listed: its name still counts
            h.update(b"unreadable")


def _content(path: Path) -> bytes:
    return path.read_bytes()


def _meaning(path: Path) -> bytes:
    """What a project file says: Python's tokens less comments and blank lines, YAML's and JSON's values;
    its bytes where it is another kind or does not parse (then every byte counts)."""
    data = path.read_bytes()
    try:
        if path.suffix == ".py":
            skip = (tokenize.COMMENT, tokenize.NL)
            tokens = tokenize.tokenize(io.BytesIO(data).readline)
            return "\0".join(f"{t.type}:{t.string}" for t in tokens if t.type not in skip).encode()
        if path.suffix in (".yaml", ".yml", ".json"):
            return json.dumps(yaml.safe_load(data), sort_keys=True, default=str).encode()
    except (tokenize.TokenError, SyntaxError, yaml.YAMLError, ValueError, RecursionError):
        pass
    return data


def interpreter(profile: Profile) -> str:
    """The ranks' interpreter: the profile's container or python as written, else this one (the ranks run it)."""
    if profile.container:
        return f"container:{profile.container}"
    if profile.python:
        return f"python:{profile.python}"
    return f"{platform.python_implementation()} {platform.python_version()} torch {_torch_release()} {sys.platform}"


def _torch_release() -> str:
    """The installed torch's release, from its dist-info folder's name (torch-2.14.1.dist-info) beside the
    package: without importing torch (seconds) or importlib.metadata (20 ms, on every dry run)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return "none"
    found = sorted(Path(spec.origin).parent.parent.glob("torch-*.dist-info"))
    return found[-1].name[len("torch-"):-len(".dist-info")] if found else "unknown"
