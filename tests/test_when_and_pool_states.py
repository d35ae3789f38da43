"""Fast, in-process checks of three decisions a user reads off the screen:

* `submit.py --when`: which partitions it compares (`scontrol show partition -o`) and the start, nodes and
  partition it shows for each variant (`sbatch --test-only`), or the one line saying why there is none
  (launcher.cluster.slurm.start_estimate);
* each point of a pool sweep (`sweep_runner: pool`) as `status` shows it, read from the claim records the
  workers write (launcher.reports.pool_claims) and the workers alive (launcher.rundir.pool_states);
* what a failed run's report ends with: each failed task's last failure, retried or why not, and the nodes
  left out (launcher.rundir.retries).

SLURM's answers are fed as the text SLURM prints; where the product runs a SLURM command itself it is pointed
at an empty slurm.conf, so the command fails at once (no cluster is asked).
"""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from launcher.cluster.slurm import start_estimate
from launcher.cluster.slurm.start_estimate import Estimate, parse, usable
from launcher.reports import pool_claims
from launcher.reports.fault_origin import Verdict
from launcher.reports.pool_claims import Claims, Worker
from launcher.rundir import exclusions, pool_states, retries
from launcher.rundir.record import RecordedRun
from tests.helpers import wait_until
from trainer.rank import events
from trainer.runners import failures

# ----- --when: sbatch --test-only's answer ------------------------------------------------------------------

ANSWER = "sbatch: Job 123 to start at 2026-12-05T10:00:00 using 128 processors on nodes cpu[1-2] in partition debug"
AT = datetime.datetime(2026, 12, 5, 10, 0, 0).timestamp()  # as SLURM means it: the submitter's local time


def test_a_start_slurm_gives_is_shown_with_its_nodes_and_partition() -> None:
    """The start, nodes and partition --when shows for a variant SLURM can place (stdout first, as `estimate`
    joins them: the answer is on stderr)."""
    assert parse(f"\n{ANSWER}\n", 0) == Estimate(AT, "cpu[1-2]", "debug", "")
    later = ANSWER.replace("Job 123", "Job 98765").replace("10:00:00", "10:00:01")
    assert parse(later) == Estimate(AT + 1, "cpu[1-2]", "debug", "")


def test_partition_names_slurm_allows_are_kept_whole() -> None:
    """A partition name of letters, digits, dots, dashes and underscores is shown as SLURM wrote it."""
    found = parse(ANSWER.replace("partition debug", "partition gpu_a100.v2-x").replace("cpu[1-2]", "gpu01"))
    assert found == Estimate(AT, "gpu01", "gpu_a100.v2-x", "")


def test_a_start_slurm_does_not_know_is_no_start_but_keeps_where() -> None:
    """"Unknown" (no node frees up in SLURM's plan): no start, the nodes and partition still shown, and why."""
    found = parse(ANSWER.replace("2026-12-05T10:00:00", "Unknown"))
    assert found == Estimate(None, "cpu[1-2]", "debug", "SLURM gives no start time (Unknown)")


def test_a_refusal_is_its_last_line_without_sbatchs_prefix() -> None:
    """sbatch's refusal, as the user reads it in the --when table: its last line, without "sbatch: "."""
    said = ("sbatch: error: Memory specification can not be satisfied\n"
            "sbatch: error: Batch job submission failed: Requested node configuration is not available\n")
    assert parse(said, 1) == Estimate(error="error: Batch job submission failed: Requested node configuration is "
                                            "not available")


def test_an_empty_answer_says_sbatchs_exit_status() -> None:
    """sbatch said nothing: the error names its exit status (0 when none is given)."""
    assert parse(" \n\n", 3) == Estimate(error="sbatch --test-only exited 3")
    assert parse("") == Estimate(error="sbatch --test-only exited 0")


