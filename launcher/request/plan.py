"""Planning a submission: the first half of the one path every submission takes (a new run here or
over SSH, `--resume`, and the cluster side of an SSH submission): plan -> check -> dry-run or send ->
report (launcher.commands.sending.execute runs it; the verbs report).

A plan is the submission as data plus what its run folder needs before and after sbatch. Nothing
here sends at import time: `submit.py --dry-run` of a new run plans and shows, and never loads the
sending and waiting code (launcher.request.send, .waiting; benchmarks/submitter.py measures it).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

from launcher.cluster import preflights
from launcher.cluster.slurm import allocation
from launcher.cluster.jobids import distinct_bases, is_slurm
from launcher.config import checks, cluster_keys
from launcher.config.after import dependency
from launcher.config.after import split as split_after
from launcher.config.profile import Profile
from launcher.config.resolve import Point, resolve
from launcher.request import channel
from launcher.request.submission import Submission, build, moved
from launcher.rundir import claims, layout, record, reused, snapshot
from trainer.config.job import JobConfig
from trainer.config.schema import ConfigError


@dataclass
class Checked:
    """What a submission is made of, resolved and checked on this machine: the profile, each task's
    point, the run folder (here: a new run's, or the local record's over SSH), the --after dependencies
    ("afterok:12"), the ranks' working directory, your project's files (the snapshot's list; None: no
    project) and a function handed over from Python by value for the new run folder (None: none)."""

    profile: Profile
    points: list[Point]
    run_dir: Path
    is_sweep: bool
    source: str  # the profile file, as errors name it
    after: list[str]
    submit_dir: Path
    project: snapshot.Survey | None
    held: allocation.Allocation | None = None  # the allocation the ranks run in (`in_allocation`)
    function: bytes | None = None

    def submission(self) -> Submission:
        """The submission as it is queued from this machine."""
        return build(self.profile, self.points, self.run_dir, self.is_sweep, self.after, self.submit_dir, self.project,
                     held=self.held, function=self.function)


def check(profile: Profile, points: list[Point], run_dir: Path | None, is_sweep: bool, source: str,
          after: list[str] | None, submit_dir: Path | None = None, job_name: str = "",
          function: bytes | None = None) -> Checked:
    """The --after dependencies and the checks this machine can make (new runs and --resume alike), before
    anything is made, each handed what it needs in turn, from the run folder's wing down to the
    configuration's: the run folder (`run_dir`; None: a new run's, named after `job_name`) and your
    project's snapshot listed (its size cap checked), then the run folder's parent and each job (where
    the run is queued from here, what only the machine that runs it can see too: its data, its
    entrypoint's import, its trackers' libraries; over SSH the cluster side checks those:
    launcher.commands.receive). `submit_dir`: the ranks' working directory (a new run: here; --resume:
    the run's own). `function`: one pickled by value (`--function`; --resume: the run folder's), checked
    here after the jobs (launcher.config.by_value), and written into the new run folder by `Plan.prepare`."""
    after_jobs = dependencies(after or [], profile)
    if run_dir is None:
        run_dir = layout.new_run_dir(Path(profile.runs_dir), job_name, profile.name)
    root = next((p.job.project_root for p in points if p.job.project_root), "")
    files = None
    if root and profile.snapshot and profile.executor != "debug" and not snapshot.taken(run_dir):
        # Listed (and the size cap checked) now, before the run folder exists: a refusal leaves nothing.
        files = snapshot.survey(Path(root), profile.snapshot_exclude, profile.snapshot_max_mb, source,
                                skip=[Path(profile.runs_dir).expanduser().resolve()])
    checks.check_writable_folder(run_dir.parent, "profile.runs_dir", "the run folder")
    held = allocation.held(os.environ, len(points), profile.nodes, profile.tasks_per_node, profile.cpus_per_task,
                           profile.gpus_per_node) if profile.in_allocation else None
    for p in points:
        checks.check_here(profile, p.job, source, p.source)
        if not profile.login:
            checks.check_where_it_runs(profile, p.job, source, p.source)
        if files is not None:
            checks.check_in_snapshot(p.job, files.files, p.source)
    if function is not None or any(p.job.function for p in points):
        from launcher.config import by_value  # a function handed over from Python: only then

        function = by_value.planned(profile, source, [(p.job, p.source) for p in points], run_dir, function)
    return Checked(profile, points, run_dir, is_sweep, source, after_jobs, submit_dir or Path.cwd(), files, held,
                   function)


def dependencies(after: list[str], profile: Profile) -> list[str]:
    """Each `--after RUN[:COND]` as SLURM dependency items ("afterok:12"), every run checked."""
    for item in after:  # (`--after ''` names no run: refused, it does not drop the dependency)
        if profile.executor != "slurm":
            raise ConfigError(f"--after {item}: dependencies need a slurm profile, not '{profile.executor}'")
    items = []
    for item in after:
        run, condition = split_after(item, _names_folder(item))
        ids = _job_ids_of(run, profile.login, (cluster_keys.names(profile.clusters) or [""])[0])
        items += dependency(ids, condition)
    return items



def _names_folder(item: str) -> bool:
    """Whether `--after ITEM` as a whole names a folder; a name no path can have (over 255 bytes) names
    none, and the run's own checks then say what is wrong with it."""
    try:
        return Path(item).is_dir()
    except OSError:
        return False


