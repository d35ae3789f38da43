"""Planning a submission, and `--dry-run`: the first half of the one path every submission takes
(a new run, or `--resume`): plan -> check -> dry-run or send -> report.

A plan is the submission as data plus what its run folder needs before and after sbatch. This
module never sends: `submit.py --dry-run` of a new run loads only it (launcher.commands.main), so the
preview users wait for most does not import the sending and waiting code (launcher.commands.submit,
which sends through the same `array_chunk` check and shows a `--resume --dry-run` with `dry_run`).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path
from typing import Any

import yaml

from launcher.cluster import jobids, preflights
from launcher.commands.console import EXIT_OK, emit
from launcher.config import checks
from launcher.config.after import dependency
from launcher.config.after import split as split_after
from launcher.config.profile import Profile
from launcher.config.resolve import resolve
from launcher.request import channel, executor
from launcher.request.submission import Point, Submission, build, moved
from launcher.rundir import layout, record, snapshot
from trainer.config.job import JobConfig
from trainer.config.schema import ConfigError


class Plan:
    """A submission and its run folder's bookkeeping (a new run; `resume.ResumePlan` overrides)."""

    def __init__(self, sub: Submission, source: str, argv: list[str]) -> None:
        self.sub, self.source, self.argv = sub, source, argv

    def heading(self) -> str:
        return ""

    def prepare(self) -> None:
        """Before sbatch: the run folder and what it must hold."""
        claimed = layout.claim(self.sub.run_dir)  # another submitter may have taken the name since it was chosen
        if claimed != self.sub.run_dir:
            self.sub = moved(self.sub, claimed)
        record.create(self.sub.run_dir, self.sub.describe(), ["submit.py", *self.argv])
        if self.sub.function is not None:  # a function handed over by value: what every rank calls
            from trainer.runners import pickled  # (only then)

            pickled.write(self.sub.run_dir, self.sub.function)
        channel.tell("run_dir", run_dir=str(self.sub.run_dir))
        # The job's fields as they are (asdict's deep copy of each of 1,000 jobs cost 40 ms; a JSON
        # dump changes nothing it is given), but a nested dataclass (`tracker`) as its mapping: JSON would
        # write its repr, which --resume cannot read back.
        # Which fields hold one is found on one task (an is_dataclass per field and task cost 5x the copy).
        names = [f.name for f in fields(JobConfig)]
        nested = [n for n in names if any(is_dataclass(getattr(t.job, n)) for t in self.sub.tasks[:1])]
        record.write_tasks(self.sub.run_dir, [{"task": t.task, "overrides": t.overrides, "run_dir": t.settings.run_dir,
                                               "job": {**{name: getattr(t.job, name) for name in names},
                                                       **{name: _plain(getattr(t.job, name)) for name in nested}}}
                                              for t in self.sub.tasks])

    def record(self, job_ids: list[str]) -> None:
        """After each sbatch (a split array calls it once per array): what is queued so far."""
        record.update_record(self.sub.run_dir, job_ids=job_ids)
        channel.tell("queued", run_dir=str(self.sub.run_dir), job_ids=job_ids)

    def report(self, jobs: list[Any], as_json: bool) -> int:
        """After sending: what the user sees (launcher.commands.submit and .resume implement it)."""
        raise NotImplementedError


def plan_submission(profile: Profile, points: list[Point], run_dir: Path, is_sweep: bool, source: str,
                    after: list[str] | None, submit_dir: Path | None = None,
                    function: bytes | None = None) -> Submission:
    """The --after dependencies, local checks, and the submission as data (new runs and --resume alike).
    `submit_dir`: the ranks' working directory (a new run: here; --resume: the run's own). `function`:
    a function pickled by value (`--function`), checked here and written into the new run folder."""
    after_ids = dependencies(after or [], profile)
    checks.check_writable_folder(run_dir.parent, "profile.runs_dir", "the run folder")
    for point in points:
        checks.check_local(profile, point.job, source, point.source)
    if function is not None or any(p.job.function for p in points):
        from launcher.config import pickled  # a function handed over from Python: only then

        function = pickled.planned(profile, source, [(p.job, p.source) for p in points], run_dir, function)
    root = next((p.job.project_root for p in points if p.job.project_root), "")
    files = None
    if root and profile.snapshot and profile.executor != "debug" and not snapshot.taken(run_dir):
        # Listed (and the size cap checked) now, before the run folder exists: a refusal leaves nothing.
        files = snapshot.survey(Path(root), profile.snapshot_exclude, profile.snapshot_max_mb, source,
                                skip=[Path(profile.runs_dir).expanduser().resolve()])
        for point in points:
            checks.check_in_snapshot(point.job, files.files, point.source)
    sub = build(profile, points, run_dir, is_sweep, after_ids, submit_dir, files)
    sub.function = function
    return sub


def dependencies(after: list[str], profile: Profile) -> list[str]:
    """Each `--after RUN[:COND]` as SLURM dependency items ("afterok:12"), every run checked."""
    for item in after:
        # `--after ''` names no run (refused), it does not drop the dependency.
        record.check_path("--after", item)
        if profile.executor != "slurm":
            raise ConfigError(f"--after {item}: dependencies need a slurm profile, not '{profile.executor}'")
    items = []
    for item in after:
        run, condition = split_after(item, Path(item).is_dir())
        items += dependency(_job_ids_of(Path(run), profile.login), condition)
    return items