def test_node_and_partition_names_that_are_not_slurms_are_refused_by_name() -> None:
    """An answer naming a node list or partition SLURM could not have named is an error quoting it."""
    assert parse(ANSWER.replace("cpu[1-2]", "cpu[1-")) == Estimate(
        error="sbatch --test-only named nodes that are not a node list: 'cpu[1-'")
    assert parse(ANSWER.replace("partition debug", "partition de/bug")) == Estimate(
        error="sbatch --test-only named a partition that is not one: 'de/bug'")


def test_control_characters_of_an_answer_never_reach_the_terminal() -> None:
    """C0 and C1 control characters (and DEL) read as "?"; a space, "~" and a no-break space stay."""
    assert parse("sbatch: error: a\x00b\x1fc d~e\x7ff\x9fg\xa0h", 1) == Estimate(error="error: a?b?c d~e?f?g\xa0h")
    bad_start = ANSWER.replace("2026-12-05T10:00:00", "Unknown\x07")
    assert parse(bad_start) == Estimate(None, "cpu[1-2]", "debug", "SLURM gives no start time (Unknown?)")


@pytest.fixture
def no_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment `--when` hands SLURM's commands: an empty slurm.conf, so they fail at once. This
    process's own PATH finds no SLURM command: a command run without that environment fails otherwise."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("")
    env = {"PATH": os.environ.get("PATH", os.defpath), "SLURM_CONF": str(conf)}
    (tmp_path / "empty-bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setenv("SLURM_CONF", str(conf))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)  # gettempdir() reads TMPDIR again
    return env


def test_an_sbatch_that_cannot_read_its_configuration_says_so(no_cluster: dict[str, str], tmp_path: Path) -> None:
    """--when on a machine whose slurm.conf is unusable: SLURM's own last word, and no script left behind."""
    found = start_estimate.estimate("#!/bin/bash\n#SBATCH --nodes=2\nsrun true\n", no_cluster)
    assert found == Estimate(error="fatal: Unable to process configuration file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty-bin", "slurm.conf"]


def test_an_sbatch_that_is_not_installed_is_named(no_cluster: dict[str, str], tmp_path: Path) -> None:
    """--when where sbatch is not on PATH: one error naming the command, not a traceback."""
    found = start_estimate.estimate("#!/bin/bash\n", {**no_cluster, "PATH": str(tmp_path / "empty-bin")})
    assert found == Estimate(error="sbatch --test-only: [Errno 2] No such file or directory: 'sbatch'")


def test_partitions_are_none_where_scontrol_fails_or_is_missing(no_cluster: dict[str, str], tmp_path: Path) -> None:
    """No partition to compare (only the request as asked) when scontrol fails or is not installed."""
    assert start_estimate.partitions(no_cluster, "lab1") == []
    assert start_estimate.partitions({**no_cluster, "PATH": str(tmp_path / "empty-bin")}) == []


def test_a_group_id_with_no_group_entry_is_skipped() -> None:
    """A supplementary group id /etc/group does not name (common in containers) is left out, not a crash."""
    assert start_estimate._has_group(os.getgid()) is True
    assert start_estimate._has_group(2**31 - 7) is False


# `scontrol show partition -o` as SLURM 23.x prints it; a partition with DenyAccounts prints no AllowAccounts.
def partition(name: str, **fields: str) -> str:
    shown = {"PartitionName": name, "AllowGroups": "ALL", "AllowAccounts": "ALL", "AllowQos": "ALL",
             "AllocNodes": "ALL", "Default": "NO", "QoS": "N/A", "DefaultTime": "NONE", "DisableRootJobs": "NO",
             "ExclusiveUser": "NO", "GraceTime": "0", "Hidden": "NO", "MaxNodes": "UNLIMITED",
             "MaxTime": "UNLIMITED", "MinNodes": "0", "LLN": "NO", "MaxCPUsPerNode": "UNLIMITED",
             "Nodes": "cpu[1-4]", "PriorityJobFactor": "1", "PriorityTier": "1", "RootOnly": "NO",
             "ReqResv": "NO", "OverSubscribe": "NO", "OverTimeLimit": "NONE", "PreemptMode": "OFF",
             "State": "UP", "TotalCPUs": "8", "TotalNodes": "4", "SelectTypeParameters": "NONE",
             "JobDefaults": "(null)", "DefMemPerNode": "UNLIMITED", "MaxMemPerNode": "UNLIMITED",
             "TRES": "cpu=8,mem=7800M,node=4,billing=8", **fields}
    if "DenyAccounts" in fields:
        del shown["AllowAccounts"]
    return " ".join(f"{key}={value}" for key, value in shown.items())


def test_partitions_refused_by_each_rule_are_left_out_and_the_rest_kept_in_order() -> None:
    """Every partition --when compares: up, shown, open to the user's groups and account (a refused one first
    does not end the list)."""
    listed = "\n".join([
        partition("down", State="DOWN"), partition("drain", State="DRAIN"), partition("inactive", State="INACTIVE"),
        partition("hidden", Hidden="YES"), partition("admin", RootOnly="YES"),
        partition("vision", AllowGroups="vision,robots"), partition("paid", AllowAccounts="lab2,lab3"),
        partition("cpu", Default="YES"), partition("gpu", AllowGroups="ml,users"),
        partition("lab", AllowAccounts="lab0,lab1"), partition("denied", DenyAccounts="lab9"), "",
    ])
    assert usable(listed, {"users", "staff"}, "lab1") == ["cpu", "gpu", "lab", "denied"]
    assert usable(listed, {"robots"}, "lab3") == ["vision", "paid", "cpu", "denied"]


def test_root_may_use_a_root_only_partition_but_not_a_hidden_or_down_one() -> None:
    """RootOnly opens to root alone; Hidden and a state other than UP close a partition to root too."""
    listed = "\n".join([partition("hidden", Hidden="YES"), partition("admin", RootOnly="YES"),
                        partition("down", State="DOWN", RootOnly="YES"), partition("cpu")])
    assert usable(listed, {"root"}, "", root=True) == ["admin", "cpu"]
    assert usable(listed, {"root"}, "") == ["cpu"]


def test_without_an_account_the_account_check_is_left_to_slurm() -> None:
    """No account in the profile: a partition that allows only some accounts is still compared."""
    assert usable(partition("paid", AllowAccounts="lab2"), set(), "") == ["paid"]
    assert usable(partition("paid", AllowAccounts="lab2"), set(), "lab1") == []


# ----- a pool's points, as `status` shows them ----------------------------------------------------------------

GONE = "999999999"  # a worker id no process has


@pytest.fixture
def live_worker(tmp_path: Path) -> Iterator[str]:
    """A process that reads as a local pool worker of the run in tmp_path (local.controller_alive)."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "submitit.local._local",
                             str(tmp_path)], stdin=subprocess.PIPE)
    try:
        from launcher.cluster import local

        wait_until(lambda: local.controller_alive(str(proc.pid), tmp_path), 30, "the worker's command line", 0.01)
        yield str(proc.pid)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


def pool(run: Path, workers: list[str], tasks: int, executor: str = "local", **record: Any) -> RecordedRun:
    """A pool sweep's run.json as the submitter records it (each point's overrides; submitted at time 100)."""
    return RecordedRun(run, {"executor": executor, "tasks": tasks, "runner": "pool", "job_ids": workers,
                             "created": 100.0, "sweep_overrides": [{"seed": t} for t in range(tasks)], **record})


def held(run: Path, task: int, job_id: str) -> pool_claims.Record:
    """The point claimed by worker `job_id` (what its rank 0 writes when it takes it)."""
    taken = Claims(run, Worker(job_id)).take([task])
    assert taken is not None
    return taken[1]


def done(run: Path, task: int, job_id: str, outcome: dict[str, Any]) -> pool_claims.Record:
    worker = Claims(run, Worker(job_id))
    taken = worker.take([task])
    assert taken is not None and worker.finish(task, taken[1], outcome)
    record = pool_claims.newest(run, task)
    assert record is not None
    return record


def test_a_point_held_by_a_running_worker_is_running_since_its_claim(tmp_path: Path, live_worker: str) -> None:
    """The point a live worker holds: running, under that worker's id, since the time of its claim."""
    record = held(tmp_path, 0, live_worker)
    (state,) = pool_states.task_states(pool(tmp_path, [live_worker], 1), use_scheduler=False)
    assert (state.task, state.state, state.job_id, state.job_history) == (0, "running", live_worker, [live_worker])
    assert state.start == record.data["time"] and state.error == "" and state.source == "pool"
    assert state.task_dir == tmp_path / "task-0000" and state.restarts == 0


