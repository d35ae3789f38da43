"""A function handed over from Python by value (`launcher.client.submit(fn)` of a notebook cell's
function, a script's `__main__`, a lambda, a closure, a partial), on the submitter's side: read from
what the API hands over (`--function FILE`, a pipe), or from the run folder on `--resume`, and checked
before anything is queued, as an entrypoint is (trainer.runners.pickled holds the file and the loading).

The checks, each one `error:` line (exit 2, nothing queued, no run folder): the pickle is at most the
profile's `max_pickle_mb` (else the names it captured, largest first, say what made it large); it
unpickles here, in your project's search path; it is a function taking (ctx) or (ctx, config); and
each task's `config:` fits its config dataclass. Over SSH (`login:`) only the size is checked here:
the rest is the cluster side's check, with its Python and its copy of your project, as for an
entrypoint (launcher.config.checks).
"""

from __future__ import annotations

from pathlib import Path

from launcher.config.profile import Profile
from trainer.config.job import JobConfig
from trainer.config.schema import ConfigError
from trainer.runners import entrypoints, pickled

MB = 2**20


def receive(path: str) -> bytes:
    """What `--function FILE` names (launcher.client writes the pickle into a pipe: /dev/fd/N)."""
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as err:
        raise ConfigError(f"--function {path}: cannot read it ({err.strerror}); it names a function pickled "
                          f"by value, which launcher.client.submit hands over") from None


def check(profile: Profile, profile_source: str, jobs: list[tuple[JobConfig, str]], blob: bytes) -> None:
    """`blob` against the profile's bound, then (here, not over SSH) as each task would call it."""
    first, source = jobs[0]
    name, folders = first.function, entrypoints.search_path(first.code_dir, first.project_root, None)
    size = len(blob) / MB
    if size > profile.max_pickle_mb:
        largest = pickled.captured(pickled.load(blob, name, source, folders))
        listed = ", ".join(f"{n} {b / MB:.1f} MB" for n, b in largest) or "nothing it names (the function itself)"
        raise ConfigError(f"{source}: key '{pickled.KEY}' has invalid value {name!r}; pickled by value it is "
                          f"{size:.1f} MB, over max_pickle_mb ({profile.max_pickle_mb:g} MB, {profile_source}); "
                          f"what it captures, largest first: {listed}. Load large data inside the function (from "
                          f"a file) instead of capturing it, or raise profile.max_pickle_mb")
    if profile.login:
        return
    function = pickled.load(blob, name, source, folders)
    for job, where in jobs:
        entrypoints.checked(function, name, job.config, where, pickled.KEY)


def planned(profile: Profile, profile_source: str, jobs: list[tuple[JobConfig, str]], run_dir: Path,
            given: bytes | None) -> bytes | None:
    """Checks the function the tasks run, if they run one: `given` (`--function`: a new run), else the
    one in the run folder (`--resume`). Returns what the new run folder must hold (None: nothing to write)."""
    named = [job for job, _ in jobs if job.function]
    if given is not None and len(named) < len(jobs):
        raise ConfigError("--function: the job names no pickled function (its key 'function' is empty); "
                          "launcher.client.submit(fn) sets both")
    if not named:
        return None
    source = jobs[0][1]
    if given is None and not (run_dir / pickled.FILE).is_file():
        raise ConfigError(f"{source}: key '{pickled.KEY}' has invalid value {named[0].function!r}; it names a function "
                          f"pickled by value, which only launcher.client.submit(fn) hands over (a job file names "
                          f"its code with entrypoint: or script:)")
    blob = given if given is not None else pickled.stored(run_dir, source, named[0].function)
    check(profile, profile_source, jobs, blob)
    return given
