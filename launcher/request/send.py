"""The one place that queues work: submit a Submission through its submitit executor
(launcher.request.executor), recording each job id as sbatch returns it.

submitit is imported only in the functions that need it (here, in `executor` and in
`submitit_private`), so that `submit.py --help` and the operating commands do not pay for it.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import socket
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from launcher.cluster.jobids import distinct_bases
from launcher.cluster.preflights import Answer
from launcher.reports.root_cause import joined_lines
from launcher.cluster.slurm.env import slurm_env
from launcher.request.errors import PartiallySubmitted, SubmissionRefused
from launcher.request.executor import check_script, make_executor
from launcher.request.submission import Submission
from launcher.rundir import snapshot
from launcher.rundir.layout import RUN_FILE
from launcher.rundir.record import update_record
from trainer.config import project
from trainer.config.lookup import CODE_ROOT
from trainer.config.schema import ConfigError


def task_environment(caller: Mapping[str, str], slurm_conf: str, search_path: list[str] | None = None,
                     extra: dict[str, str] | None = None, local: bool = False,
                     project_copy: str | None = None, cluster: str = "") -> dict[str, str]:
    """The environment the tasks start with, made from the caller's (`caller`, not changed). Clean: a
    submitter running inside a job must not pass that job's SLURM_*/RANK/MASTER_* variables on (sbatch
    exports the caller's environment to the new job, and the local executor copies it into its processes).
    `extra`: the profile's `env` for the local and debug executors, which have no batch script to export it.

    `search_path`: the run's code snapshot, then the project's folders as the one lookup rule gives them
    (Submission.search_path): the tasks' PYTHONPATH, ahead of the caller's, with PYTHONSAFEPATH=1 so that
    `python -m` does not put the working directory first on sys.path: imports resolve to the snapshot,
    relative paths to where the user submitted. `project_copy`: the run's copy of the project
    (trainer.config.project.SNAPSHOT_VAR).

    `local`: the local executor, which sets CUDA_VISIBLE_DEVICES itself: the caller's is passed on beside it
    for the tasks to put back (launcher.node.task.restore_caller_gpus)."""
    from launcher.node.task import remember_caller_gpus  # (imports submitit: only when something is sent)

    env = {**slurm_env(slurm_conf, dict(caller), cluster), **(extra or {})}
    remember_caller_gpus(env, local)
    # The task unpickles launcher.node.task.TrainTask wherever it runs: make the project importable there
    # even when the submitter was started from another folder and the project is not installed.
    code = search_path or [str(CODE_ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(p for p in (*code, env.get("PYTHONPATH", "")) if p)
    if not env.get("PYTHONSAFEPATH"):
        env.update({"PYTHONSAFEPATH": "1", project.ADDED_SAFEPATH_VAR: "1"})
    env.pop(project.SNAPSHOT_VAR, None)
    if project_copy:
        env[project.SNAPSHOT_VAR] = project_copy
    return env


@contextlib.contextmanager
def submitting_from(env: dict[str, str], submit_dir: Path | None) -> Iterator[None]:
    """submitit's SLURM and local executors read the tasks' environment and starting folder from this
    process (sbatch and the local executor start jobs in the submitter's current directory): this command
    line's own process, never a caller's (the Python API starts `python -m launcher` for them; a debug
    profile's run, the one that runs in the caller's process, is handed its environment as data instead)."""
    saved, cwd = dict(os.environ), os.getcwd()
    os.environ.clear()
    os.environ.update(env)
    try:
        if submit_dir is not None:
            os.chdir(submit_dir)
        yield
    finally:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(saved)


def send(sub: Submission, answer: Answer | None = None,
         on_queued: Callable[[list[str]], None] | None = None) -> list[Any]:
    """Queue `sub`, as the preflight's `answer` decides: one job, or one job array (split into arrays of at
    most `answer.chunk` tasks).

    `on_queued(job ids so far)` runs the moment each sbatch returns, so a submission that fails
    part-way leaves a run folder that knows what was queued. If sbatch refuses the first job,
    nothing is queued: the run folder is removed again and the refusal is a SubmissionRefused
    carrying sbatch's own message."""
    from launcher.node.task import TrainTask  # submitit only when something is sent

    if sub.is_pool:  # workers that take the points in turn (launcher.node.pool_worker)
        from launcher.node.pool_worker import PoolWorker

        points = {t.task: (t.job, t.settings) for t in sub.tasks}
        calls: list[Any] = [PoolWorker(points, [t.task for t in sub.tasks], str(sub.run_dir)) for _ in range(sub.jobs)]
    elif sub.profile.launch == "torchrun":  # one task per node runs torchrun (launcher.node.torchrun_task)
        from launcher.node.torchrun_task import TorchrunTask

        calls = [TorchrunTask(t.job, t.settings, sub.profile.tasks_per_node, str(sub.run_dir)) for t in sub.tasks]
    else:
        calls = [TrainTask(t.job, t.settings, str(sub.run_dir)) for t in sub.tasks]
    return _queue(sub, calls, answer or Answer(), on_queued)