def test_points_wait_for_a_running_worker_whoever_had_them(tmp_path: Path, live_worker: str) -> None:
    """While a worker runs: a point never claimed is pending; one given back, or held by a worker that ended,
    is requeued (a worker takes it back), under the id of the worker that had it."""
    first = held(tmp_path, 1, GONE)
    Claims(tmp_path, Worker(GONE)).give_back(1, first, "preempted")
    held(tmp_path, 2, GONE)
    states = pool_states.task_states(pool(tmp_path, [GONE, live_worker], 3))
    assert [(s.state, s.job_id, s.job_history, s.error) for s in states] == [
        ("pending", "", [], ""), ("requeued", GONE, [GONE], ""), ("requeued", GONE, [GONE], "")]
    assert [s.reason for s in states] == ["", "", ""] and [s.expected_start for s in states] == [None] * 3
    assert pool_states.worker_states(pool(tmp_path, [GONE, live_worker], 3)).keys() == {live_worker}
    assert pool_states.active_workers(pool(tmp_path, [GONE, live_worker], 3)) == [live_worker]


def test_a_points_workers_are_listed_once_each_oldest_first(tmp_path: Path) -> None:
    """A point taken back and forth between workers lists each worker once, in the order they first held it;
    a record that only frees it adds none."""
    for job_id in ("11", "12", "11", "13"):
        record = held(tmp_path, 0, job_id)
        Claims(tmp_path, Worker(job_id)).give_back(0, record, "preempted")
    held(tmp_path, 0, "12")
    (state,) = pool_states.task_states(pool(tmp_path, ["11", "12", "13"], 1))
    assert state.job_history == ["11", "12", "13"] and state.job_id == "12"
    assert (state.state, state.error) == ("failed", "its pool worker 12 ended while running it")


