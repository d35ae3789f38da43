"""Submitting what already exists answers with what exists (docs/signatures.md): before a new run is queued,
its signature is looked up in the runs folder's index (launcher.rundir.claims), under a claim that the next
identical submission waits for. What the index names decides:

- a completed run: its result (a sweep: its summary), at once; nothing is queued;
- a pending or running one: this submission follows it (`--wait`: until it ends, then its result);
- a failed, cancelled or timed-out one: it is continued (`--resume` of that run, with this submission's
  profile, so a longer `time` or another partition applies), each task from its newest checkpoint; unless this
  submission runs the sweep with the other runner (`sweep_runner`), which makes a new run;
- none (or `--rerun`): a new run, which the index then names; a new sweep queues only the points that no run
  completed (`completed_points`; the others are brought into its folder: launcher.rundir.reused).

Every answer that queues nothing says so, is marked `"reused": true` in `--json` (and in the events a
program that started this one reads: launcher.client), and exits as the run did (0 completed, 1 failed).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from launcher.commands.console import EXIT_FAILED, EXIT_OK, emit, relative
from launcher.commands.sending import NewRun, metrics_line
from launcher.config.profile import Profile
from launcher.request import channel
from launcher.rundir import claims, layout, record, restarts, results, reused
from launcher.rundir.outcomes import nodes_of, read_outcomes
from launcher.rundir.record import RecordedRun
from launcher.rundir.task_state import ACTIVE, TaskState

POLL_S = 2.0
RERUN_HINT = "--rerun runs it again"


def send_once(plan: NewRun, args: argparse.Namespace, argv: list[str]) -> int:
    """A new run checked and sent as `sending.execute` does, unless its signature's run exists in the runs folder:
    then answered with that run (`answer`), the signature held from the lookup until what was decided is queued.
    Here, and on the cluster side of a submission over SSH (`receive`), where the runs live."""
    said = plan.preflight(False)  # first: a request the cluster refuses leaves nothing in the runs folder
    signature = plan.sub.signatures.run
    with claims.claim(plan.sub.run_dir.parent, signature) as held:
        found = None if args.rerun else held.run()
        answered = None if found is None else answer(found, signature, args, argv, held, plan.sub.profile)
        if answered is not None:
            return answered
        if plan.sub.is_sweep and not args.rerun:  # a new sweep: only the points no run has completed are queued
            plan.reused = completed_points(plan.sub.run_dir.parent, plan.sub.signatures.tasks)
            if plan.reused:
                origins = sorted({found.origin.rpartition("/")[0] for found in plan.reused.values()})
                print(f"{len(plan.reused)} of the sweep's {len(plan.sub.tasks)} point(s) already completed in "
                      f"{', '.join(origins)}: those are taken from there, the other "
                      f"{len(plan.sub.tasks) - len(plan.reused)} queued (--rerun runs them all again)", flush=True)
        plan.claim = held
        if len(plan.reused) == len(plan.sub.tasks):  # (a grid shrunk or reordered: its folder is made of them)
            plan.prepare()
            held.release()
            return answer_made(plan.sub.run_dir, signature, args.json)
        return plan.send(said, args.json)


def completed_points(runs_root: Path, signatures: list[str]) -> dict[int, reused.Found]:
    """The points of a new sweep (`signatures`, in task order) that a run of `runs_root` completed, by task."""
    from launcher.rundir.states import task_states  # (the scheduler's answers: only where a point is named)

    wanted: dict[Path, list[tuple[int, int, str]]] = {}
    for task, signature in enumerate(signatures):
        named = claims.point(runs_root, signature)
        if named is not None:
            wanted.setdefault(named[0], []).append((task, named[1], signature))
    found: dict[int, reused.Found] = {}
    for run_dir, points in wanted.items():
        try:
            info = record.load_run(run_dir)
        except (OSError, ValueError, KeyError, TypeError):  # (an unreadable record gives nothing: `list` shows it)
            continue
        if info.executor == "debug":  # (never answered: a debug run is where you stop in pdb)
            continue
        states = task_states(info)
        for task, theirs, signature in points:
            if theirs >= len(states) or info.task_signature(theirs) != signature:
                continue  # (an index entry from before that task was what it is now)
            ts = states[theirs]
            result = ts.result or record.read_optional(ts.task_dir / layout.RESULT_FILE)
            if ts.state == "completed" and result is not None:
                found[task] = reused.Found(run_dir.name, theirs, ts)
    return found


def answer_made(run_dir: Path, signature: str, as_json: bool) -> int:
    """A new sweep made only of points that earlier runs completed: answered as an identical run is."""
    from launcher.rundir.states import task_states

    info = record.load_run(run_dir)
    _tell(run_dir, info, signature)
    print(f"every point of this sweep already completed in earlier runs: {relative(run_dir)} is made of them; "
          f"nothing was queued ({RERUN_HINT})", flush=True)
    return _report(info, task_states(info), as_json)


def answer(found: Path, signature: str, args: argparse.Namespace, argv: list[str], held: claims.Claim,
           profile: Profile) -> int | None:
    """What this submission does about the run `found` of the same signature (see the module doc); None: it is
    sent as a new run after all (the ended run cannot be continued the way this submission runs)."""
    from launcher.commands.resume import other_runner, resume, runner  # (it queues: the sending code with it)
    from launcher.rundir.states import task_states  # (the scheduler's answers: only when a run exists)

    info = record.load_run(found)
    states = task_states(info)
    state = results.overall_state(states)
    if state not in ACTIVE and state != "completed":
        if other_runner(info, profile):  # (a user who switched runners asks for a run of the new kind)
            print(f"an identical run ended {state}: {relative(found)}; it ran as {runner(info.is_pool)} and this "
                  f"submission runs its sweep as {runner(not info.is_pool)}: a new run", flush=True)
            return None
        print(f"an identical run ended {state}: {relative(found)}; continuing it from its checkpoints "
              f"({RERUN_HINT} from the start)", flush=True)
        # Found by its folder in its runs folder: on the cluster side of an SSH submission the laptop's profile
        # name means nothing.
        again = argparse.Namespace(**{**vars(args), "resume": str(found), "sets": [], "job": None,
                                      "runs_dir": str(found.parent)})
        channel.tell("run_dir", run_dir=str(found))
        return resume(again, argv, claim=held, profile=profile)
    held.release()  # (nothing will be queued: the next identical submission may look now)
    _tell(found, info, signature)
    if state in ACTIVE:
        print(f"an identical run is already {state}: {relative(found)} (signature {signature}); following it, "
              f"nothing was queued ({RERUN_HINT})", flush=True)
        if not profile.waits:
            emit(f"follow with: python submit.py status {relative(found)}",
                 {**_where(info, states), "state": state.upper(), "reused": True}, args.json)
            return EXIT_OK
        states = _until_ended(info)
    else:
        print(f"an identical run already completed: {relative(found)} (signature {signature}); nothing was "
              f"queued ({RERUN_HINT})", flush=True)
    return _report(info, states, args.json)


def _tell(found: Path, info: RecordedRun, signature: str) -> None:
    """The events a program that started this one waits for (launcher.client): which run, and that it exists."""
    channel.tell("run_dir", run_dir=str(found))
    channel.tell("queued", run_dir=str(found), job_ids=[ids[-1] for ids in info.task_jobs if ids], reused=True,
                 signature=signature)


def _where(info: RecordedRun, states: list[TaskState]) -> dict[str, Any]:
    job_ids = [s.job_id for s in states]
    return {"run_dir": str(info.run_dir), "job_id": job_ids[0] if job_ids else "", "job_ids": job_ids,
            "tasks": len(states)}


def _until_ended(info: RecordedRun) -> list[TaskState]:
    from launcher.rundir.states import task_states

    while True:
        states = task_states(info)
        if not any(s.state in ACTIVE for s in states):
            return states
        time.sleep(POLL_S)


def _report(info: RecordedRun, states: list[TaskState], as_json: bool) -> int:
    """The ended run's result as a fresh run's `--wait` reports it, marked as reused."""
    # (No curve pictures drawn here: an answer that queues nothing should come at once; `status` draws them.)
    summary = results.collect(info.run_dir, states, max_curves=0)
    failed = [s for s in states if s.state != "completed"]
    if info.is_sweep:
        print((info.run_dir / layout.SUMMARY_MD).read_text(encoding="utf-8").rstrip(), flush=True)
        payload = {**_where(info, states), "state": summary["state"].upper(), "counts": summary["counts"],
                   "target_metric": summary["target_metric"], "best": summary["best"],
                   "summary_csv": summary.get("summary_csv"), "reused": True}
        emit("", payload, as_json)
        return EXIT_FAILED if failed else EXIT_OK
    ts = states[0]
    counted = restarts.read(info.run_dir).as_json()
    if failed:
        print(f"error: the run {ts.state}: {ts.error or 'no error recorded'} (status {relative(info.run_dir)} "
              f"says more)", file=sys.stderr)
        emit("", {**_where(info, states), "state": ts.state.upper(), "failed_rank": ts.failed_rank,
                  "error": ts.error, **counted, "reused": True}, as_json)
        return EXIT_FAILED
    # The nodes, as a fresh run's `--wait` adds them to rank 0's result (from every rank's).
    returned = [value for _, (kind, value) in sorted(read_outcomes(info.run_dir, ts.job_id, nodes=True).items())
                if kind == "success"]
    # (Its effective training time, as its own --wait recorded it in result.json.)
    recorded = record.read_optional(info.run_dir / layout.RESULT_FILE) or {}
    result = {**(ts.result or {}), "nodes": nodes_of(returned), **_where(info, states), "state": "COMPLETED",
              **counted, **({"ettr": recorded["ettr"]} if "ettr" in recorded else {}), "reused": True}
    emit(f"run folder: {relative(info.run_dir)}\n{metrics_line(result)}", result, as_json)
    return EXIT_OK