def send_probe(sub: Submission) -> Any:
    """Queue `submit.py probe` with `sub`'s request instead of training: `launcher.node.placement.probe_task` on
    every task or, in the torchrun shape, on every rank the node's torchrun starts (each node task then
    returns a list of its ranks' reports)."""
    from launcher.node.placement import probe_task

    if sub.profile.launch == "torchrun":
        from launcher.node.torchrun_task import TorchrunProbe

        return _queue(sub, [TorchrunProbe(sub.profile.tasks_per_node)], Answer(), None)[0]
    return _queue(sub, [probe_task], Answer(), None)[0]


def _queue(sub: Submission, calls: list[Callable[[], Any]], answer: Answer,
           on_queued: Callable[[list[str]], None] | None) -> list[Any]:
    executor = make_executor(sub, answer)
    if sub.executor == "slurm":  # the text sbatch will read, checked whole before anything is queued
        from launcher import submitit_private  # (imports submitit, as make_executor did)

        try:
            check_script(submitit_private.submission_script(executor), executor.parameters)
        except ConfigError:
            shutil.rmtree(sub.run_dir, ignore_errors=True)  # as for sbatch's own refusal: nothing was queued
            raise
    _reach_its_cluster(sub)
    jobs: list[Any] = []
    # submitit prints sbatch's stderr itself when sbatch fails; hold it back, since the error we
    # raise quotes it (one line instead of two), and pass it on otherwise.
    # (SLURM only: the debug executor runs the task in this process, where pdb needs the terminal.)
    held = io.StringIO()
    # Queued with sbatch --hold by launcher.cluster.slurm.sbatch.parameters (a user's own sbatch_extra hold
    # replaces that True: such a job is theirs to release).
    held_by_us = sub.executor == "slurm" and executor.parameters.get("additional_parameters", {}).get("hold") is True
    holding = contextlib.redirect_stderr(held) if sub.executor == "slurm" else contextlib.nullcontext()
    copy = None
    if sub.profile.snapshot and sub.executor != "debug":  # debug runs in this process: its code is loaded
        snapshot.ensure(sub.run_dir, sub.project, sub.submit_dir, sub.code_root, sub.origin)
        copy = str(snapshot.project_dir(sub.run_dir, sub.project_root, sub.code_root)) if sub.project_root else None
        if (sub.run_dir / RUN_FILE).is_file():
            update_record(sub.run_dir, code=snapshot.read_note(sub.run_dir))
    try:
        env = task_environment(os.environ, sub.slurm_conf, sub.search_path(),
                               sub.profile.env if sub.executor != "slurm" else {}, sub.executor == "local", copy,
                               sub.cluster)
        # A debug run is this process's own (the caller's, from the Python API): its job takes the environment
        # as data (submitit's DebugJob puts it in place while the function runs, and takes it back after).
        here = contextlib.nullcontext() if sub.executor == "debug" else submitting_from(env, sub.submit_dir)
        with here, holding:
            size = answer.chunk or len(calls)
            for start in range(0, len(calls), size):
                if len(calls) > 1:
                    with executor.batch():
                        queued = [executor.submit(call) for call in calls[start:start + size]]
                else:
                    queued = [executor.submit(calls[0])]
                if sub.executor == "debug":
                    from launcher import submitit_private  # (imports submitit, as make_executor did)

                    for job in queued:
                        submitit_private.give_environment(job, env)
                jobs += queued
                _pin_its_cluster(executor, sub)
                if on_queued is not None:
                    on_queued([str(j.job_id) for j in jobs])
                if held_by_us:  # submitit has made these jobs' log folders (and moved their pickles) by now
                    _release([str(j.job_id) for j in queued])
    except Exception as err:  # noqa: BLE001 - sbatch's refusal or submitit's own failure mid-way
        said, refused = joined_lines(str(err), type(err).__name__), _is_refusal(err)
        if not refused:  # a refusal is quoted in the error we raise; anything else is shown as it came
            sys.stderr.write(held.getvalue())
        if jobs:
            raise PartiallySubmitted(
                f"sbatch failed after job(s) {', '.join(distinct_bases([str(j.job_id) for j in jobs]))} "
                f"({len(jobs)} of {len(calls)} task(s)) were queued; they are recorded in {sub.run_dir} "
                f"(status, cancel and --resume see them): {said}") from None
        if not refused:
            raise
        if sub.executor == "slurm":
            shutil.rmtree(sub.run_dir, ignore_errors=True)
        raise SubmissionRefused(f"sbatch refused the job, nothing was queued: {said}") from None
    except BaseException:
        sys.stderr.write(held.getvalue())
        raise
    sys.stderr.write(held.getvalue())
    if sub.allocation is not None and (sub.run_dir / RUN_FILE).is_file():  # the step's bash stands for the job
        update_record(sub.run_dir, allocation={"job_id": sub.allocation.job_id, "pid": jobs[0].process.pid,
                                               "host": socket.gethostname()})
    return jobs