def test_a_completed_point_shows_its_result_time_and_wall_time(tmp_path: Path, live_worker: str) -> None:
    """A point done with a result: completed, its metrics, when it ended and how long it ran (whatever the
    workers do now)."""
    record = done(tmp_path, 0, live_worker, {"outcome": "completed", "result": {"accuracy": 0.5}, "wall_time_s": 3.0})
    for run in (pool(tmp_path, [live_worker], 1), pool(tmp_path, [GONE], 1)):
        (state,) = pool_states.task_states(run)
        assert (state.state, state.result, state.wall_time_s) == ("completed", {"accuracy": 0.5}, 3.0)
        assert state.end == record.data["time"] and state.error == "" and state.failed_rank is None


def test_a_failed_point_shows_its_error_rank_and_what_that_rank_raised(tmp_path: Path) -> None:
    """A point done with a failure: failed, the worker's error line, the failing rank and what the user's
    function raised on that rank (not on another)."""
    task_dir = tmp_path / "task-0000"
    failures.write(str(task_dir), 0, "train", KeyError("rank 0's"))
    failures.write(str(task_dir), 1, "train", ValueError("shapes (3,) and (4,) do not match"))
    done(tmp_path, 0, "11", {"outcome": "failed", "error": "ValueError: shapes", "rank": 1, "wall_time_s": 2.5})
    (state,) = pool_states.task_states(pool(tmp_path, ["11"], 1))
    assert (state.state, state.error, state.failed_rank, state.wall_time_s) == ("failed", "ValueError: shapes", 1, 2.5)
    assert state.failure is not None and state.failure["type"] == "ValueError"
    assert state.failure["message"] == "shapes (3,) and (4,) do not match"


