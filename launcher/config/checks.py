"""Checks before anything is queued: a violation is a ConfigError (exit 2, nothing submitted)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from launcher.config.profile import Profile
from trainer.config import project
from trainer.config.job import JobConfig, data_folder
from trainer.config.schema import ConfigError
from trainer.config.tracker_key import merged, missing_libraries

CIFAR_FOLDER = "cifar-10-batches-py"


def check_here(profile: Profile, job: JobConfig, source: str, job_source: str = "") -> None:
    """What this machine knows of a submission it plans: GPUs and the interpreter for the executors
    that run here, the project root (from the directory submitted from) and the script's path, made
    absolute. `source` names the profile, `job_source` the job file as the user gave it."""
    if profile.executor in ("local", "debug") and profile.gpus_per_node and not cuda_visible_here():
        raise ConfigError(f"{source}: key 'gpus_per_node' has invalid value {profile.gpus_per_node}; this machine "
                          f"has no NVIDIA GPU (no driver found), so the {profile.executor} executor allows only 0")
    if profile.executor == "local" and profile.python:
        check_python(profile.python, source)
    if (job.entrypoint or job.script or job.function) and not job.project_root:  # by --set or the API, not a job file
        job.project_root = str(project.root_for(None, Path.cwd()))
    if job.script:
        # Made absolute here, once: the tasks may start in another directory (a SLURM node's).
        job_source = job_source or f"job '{job.name}'"
        job.script = script_path(job, job_source)
        check_compiles(job, job_source)


def check_where_it_runs(profile: Profile, job: JobConfig, source: str, job_source: str = "") -> None:
    """What only the machine that queues the run can see (this one, or over SSH the cluster side:
    launcher.commands.receive): the data folder, the trackers' libraries and the entrypoint's import
    (the Python that imports it there; here the import of a user's module would cost the laptop a
    second or more for nothing)."""
    job_source = job_source or f"job '{job.name}'"
    check_data(profile, job)
    check_trackers(profile, job, source, job_source)
    if job.entrypoint:
        check_entrypoint(job, job_source)


def check_python(python: str, source: str) -> None:
    """A local profile's `python` runs on this machine: it must be there, and runnable, before the run
    folder is made (a slurm profile's is the node's, found after its setup lines)."""
    found = shutil.which(python)
    if found is None:
        why = "is not executable" if os.path.isfile(python) else "does not exist" if "/" in python else \
            "is not a command on this machine's PATH"
        raise ConfigError(f"{source}: key 'python' has invalid value {python!r}; it {why} (a Python interpreter "
                          f"on this machine: a path, a command on PATH, or empty for this submitter's own)")


def script_path(job: JobConfig, source: str = "") -> str:
    """The script as an absolute path, by the one rule (trainer.config.project.script_places); a
    ConfigError naming where it looked when it is in none of those places."""
    found = project.find_script(job.script, Path.cwd(), job.code_dir, job.project_root)
    if found is not None:
        return str(found)
    tried = project.script_places(job.script, Path.cwd(), job.code_dir, job.project_root)
    raise ConfigError(f"{source or f'job {job.name!r}'}: key 'script' has invalid value {job.script!r}; no such "
                      f"file (a path to a Python file; looked in " + ", ".join(str(p.parent) for p in tried) + ")")


def check_compiles(job: JobConfig, source: str) -> None:
    """The script is Python: compiled here (nothing runs), so a syntax error, or a file that is not
    Python at all, is refused before the queue wait with Python's own message, file and line."""
    try:
        compile(Path(job.script).read_bytes(), job.script, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as err:  # (ValueError: null bytes, on some Pythons)
        where = f"{job.script}, line {err.lineno}" if getattr(err, "lineno", None) else job.script
        said = getattr(err, "msg", None) or str(err)
        raise ConfigError(f"{source}: key 'script' has invalid value {job.script!r}; it is not Python that compiles: "
                          f"{type(err).__name__}: {said} ({where})") from None
    except OSError as err:
        raise ConfigError(f"{source}: key 'script' has invalid value {job.script!r}; it cannot be read "
                          f"({err.strerror})") from None


def check_trackers(profile: Profile, job: JobConfig, source: str, job_source: str) -> None:
    """Each tracker the run feeds has its library here (rank 0 imports it; the nodes run this Python)."""
    for name, extra in missing_libraries(merged(job.tracker, profile.tracker, job.tensorboard)):
        where = job_source if (job.tracker and getattr(job.tracker, name)) or name == "tensorboard" else source
        raise ConfigError(f"{where}: key 'tracker.{name}' names a tracker whose library is not installed "
                          f"(python -m pip install 'ddp-submit[{extra}]', or remove the key)")


def check_in_snapshot(job: JobConfig, files: list[str], source: str) -> None:
    """The job's script and the entrypoint's module (imported by the check) are in the project's
    snapshot: a file .gitignore or snapshot_exclude leaves out would be missing on every rank."""
    root, listed = Path(job.project_root), set(files)
    module = sys.modules.get(job.entrypoint.partition(":")[0]) if job.entrypoint else None
    for key, path in (("script", job.script), ("entrypoint", getattr(module, "__file__", None) or "")):
        where = Path(path).resolve() if path else None
        if where is not None and project.inside(where, root) and str(where.relative_to(root)) not in listed:
            raise ConfigError(f"{source}: key '{key}' has invalid value {getattr(job, key)!r}; {where} is left out "
                              f"of the project's snapshot (by .gitignore or the profile's snapshot_exclude), so "
                              f"the ranks would not find it; un-ignore it or keep it out of snapshot_exclude")


def check_entrypoint(job: JobConfig, source: str) -> None:
    """Import the job's module and check its function and `config:` (trainer.runners.entrypoints) before queueing.
    Costs what importing the user's module costs (torch, if it imports torch: about a second); only
    submissions of entrypoint jobs pay it, never --help."""
    from trainer.runners import entrypoints  # imports the user's module: only for entrypoint jobs

    entrypoints.check(job.entrypoint, job.config, job.code_dir, source, job.project_root)


def check_data(profile: Profile, job: JobConfig) -> None:
    if job.dataset != "cifar10":
        return
    root = Path(data_folder(job, profile.data_dir)).expanduser()
    key = "job.data_dir" if job.data_dir else "profile.data_dir"
    if job.download and not (root / CIFAR_FOLDER).is_dir():
        check_writable_folder(root, key, "the download")
    if job.data_dir and not root.is_dir():
        raise ConfigError(f"{key}: data folder {str(root)!r} does not exist; point it at the folder that holds "
                          f"'{CIFAR_FOLDER}' (or leave it empty to use the profile's data_dir)")
    if not job.download and not (root / CIFAR_FOLDER).is_dir():
        raise ConfigError(f"{key}: {str(root)!r} holds no '{CIFAR_FOLDER}' folder and job.download is false; "
                          f"copy CIFAR-10 there or set --set job.download=true")


def cuda_visible_here() -> bool:
    """Whether this machine has an NVIDIA driver, without importing torch (keeps the submitter fast)."""
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/proc/driver/nvidia/version")


def check_writable_folder(path: Path, key: str, what: str) -> None:
    """`path` is (or can be made) a folder we may write: not under a regular file, not read-only.

    Checked before anything is queued; otherwise the run folder or the download fails later, on
    this machine as a traceback or on a node after the job waited in the queue."""
    path = Path(path).expanduser()
    probe = path
    while not probe.exists() and probe != probe.parent:
        if probe.is_symlink():  # a dangling link: mkdir would fail on it
            break
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        under = "is" if probe == path else f"is under {str(probe)!r}, which is"
        raise ConfigError(f"{key}: {str(path)!r} {under} a file, not a folder; {what} needs a folder there")
    if not probe.exists():
        raise ConfigError(f"{key}: {str(path)!r} cannot be created ({str(probe)!r} is a broken link)")
    # access() answers for this user and also says EROFS on a read-only mount (even for root).
    if not os.access(probe, os.W_OK | os.X_OK):
        which = "" if probe == path else f" (its nearest existing folder {str(probe)!r})"
        raise ConfigError(f"{key}: {str(path)!r}{which} is not writable here (read-only or not yours); "
                          f"{what} needs a folder it can write")