def _reach_its_cluster(sub: Submission) -> None:
    """submitit keeps calling SLURM after sbatch (sacct while waiting, scancel), from this process's environment:
    those calls, and the release of the held jobs, must reach the run's cluster (the profile's SLURM_CONF, and its
    `clusters:`, which sacct is told separately)."""
    if sub.slurm_conf:
        os.environ["SLURM_CONF"] = sub.slurm_conf
    if sub.cluster:  # (submitit's sacct is told by its own watcher: submitit_private.cluster_picking)
        os.environ["SLURM_CLUSTERS"] = sub.cluster
    else:  # (a SLURM_CLUSTERS of the caller's shell would send those calls elsewhere: the profile names none)
        os.environ.pop("SLURM_CLUSTERS", None)


def _pin_its_cluster(executor: Any, sub: Submission) -> None:
    """Where SLURM sent the jobs just queued (one of several clusters, launcher.config.cluster_keys): the rest of
    the run goes there too (SLURM_CLUSTERS outranks the script's --clusters), and run.json says it for every
    later command."""
    landed = getattr(executor, "landed", "") or sub.cluster
    if not landed or "," in landed:  # (no cluster named, or sbatch did not say which: as the profile says)
        return
    os.environ["SLURM_CLUSTERS"] = landed
    if (sub.run_dir / RUN_FILE).is_file():
        update_record(sub.run_dir, cluster=landed)


def _release(job_ids: list[str]) -> None:
    """`scontrol release` the jobs just queued held (an array by its base id), waiting out a controller
    that does not answer. A job left held would wait for ever, so a release that fails is an error that
    names the command to run."""
    from launcher.cluster.slurm.accounting import release

    bases = distinct_bases(job_ids)
    error = release(bases, dict(os.environ), f"job(s) {', '.join(bases)} are queued held until released")
    if error:
        raise RuntimeError(f"job(s) {', '.join(bases)} were queued held and could not be released "
                           f"({error}); start them with `scontrol release {','.join(bases)}`"
                           + (f" on cluster {os.environ['SLURM_CLUSTERS']} (-M)" if os.environ.get("SLURM_CLUSTERS") else ""))


def _is_refusal(err: BaseException) -> bool:
    from submitit.core.utils import FailedJobError, FailedSubmissionError  # see launcher.request.executor.make_executor

    return isinstance(err, (FailedJobError, FailedSubmissionError))