@pytest.mark.parametrize("outcome, error, rank, raised_by", [
    ({"outcome": "failed", "rank": 0}, "failed", 0, 0),  # no error line: "failed"
    ({"outcome": "failed", "error": "boom", "rank": True}, "boom", None, 0),  # a bool is no rank
    ({"outcome": "failed", "error": "boom", "rank": "1"}, "boom", None, 0),  # nor a string
    ({"outcome": "completed", "result": 0.5, "error": "no result"}, "no result", None, 0),  # a result that is no dict
    ({"outcome": "done", "result": {"accuracy": 1.0}}, "failed", None, 0),  # not "completed": not a success
])
def test_a_done_record_that_is_not_a_clean_result_is_a_failure(
        tmp_path: Path, outcome: dict[str, Any], error: str, rank: int | None, raised_by: int) -> None:
    """A done record without a usable result or rank: failed, and what the first failing rank raised."""
    task_dir = tmp_path / "task-0000"
    failures.write(str(task_dir), 1, "train", ValueError("second"))
    failures.write(str(task_dir), 0, "train", KeyError("first"))
    done(tmp_path, 0, "11", outcome)
    (state,) = pool_states.task_states(pool(tmp_path, ["11"], 1))
    assert (state.state, state.error, state.failed_rank, state.result) == ("failed", error, rank, None)
    assert state.failure is not None and state.failure["rank"] == raised_by


def test_a_cancelled_point_is_cancelled_even_while_workers_run(tmp_path: Path, live_worker: str) -> None:
    """`cancel RUN/task-NNNN`: that point reads cancelled, by the user's word, under the worker that held it."""
    held(tmp_path, 0, live_worker)
    pool_claims.cancel(tmp_path, 0)
    pool_claims.cancel(tmp_path, 1)
    states = pool_states.task_states(pool(tmp_path, [live_worker], 2))
    assert [(s.state, s.job_id, s.error) for s in states] == [
        ("cancelled", live_worker, "cancelled with `submit.py cancel`"),
        ("cancelled", "", "cancelled with `submit.py cancel`")]
    assert [s.job_history for s in states] == [[live_worker], []]  # a cancel is no worker's turn


def test_once_no_worker_is_left_points_not_done_failed_and_say_why(tmp_path: Path) -> None:
    """Every worker ended: a held point failed with its worker named, a free one failed as not run
    (`--resume` runs both); a done one keeps its result."""
    held(tmp_path, 0, "11")
    first = held(tmp_path, 2, "12")
    Claims(tmp_path, Worker("12")).give_back(2, first, "time limit")
    done(tmp_path, 3, "12", {"outcome": "completed", "result": {"loss": 0.1}})
    states = pool_states.task_states(pool(tmp_path, ["11", "12"], 4))
    assert [(s.state, s.job_id, s.error) for s in states] == [
        ("failed", "11", "its pool worker 11 ended while running it"),
        ("failed", "", "not run: the pool's workers ended"),
        ("failed", "12", "not run: the pool's workers ended"),
        ("completed", "12", "")]


@pytest.mark.parametrize("cancelled_at, resumes, expected", [
    (150.0, [], "cancelled"),  # `cancel RUN` after the submission
    (100.0, [], "cancelled"),  # in the very second of it
    (99.0, [], "failed"),  # a cancel before the submission is not this submission's
    (150.0, [{"time": 120.0}, {"time": 200.0}], "failed"),  # a --resume after the cancel: its workers just ended
    (200.0, [{"time": 200.0}, {"time": 120.0}], "cancelled"),  # the newest submission counts, whatever the order
])
def test_points_of_a_cancelled_run_are_cancelled_unless_submitted_again(
        tmp_path: Path, cancelled_at: float, resumes: list[dict[str, float]], expected: str) -> None:
    """`cancel RUN` with no worker left: the points not done read cancelled, held or not, unless a --resume
    sent the run again after the cancel."""
    held(tmp_path, 0, "11")
    run = pool(tmp_path, ["11"], 2, cancelled_at=cancelled_at, resumes=resumes)
    errors = {"cancelled": ["cancelled with `submit.py cancel`"] * 2,
              "failed": ["its pool worker 11 ended while running it", "not run: the pool's workers ended"]}
    assert [(s.state, s.error) for s in pool_states.task_states(run)] == [(expected, e) for e in errors[expected]]


