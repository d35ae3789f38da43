"""A concept computed in two places gave wrong answers (issue 43); each now has one home, and these tests, which
failed before, hold it there. "Is this a sweep": a one-point sweep is a sweep everywhere (its task folder, its
record, a submission moved to a free run folder name). The run's overall state: tests/test_controller_unreachable.py
(the Python handle's `state()` read an unanswering controller as `completed`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from launcher.request.plan import new_run
from launcher.request.submission import moved
from launcher.rundir.record import RecordedRun

ONE_POINT = "extends: digits\nname: one\nepochs: 1\nsweep:\n  grid:\n    lr: [0.1]\n"


def submission(job: Path, profile: str = "local", runs: Path | None = None):  # type: ignore[no-untyped-def]
    sets = [f"profile.runs_dir={runs}"] if runs else []
    args = argparse.Namespace(profile=profile, job=str(job), sets=sets, wait=False, function=None, after=[])
    return new_run(args).submission()


@pytest.mark.parametrize("profile", ["local", "dev-cluster"])
def test_a_one_point_sweep_moved_to_a_free_run_folder_name_is_still_a_sweep(tmp_path: Path, profile: str) -> None:
    """Two submissions in the same second take the same name; the later one is moved (layout.claim). It was
    rebuilt as a single run: its point's folder and sweep fields were lost."""
    (tmp_path / "one.yaml").write_text(ONE_POINT)
    sub = submission(tmp_path / "one.yaml", profile, tmp_path / "runs")
    assert sub.is_sweep and len(sub.tasks) == 1
    other = sub.run_dir.with_name(sub.run_dir.name + "-1")
    again = moved(sub, other)
    (task,) = again.tasks
    assert again.is_sweep and task.settings.run_dir == str(other / "task-0000")
    assert task.settings.sweep == other.name and task.settings.swept == {"lr": 0.1}
    assert again.describe()["sweep_overrides"] == [{"lr": 0.1}]


def test_a_one_point_sweeps_record_reads_as_a_sweep(tmp_path: Path) -> None:
    """status, watch and --resume read a run through its record: a one-point sweep's is a sweep's, so its
    task is read from task-0000, with its overrides (it was read from the run folder itself, overrides {})."""
    (tmp_path / "one.yaml").write_text(ONE_POINT)
    sub = submission(tmp_path / "one.yaml", runs=tmp_path / "runs")
    recorded = json.loads(json.dumps(sub.describe(), default=str))
    info = RecordedRun(sub.run_dir, recorded)
    assert info.is_sweep and info.task_dir(0) == sub.run_dir / "task-0000"
    plain = tmp_path / "plain.yaml"
    plain.write_text("extends: digits\nname: plain\n")
    lone = submission(plain, runs=tmp_path / "runs")
    assert not lone.is_sweep and lone.describe()["sweep_overrides"] is None
    assert not RecordedRun(lone.run_dir, json.loads(json.dumps(lone.describe(), default=str))).is_sweep


def test_attach_gives_a_one_point_sweep_a_sweeps_handle(tmp_path: Path) -> None:
    """The Python handle reads the record by the same rule: a one-point sweep's is a Sweep (results in point order)."""
    from launcher.client import Sweep, attach

    (tmp_path / "one.yaml").write_text(ONE_POINT)
    sub = submission(tmp_path / "one.yaml", runs=tmp_path / "runs")
    sub.run_dir.mkdir(parents=True)
    (sub.run_dir / "run.json").write_text(json.dumps({**json.loads(json.dumps(sub.describe(), default=str)),
                                                      "tasks": 1}))
    assert isinstance(attach(sub.run_dir), Sweep)


def test_the_attempt_number_is_one_rule_for_the_ranks_and_for_status(tmp_path: Path) -> None:
    """The ranks (trainer.rank.events.attempt_number) and `status` (TaskState.attempt, set in launcher.rundir.states)
    number an attempt by `attempt_of`: the "started" events, or the scheduler's restarts plus one where it says more."""
    from launcher.rundir import restarts
    from trainer.rank import events

    events.append(tmp_path, "started", job_id="7")
    events.append(tmp_path, "failed", job_id="7")
    events.append(tmp_path, "started", job_id="7")  # the retry step's second attempt, in the same allocation
    logged = restarts.read(tmp_path).count
    assert events.attempt_number(tmp_path, {"TORCHELASTIC_RESTART_COUNT": "5"}) == 2 == events.attempt_of(logged + 1)
    assert events.attempt_of(logged + 1, scheduler_restarts=3) == 4  # requeued thrice, its rank 0 not started yet
    assert events.attempt_of(0) == 1 and events.attempt_number(tmp_path / "never") == 1