def new_run(args: argparse.Namespace) -> tuple[Submission, str]:
    """The submission of `submit.py --profile P --job J [--set ...]` and the profile file it came from."""
    resolved = resolve(args.profile, args.job, args.sets)
    profile, job = resolved.profile, resolved.job
    if args.wait:
        profile.wait = True
    points = [Point(i, one, overrides, resolved.job_source + (f" (sweep task {i})" if resolved.is_sweep else ""))
              for i, (one, overrides) in enumerate(resolved.points)]
    run_dir = layout.new_run_dir(Path(profile.runs_dir), job.name, profile.name)
    function = None
    if args.function is not None:
        from launcher.config.pickled import receive

        function = receive(args.function)
    sub = plan_submission(profile, points, run_dir, len(points) > 1, resolved.profile_source, args.after,
                          function=function)
    return sub, resolved.profile_source


def array_chunk(plan: Plan, dry_run: bool) -> int | None:
    """The live SLURM preflight; the array size per sbatch (None: one sbatch, or not SLURM).
    --dry-run still shows the script where the cluster cannot be asked (a laptop)."""
    sub = plan.sub
    check = preflights.preflight(sub.executor)
    if check is None:
        return None
    return check(sub.request, sub.profile.max_array_size, plan.source, required=not dry_run,
                 tasks=len(sub.tasks))


def preview(args: argparse.Namespace, argv: list[str]) -> int:
    """`submit.py --dry-run` of a new run: plan and check as a submission would, then show it."""
    sub, source = new_run(args)
    plan = Plan(sub, source, argv)
    if sub.profile.login:  # over SSH: never connects; shows the ssh and rsync lines instead
        from launcher.commands.remote import dry_run_lines

        print(dry_run_lines(sub.profile, sub.project_root), end="", flush=True)
        return dry_run(plan, args.json, None)
    return dry_run(plan, args.json, array_chunk(plan, dry_run=True))


def _job_ids_of(run_dir: Path, login: str = "") -> list[str]:
    from launcher.commands.remote_runs import RECORD, read_record

    if (remote := read_record(run_dir) if (run_dir / RECORD).is_file() else None) is not None:
        # Submitted over SSH: its ids as recorded here (the cluster side depends on its own run folder).
        if remote.get("login") != login:
            raise ConfigError(f"--after {run_dir}: that run was submitted over SSH to {remote.get('login')!r}; a run "
                              f"can depend on it only through the same login (a profile with login: "
                              f"{remote.get('login')})")
        if not (ids := [str(i) for i in remote.get("job_ids") or []]):
            raise ConfigError(f"--after {run_dir}: that run has no SLURM job id to depend on")
        return jobids.distinct_bases(ids)
    if not (run_dir / layout.RUN_FILE).is_file():
        raise ConfigError(f"--after {run_dir}: not a run folder (no readable {layout.RUN_FILE})")
    info = record.load_run(run_dir)
    ids = [str(i) for i in info.record.get("job_ids") or []]
    if not ids:
        raise ConfigError(f"--after {run_dir}: that run has no SLURM job id to depend on")
    if info.record.get("resumes"):
        # A resumed sweep's first array has failed tasks (afterok on it never holds): depend on the
        # job that ran each task last instead.
        return ids
    return jobids.distinct_bases(ids)


def dry_run(plan: Plan, as_json: bool, chunk: int | None = None) -> int:
    sub = plan.sub
    description = sub.describe()
    text = plan.heading()
    # libyaml's emitter where PyYAML has it (the same text, several times faster than the pure-Python
    # one: a 1,000-task sweep's description is what users wait for). Names as written: `café`, not `caf\xE9`.
    text += yaml.dump({k: v for k, v in description.items() if v is not None}, sort_keys=False,
                      allow_unicode=True, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))
    if sub.is_array:
        text += sweep_listing(sub, chunk)
        description["task_dirs"] = [t.settings.run_dir for t in sub.tasks]
    if sub.executor == "slurm":
        script = executor.sbatch_script(sub, chunk)
        description["sbatch_script"] = script
        text += "\n# sbatch script (submitted with sbatch):\n" + script
    emit(text + "\nDry run: nothing was submitted.", {"dry_run": True, **description}, as_json)
    return EXIT_OK


def sweep_listing(sub: Submission, chunk: int | None) -> str:
    """The expanded tasks of a sweep, one line each, and how the array is split (for --dry-run)."""
    lines = [f"\n# {len(sub.tasks)} sweep task(s), one job array element each:"]
    lines += [f"#   task-{t.task:04d}: " + " ".join(f"{k}={v}" for k, v in t.overrides.items()) for t in sub.tasks]
    if chunk and chunk < len(sub.tasks):
        pieces = -(-len(sub.tasks) // chunk)
        lines.append(f"# split into {pieces} arrays of at most {chunk} tasks (the cluster's MaxArraySize or "
                     f"profile.max_array_size); one sbatch per array")
    return "\n".join(lines) + "\n"


def _plain(value: Any) -> Any:
    return asdict(value) if is_dataclass(value) and not isinstance(value, type) else value