def test_a_run_with_no_submission_time_is_never_read_as_cancelled(tmp_path: Path) -> None:
    """No submission time recorded: a cancel time alone does not make its points cancelled."""
    run = pool(tmp_path, ["11"], 1, created=None, cancelled_at=0)
    assert [s.state for s in pool_states.task_states(run)] == ["failed"]


def test_each_point_keeps_its_own_overrides(tmp_path: Path) -> None:
    """A point shows the overrides of its own sweep point ({} past the recorded ones)."""
    run = pool(tmp_path, ["11"], 3, sweep_overrides=[{"lr": 0.1}, {"lr": 0.2}])
    assert [s.overrides for s in pool_states.task_states(run)] == [{"lr": 0.1}, {"lr": 0.2}, {}]
    assert [s.task for s in pool_states.task_states(run)] == [0, 1, 2]


def test_a_points_restarts_are_the_attempts_its_events_count_once_it_was_held(tmp_path: Path) -> None:
    """Restarts as a task's: from the point's events.jsonl, and none for a point no worker ever held."""
    for task in (0, 1):
        for job_id in ("11", "11", "12"):
            events.append(tmp_path / f"task-{task:04d}", "started", job_id=job_id)
    done(tmp_path, 0, "12", {"outcome": "completed", "result": {}})
    states = pool_states.task_states(pool(tmp_path, ["11", "12"], 2))
    assert [(s.state, s.restarts) for s in states] == [("completed", 2), ("failed", 0)]