def new_run(args: argparse.Namespace) -> Checked:
    """`submit.py --profile P --job J [--set ...] [--after RUN] [--function FILE]`, resolved and checked
    here: the configuration resolved (launcher.config.resolve), then handed down to the checks once."""
    function = None
    if args.function is not None:  # first: launcher.client writes it into a pipe, and its writer waits for us
        from launcher.config.by_value import receive

        function = receive(args.function)
    resolved = resolve(args.profile, args.job, args.sets, wait=args.wait)
    return check(resolved.profile, resolved.points, None, resolved.is_sweep, resolved.profile_source, args.after,
                 job_name=resolved.job.name, function=function)


class Plan:
    """A submission sent from this machine and its run folder's bookkeeping: a new run (the verb's
    `report`: launcher.commands.sending), or `--resume` (launcher.commands.resume overrides)."""

    def __init__(self, sub: Submission, source: str, argv: list[str]) -> None:
        self.sub, self.source, self.argv = sub, source, argv
        # The signature held from its lookup until this is queued (launcher.rundir.claims); None: none is (a dry
        # run, a debug run, `--resume` of a run by name).
        self.claim: claims.Claim | None = None
        # A new sweep's points that other runs completed (launcher.rundir.reused), by task: brought into its
        # folder, not queued.
        self.reused: dict[int, reused.Found] = {}

    def heading(self) -> str:
        """What a dry run says first."""
        return ""

    def preflight(self, dry_run: bool) -> preflights.Answer:
        """The live preflight of the submission's scheduler (launcher.cluster.preflights): the array size
        per sbatch and the scheduler's release (an empty answer: not SLURM). A dry run still shows the
        script where the cluster cannot be asked (a laptop)."""
        check_limits = preflights.scheduler_preflight(self.sub.executor)
        if check_limits is None:
            return preflights.Answer()
        return check_limits(self.sub.request, self.sub.profile.max_array_size, self.source, required=not dry_run,
                            tasks=self.sub.jobs)

    def send(self, answer: preflights.Answer, as_json: bool) -> int:
        """Queue it (launcher.request.send, loaded only now), then the verb's report."""
        from launcher.request import send

        self.prepare()
        sub = self.sub  # (prepare may have moved it to a free run folder name)
        jobs = send.send(sub, answer, on_queued=self.record)
        if self.claim is not None:  # queued: the next identical submission may look, and finds it
            self.claim.release()
        try:
            return self.report(jobs, as_json)
        finally:
            if sub.executor != "slurm":
                layout.drop_log_template(sub.run_dir)

    def prepare(self) -> None:
        """Before sbatch: the run folder (the first free name: another submitter may have taken this
        one since it was chosen) and what it must hold."""
        claimed = layout.claim(self.sub.run_dir)
        if claimed != self.sub.run_dir:
            self.sub = moved(self.sub, claimed)
        record.create(self.sub.run_dir, self.sub.describe(), ["submit.py", *self.argv])
        if self.claim is not None:  # (the points it runs itself: a reused one's index names where it ran)
            points = zip(self.sub.tasks, self.sub.signatures.tasks) if self.sub.is_sweep else []
            self.claim.names(self.sub.run_dir, {t.task: s for t, s in points if t.task not in self.reused})
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
        """After sending: what the user sees (launcher.commands.sending and .resume implement it)."""
        raise NotImplementedError


def _job_ids_of(after: str, login: str = "", cluster: str = "") -> list[str]:
    """The job ids `--after RUN` depends on: a run recorded here by a submission over SSH
    (launcher.remote.ssh_record), or a run folder's run.json, which ran on `cluster` (a dependency names a job of
    the cluster the new job goes to: SLURM has none across clusters)."""
    from launcher.remote.ssh_record import after_ids  # (--after only: a new run's dry run does not load it)

    record.check_path("--after", after)
    run_dir = Path(after)
    if (remote := after_ids(run_dir, login)) is not None:
        return remote  # (the cluster side depends on its own run folder's jobs: the same ids)
    if not (run_dir / layout.RUN_FILE).is_file():
        raise ConfigError(f"--after {run_dir}: not a run folder (no readable {layout.RUN_FILE})")
    info = record.load_run(run_dir)
    ids = [str(i) for i in info.record.get("job_ids") or []]
    executor = info.record.get("executor")
    if executor != "slurm" or not all(is_slurm(i) for i in ids):
        raise ConfigError(f"--after {run_dir}: that run ran on the {executor} executor, not as SLURM jobs (its ids "
                          f"are {'process ids' if executor == 'local' else 'not SLURM job ids'}); --after needs a "
                          f"run that SLURM queued")
    if not ids:
        raise ConfigError(f"--after {run_dir}: that run has no SLURM job id to depend on")
    if info.cluster != cluster:
        raise ConfigError(f"--after {run_dir}: that run went to cluster {info.cluster or 'of its slurm_conf'}, this "
                          f"one goes to {cluster or 'the cluster of its slurm_conf'}; SLURM has no dependency across "
                          f"clusters: send both to one (profile.clusters)")
    if info.record.get("resumes"):
        # A resumed sweep's first array has failed tasks (afterok on it never holds): depend on the
        # job that ran each task last instead.
        return ids
    return distinct_bases(ids)


def _plain(value: Any) -> Any:
    return asdict(value) if is_dataclass(value) and not isinstance(value, type) else value