def test_a_slurm_pool_whose_scheduler_cannot_be_asked_has_no_worker(tmp_path: Path) -> None:
    """A SLURM pool where sacct and squeue fail (an unusable slurm.conf), or that is read without asking
    them: no worker counts as running, so its held points read failed, and its done ones keep their result."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("")
    held(tmp_path, 0, "41_0")
    done(tmp_path, 1, "41_1", {"outcome": "completed", "result": {"accuracy": 0.9}})
    run = pool(tmp_path, ["41_0", "41_1"], 2, executor="slurm", profile={"slurm_conf": str(conf)})
    assert run.slurm_conf == str(conf)
    assert pool_states.worker_states(run) == {} and pool_states.worker_states(run, use_scheduler=False) == {}
    for use_scheduler in (True, False):
        assert [s.state for s in pool_states.task_states(run, use_scheduler)] == ["failed", "completed"]
    assert pool_states.worker_ids(run) == ["41_0", "41_1"]


def test_workers_of_a_local_pool_are_its_live_controllers(tmp_path: Path, live_worker: str) -> None:
    """A local pool's workers: the ids recorded (as strings) whose controller process still runs, as running;
    none for a run of another executor or with no ids."""
    run = pool(tmp_path, [int(live_worker), GONE], 1)
    assert pool_states.worker_ids(run) == [live_worker, GONE]
    (worker,) = pool_states.worker_states(run, use_scheduler=False).values()
    assert (worker.job_id, worker.state, worker.slurm_state) == (live_worker, "running", "RUNNING")
    assert pool_states.worker_states(pool(tmp_path, [live_worker], 1, executor="debug")) == {}
    assert pool_states.worker_ids(pool(tmp_path, [], 1, job_ids=None)) == []


# ----- the retry step's notes: what a failed run's report ends with ---------------------------------------------

def failure(task_dir: Path, origin: str, error: str, why: str, retry: bool, job_id: str = "7") -> None:
    """A "failure" event as the retry step records it (launcher.heal.attempt)."""
    events.append(task_dir, retries.FAILURE_EVENT, job_id=job_id, origin=origin, error=error, why=why, retry=retry)


def test_status_notes_each_failed_tasks_last_failure_then_the_nodes_left_out(tmp_path: Path) -> None:
    """`status` of a failed sweep: per failed task, where its last failure came from and whether it was
    retried; a task with no failure recorded says nothing; then each node left out (or not) and why."""
    first, second, quiet = tmp_path / "task-0000", tmp_path / "task-0002", tmp_path / "task-0003"
    failure(first, "node", "NCCL timeout", "retry 1 of 2: a node failure (cpu4)", True)
    events.append(first, "started", job_id="7")
    failure(first, "code", "ValueError: bad", "not retried: the same ValueError at a.py:3 as on an earlier attempt",
            False)
    events.append(first, "finished")
    failure(second, "stop", "killed at start-up", "retry 1 of 2: the stop signal came before the ranks could take it",
            True)
    events.append(quiet, "started", job_id="7")
    exclusions.add(tmp_path, "cpu4", "rank 1: NCCL timeout", task=0, job_id="7")
    exclusions.add(tmp_path, "cpu3", "rank 0: Killed", task=2, pinned=("cpu3",))
    assert retries.notes(tmp_path, [(0, first), (2, second), (3, quiet)]) == [
        ("task 0: the last failure came from the code (ValueError: bad); not retried: the same ValueError at a.py:3 "
         "as on an earlier attempt"),
        ("task 2: the last failure came from the stop (killed at start-up); retry 1 of 2: the stop signal came before "
         "the ranks could take it"),
        "left out: node cpu4 (task 0, job 7: rank 1: NCCL timeout)",
        "not left out: node cpu3 (task 2, job ?: rank 0: Killed): the job asks for it by name (sbatch_extra.nodelist)",
    ]
    assert retries.notes(tmp_path / "elsewhere", []) == []


def test_a_single_runs_last_words_have_no_task_prefix(tmp_path: Path) -> None:
    """A failed single run's report ends with its last failure (no "task N: ") and the nodes it left out."""
    failure(tmp_path, "node", "Killed", "retry 1 of 2: a node failure (cpu4)", True)
    exclusions.add(tmp_path, "cpu4", "rank 1: Killed", job_id="7")
    assert retries.last_words(tmp_path) == [
        "the last failure came from the node (Killed); retry 1 of 2: a node failure (cpu4)",
        "left out: node cpu4 (task 0, job 7: rank 1: Killed)"]


def test_a_sweep_tasks_last_words_name_the_task_and_the_runs_nodes(tmp_path: Path) -> None:
    """A sweep task's last words name the task and list the nodes of the whole run (its top folder)."""
    task_dir = tmp_path / "task-0005"
    failure(task_dir, "code", "KeyError: 'x'", "not retried: max_failures is 0", False)
    exclusions.add(tmp_path, "gpu2", "rank 3: Xid 79", task=5, job_id="8_5")
    exclusions.add(task_dir, "gpu9", "never read: not the run's list", task=5)
    assert retries.last_words(task_dir, tmp_path, 5) == [
        "task 5: the last failure came from the code (KeyError: 'x'); not retried: max_failures is 0",
        "left out: node gpu2 (task 5, job 8_5: rank 3: Xid 79)"]
    assert retries.last_words(tmp_path / "task-0006", tmp_path, 6) == [
        "left out: node gpu2 (task 5, job 8_5: rank 3: Xid 79)"]


# ----- the retry step's decision -----------------------------------------------------------------------------

CODE = Verdict("code", 0, "ValueError: bad", signature="ValueError at /proj/train.py:41")
NODE = Verdict("node", 1, "Killed", nodes=("cpu3", "cpu4"))
STOP = Verdict("stop", 0, "killed by SIGUSR1")


def decide(verdict: Verdict, log: list[dict[str, Any]], max_failures: int = 3, first_attempt: bool = False,
           reached_first_step: bool = True) -> retries.Decision:
    return retries.decide(verdict, log, "7", max_failures, first_attempt=first_attempt,
                          reached_first_step=reached_first_step)


def event(retry: bool, job_id: str | int = "7", origin: str = "node", signature: str = "",
          name: str = "failure") -> dict[str, Any]:
    return {"event": name, "retry": retry, "job_id": job_id, "origin": origin, "signature": signature}


def test_retries_are_counted_per_job_and_only_those_that_were_retried() -> None:
    """"retry N of M": N counts this job's failures that were retried (its id as text or number), not another
    job's (an earlier submission), not one that was not retried, not another event."""
    log = [event(True), event(True, 7), event(False), event(True, "8"), event(True, name="stopped")]
    assert decide(NODE, log) == retries.Decision(True, "retry 3 of 3: a node failure (cpu3, cpu4)")
    assert decide(NODE, log[:2], max_failures=2) == retries.Decision(
        False, "not retried: retried 2 time(s) already (max_failures 2)")
    assert decide(NODE, log[:1], max_failures=2) == retries.Decision(True, "retry 2 of 2: a node failure (cpu3, cpu4)")


@pytest.mark.parametrize("max_failures", [0, -1])
def test_no_retry_when_the_profile_allows_none(max_failures: int) -> None:
    """max_failures 0 (or less): no failure is retried, a node's neither."""
    assert decide(NODE, [], max_failures) == retries.Decision(False, "not retried: max_failures is 0")


def test_one_retry_allowed_is_one_retry() -> None:
    """max_failures 1: the first failure is retried, the second is not."""
    assert decide(STOP, [], 1) == retries.Decision(
        True, "retry 1 of 1: the stop signal came before the ranks could take it")
    assert decide(CODE, [event(True)], 1).retry is False


@pytest.mark.parametrize("first_attempt, reached_first_step, retried", [
    (True, False, False), (True, True, True), (False, False, True), (False, True, True)])
def test_a_bug_is_retried_unless_it_struck_before_the_first_step_of_the_first_attempt(
        first_attempt: bool, reached_first_step: bool, retried: bool) -> None:
    """The code's failure before any step of the run's first attempt is the user's bug: not retried."""
    expected = retries.Decision(True, "retry 1 of 3: from the newest checkpoint") if retried else retries.Decision(
        False, "not retried: it failed before the first step of the run's first attempt (a bug in the code or its "
               "input, not worth retrying)")
    assert decide(CODE, [], first_attempt=first_attempt, reached_first_step=reached_first_step) == expected


def test_a_node_failure_or_early_stop_is_retried_even_before_the_first_step() -> None:
    """Not the user's bug: retried whenever it happens."""
    assert decide(NODE, [], first_attempt=True, reached_first_step=False).retry is True
    assert decide(STOP, [], first_attempt=True, reached_first_step=False).retry is True


def test_the_same_bug_as_the_last_code_failure_is_not_retried() -> None:
    """A code failure with the signature of the newest earlier code failure (not an older one, not a node's)
    is not retried."""
    same = retries.Decision(False, "not retried: the same ValueError at /proj/train.py:41 as on an earlier attempt")
    assert decide(CODE, [event(True, origin="code", signature=CODE.signature)]) == same
    other_since = [event(True, origin="code", signature=CODE.signature),
                   event(True, origin="code", signature="KeyError")]
    assert decide(CODE, other_since) == retries.Decision(True, "retry 3 of 3: from the newest checkpoint")
    node_since = [event(True, origin="code", signature="KeyError"),
                  event(True, origin="node", signature=CODE.signature)]
    assert decide(CODE, node_since).retry is True
    assert decide(CODE, [event(True, origin="code", signature=CODE.signature), event(True)]) == same


def test_failures_without_a_signature_are_never_the_same() -> None:
    """A code failure with no signature (no frame found) is retried even after another with none."""
    blank = Verdict("code", 0, "Segmentation fault")
    assert decide(blank, [event(True, origin="code", signature="")]) == retries.Decision(
        True, "retry 2 of 3: from the newest checkpoint")
