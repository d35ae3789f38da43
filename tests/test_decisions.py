"""The newer surfaces' decisions, called directly in this process (fast, and what the mutation check of
tests/mutation.py runs against them), beside the SLURM tests that take the same paths end to end:

* the retry step's move before an attempt: an attempt that landed on a node the run leaves out moves, a pinned
  node and a job that moved often enough stay (launcher.heal.attempt.before);
* a pool's claims: a live worker's beat keeps its point, a dead one's point is taken back, a requeued worker
  takes its own point back at once, `--resume` reopens a failed point and `cancel` ends one for good
  (launcher.reports.pool_claims);
* each point's state as `status` shows it, from the claims and the workers alive (launcher.rundir.pool_states).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.cluster import local
from launcher.reports import pool_claims
from launcher.reports.pool_claims import Claims, Worker
from launcher.cluster.slurm.healing import MOVED_EXIT, RetryPolicy
from launcher.heal import attempt
from launcher.rundir import exclusions, pool_states
from launcher.rundir.record import RecordedRun
from tests.helpers import wait_until
from trainer.rank import events


def policy(run: Path, pinned: str = "") -> RetryPolicy:
    return RetryPolicy(run=str(run), max_failures=2, patterns=(), partition="cpu", nodes=2, tasks_per_node=1,
                       cpus_per_task=1, mem_per_node_mb=0, gpus_per_node=0, gpu_type="", pinned=pinned,
                       stop_signal="USR2")


@pytest.fixture
def no_controller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """scontrol answers at once that it has no cluster (an empty config: a missing one is retried for a minute):
    the move is tried, and fails, without a scheduler."""
    empty = tmp_path / "empty-slurm.conf"
    empty.write_text("")
    monkeypatch.setenv("SLURM_CONF", str(empty))


def landed(nodes: str, job: str = "4242") -> dict[str, str]:
    return {"SLURM_JOB_ID": job, "SLURM_JOB_NODELIST": nodes, "SLURM_RESTART_COUNT": "0"}


def test_an_attempt_on_a_left_out_node_tries_to_move_and_says_why_it_stays(
        tmp_path: Path, no_controller: None, capsys: pytest.CaptureFixture[str]) -> None:
    exclusions.add(tmp_path, "cpu2", "ECC")
    assert attempt.before(policy(tmp_path), landed("cpu[1-2]")) == 0  # the requeue failed: it stays
    said = capsys.readouterr().out
    assert "this attempt landed on cpu2, which the run leaves out, and stays: scontrol requeue 4242 failed" in said
    assert "cpu1" not in said.split("landed on")[1].split(",")[0]  # only the left-out node is named


def test_an_attempt_on_usable_or_pinned_nodes_does_not_move(
        tmp_path: Path, no_controller: None, capsys: pytest.CaptureFixture[str]) -> None:
    exclusions.add(tmp_path, "cpu2", "ECC")
    assert attempt.before(policy(tmp_path), landed("cpu[3-4]")) == 0
    assert attempt.before(policy(tmp_path, pinned="cpu2"), landed("cpu[1-2]")) == 0  # named by nodelist: stays
    assert "landed on" not in capsys.readouterr().out


def test_a_job_that_moved_often_enough_stays_without_asking(
        tmp_path: Path, no_controller: None, capsys: pytest.CaptureFixture[str]) -> None:
    exclusions.add(tmp_path, "cpu2", "ECC")
    for _ in range(attempt.MOST_MOVES - 1):
        events.append(tmp_path, "moved", job_id="4242", nodes=["cpu2"])
    events.append(tmp_path, "moved", job_id="other", nodes=["cpu2"])  # another job's moves do not count
    attempt.before(policy(tmp_path), landed("cpu2"))
    assert "landed on cpu2" in capsys.readouterr().out  # one move left: tried
    events.append(tmp_path, "moved", job_id="4242", nodes=["cpu2"])
    assert attempt.before(policy(tmp_path), landed("cpu2")) == 0
    assert "landed on" not in capsys.readouterr().out
    assert MOVED_EXIT != 0


def test_a_live_workers_beat_keeps_its_point_and_a_dead_ones_point_is_taken_back(tmp_path: Path) -> None:
    holder, other = Claims(tmp_path, Worker("11")), Claims(tmp_path, Worker("12"), lease_s=0.0)
    task, record, taken_back = holder.take([0, 1]) or (None, None, None)
    assert (task, taken_back) == (0, False) and record is not None
    holder.beat(0, record, 1)
    assert other.take([0]) is None  # first look at its beat: alive
    holder.beat(0, record, 2)
    assert other.take([0]) is None  # the beat changed since: alive, whatever the lease
    taken = other.take([0])  # unchanged since the last look, for the (zero) lease: its holder is dead
    assert taken is not None and taken[0] == 0 and taken[2] is True and taken[1].job_id == "12"
    assert pool_claims.superseded(tmp_path, 0, record) == taken[1]
    assert not holder.finish(0, record, {"outcome": "completed", "result": {}})  # the newer holder ends it


def test_a_requeued_worker_takes_its_own_point_back_at_once(tmp_path: Path) -> None:
    first_life = Claims(tmp_path, Worker("11", life="a"))
    assert first_life.take([0]) is not None
    same_life, next_life = Claims(tmp_path, Worker("11", life="a")), Claims(tmp_path, Worker("11", life="b"))
    assert same_life.take([0]) is None
    back = next_life.take([0])
    assert back is not None and back[2] is True


def test_resume_reopens_a_failed_point_and_cancel_ends_one(tmp_path: Path) -> None:
    worker = Claims(tmp_path, Worker("11"))
    _, record, _ = worker.take([0]) or (0, None, False)
    assert record is not None and worker.finish(0, record, {"outcome": "failed", "error": "boom", "rank": 0})
    assert Claims(tmp_path, Worker("12")).take([0]) is None  # done: nobody takes it
    pool_claims.reopen(tmp_path, 0)
    again = Claims(tmp_path, Worker("12")).take([0])
    assert again is not None and again[2] is False  # free again, not taken from anyone
    assert pool_claims.cancel(tmp_path, 0) is not None and pool_claims.cancel(tmp_path, 0) is None
    assert Claims(tmp_path, Worker("13")).take([0]) is None
    assert Claims(tmp_path, Worker("13")).unfinished([0]) is False


@pytest.fixture
def live_worker(tmp_path: Path) -> Iterator[str]:
    """A process that reads as a local pool worker of the run in tmp_path (local.controller_alive)."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "submitit.local._local",
                             str(tmp_path)], stdin=subprocess.PIPE)
    try:
        # Until its command line reads as one (/proc shows an empty one for a moment while the process starts).
        wait_until(lambda: local.controller_alive(str(proc.pid), tmp_path), 30, "the worker's command line")
        yield str(proc.pid)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)


def pool(run: Path, executor: str, workers: list[str], tasks: int = 5) -> RecordedRun:
    return RecordedRun(run, {"executor": executor, "tasks": tasks, "runner": "pool", "job_ids": workers,
                             "created": 1.0})


def test_each_points_state_while_a_worker_runs(tmp_path: Path, live_worker: str) -> None:
    alive, dead = Claims(tmp_path, Worker(live_worker)), Claims(tmp_path, Worker("999999999"))
    _, running, _ = alive.take([0]) or (0, None, False)
    _, done, _ = alive.take([1]) or (0, None, False)
    assert running is not None and done is not None
    alive.finish(1, done, {"outcome": "completed", "result": {"accuracy": 0.5}, "wall_time_s": 3.0})
    assert dead.take([2]) is not None  # held by a worker that is gone
    pool_claims.cancel(tmp_path, 3)
    states = pool_states.task_states(pool(tmp_path, "local", [live_worker, "999999999"]))
    assert [s.state for s in states] == ["running", "completed", "requeued", "cancelled", "pending"]
    assert states[0].job_id == live_worker and states[1].result == {"accuracy": 0.5}
    assert states[1].wall_time_s == 3.0 and states[2].job_history == ["999999999"]
    assert pool_states.active_workers(pool(tmp_path, "local", [live_worker, "999999999"])) == [live_worker]


def test_each_points_state_once_no_worker_is_left(tmp_path: Path) -> None:
    gone = Claims(tmp_path, Worker("999999999"))
    _, held, _ = gone.take([0]) or (0, None, False)
    _, failed, _ = gone.take([1]) or (0, None, False)
    assert held is not None and failed is not None
    gone.finish(1, failed, {"outcome": "failed", "error": "ValueError: bad", "rank": 1, "text": "Traceback ..."})
    states = pool_states.task_states(pool(tmp_path, "local", ["999999999"], tasks=3))
    assert [s.state for s in states] == ["failed", "failed", "failed"]
    assert states[0].error == "its pool worker 999999999 ended while running it"
    assert states[1].error == "ValueError: bad" and states[1].failed_rank == 1
    assert states[2].error == "not run: the pool's workers ended"
    cancelled = pool(tmp_path, "local", ["999999999"], tasks=3)
    cancelled.record["cancelled_at"] = 2.0  # `cancel RUN` after its last submission: not run, by the user's word
    assert [s.state for s in pool_states.task_states(cancelled)][2] == "cancelled"


# ----- the retry step after srun ended with an error (launcher.heal.attempt.after) ----------------------------

USER_BUG = ("Job (task=0) failed during processing with trace:\n----------------------\n"
            "Traceback (most recent call last):\n  File \"/home/me/proj/train.py\", line 41, in f\n    x()\n"
            "ValueError: shapes (3,) and (4,) do not match\n----------------------\n")
PEER_LOST = ("Job (task=1) failed during processing with trace:\n----------------------\n"
             "Traceback (most recent call last):\n  File \"/usr/lib/python3/site-packages/torch/c10d.py\", line 9, "
             "in f\n    x()\nRuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer\n"
             "----------------------\n")


def failed_attempt(run: Path, results: dict[int, tuple[str, str] | None], killed_line: str = "",
                   stepped: bool = False) -> dict[str, str]:
    """An attempt of job 7 on cpu[3-4] as the retry step finds it after srun: each rank's log and result pickle
    (None: the rank left none), its "started" event, the trainer's first-step mark if it took one."""
    import json
    import pickle
    import time

    from launcher.reports import rank_notes
    from launcher.heal.facts import TIMING_DIR, note_start

    environ = {**landed("cpu[3-4]", "7"), "SLURM_NTASKS_PER_NODE": "1", "SLURM_NTASKS": "2"}
    folder = run / "logs" / "7"
    folder.mkdir(parents=True)
    for rank in results:
        (folder / f"7_{rank}_log.err").write_text("")
        (folder / f"7_{rank}_log.out").write_text("")
    note_start(run, "7", 0)
    events.append(run, "started", job_id="7", slurm_restart_count=0)
    for rank, node in ((0, "cpu3"), (1, "cpu4")):
        rank_notes.write_place(folder, rank, node)
    (folder / "7_0_log.err").write_text(killed_line)
    for rank, result in results.items():
        if result is not None:
            with open(folder / f"7_{rank}_result.pkl", "wb") as fh:
                pickle.dump(result, fh)
    if stepped:
        (run / TIMING_DIR).mkdir(parents=True, exist_ok=True)
        (run / TIMING_DIR / "rank-0.json").write_text(json.dumps({"first_step": time.time()}))
    return environ


def last_failure(run: Path) -> dict[str, object]:
    return [e for e in events.read(run) if e["event"] == "failure"][-1]


def test_a_bug_before_the_first_step_of_the_first_attempt_is_not_retried(tmp_path: Path, no_controller: None) -> None:
    environ = failed_attempt(tmp_path, {0: ("error", USER_BUG), 1: ("error", PEER_LOST)})
    assert attempt.after(1, policy(tmp_path), environ) == 1  # srun's status: the job ends failed
    failure = last_failure(tmp_path)
    assert failure["origin"] == "code" and failure["retry"] is False and "before the first step" in str(failure["why"])
    assert exclusions.excluded(tmp_path) == []


def test_a_bug_after_the_first_step_is_retried_in_the_allocation(tmp_path: Path, no_controller: None,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from launcher.cluster.slurm.healing import RERUN_EXIT

    environ = failed_attempt(tmp_path, {0: ("error", USER_BUG), 1: ("error", PEER_LOST)}, stepped=True)
    assert attempt.after(1, policy(tmp_path), environ) == RERUN_EXIT
    failure = last_failure(tmp_path)
    assert failure["retry"] is True and failure["in_place"] is True and failure["rank"] == 0
    assert "in this allocation" in capsys.readouterr().out
    # The same bug again, on the retry: not retried a second time.
    events.append(tmp_path, "started", job_id="7", slurm_restart_count=0)
    assert attempt.after(1, policy(tmp_path), environ) == 1
    assert last_failure(tmp_path)["retry"] is False and "the same" in str(last_failure(tmp_path)["why"])


def test_a_killed_rank_leaves_its_node_out_and_the_job_is_requeued_without_it(
        tmp_path: Path, no_controller: None, capsys: pytest.CaptureFixture[str]) -> None:
    environ = failed_attempt(tmp_path, {0: ("error", PEER_LOST), 1: None}, killed_line="srun: error: cpu4: task 1: Killed\n")
    assert attempt.after(1, policy(tmp_path), environ) == 1  # the requeue failed (no controller): it ends failed
    failure = last_failure(tmp_path)
    assert failure["origin"] == "node" and failure["retry"] is True and failure["in_place"] is False
    assert exclusions.excluded(tmp_path) == ["cpu4"] and failure["excluded"] == ["cpu4"]
    assert "scontrol requeue 7 failed" in capsys.readouterr().out


def test_a_job_whose_ranks_all_returned_or_that_was_stopped_is_not_a_failure(tmp_path: Path, no_controller: None) -> None:
    done = ("success", {"accuracy": 1.0})
    environ = failed_attempt(tmp_path, {0: done, 1: done})
    assert attempt.after(143, policy(tmp_path), environ) == 0  # a signal after every rank returned: done
    events.append(tmp_path, "stopped", kind="requeue", step=3)
    assert attempt.after(143, policy(tmp_path), environ) == 143  # the stop signal ended it: submitit's to handle
    assert [e for e in events.read(tmp_path) if e["event"] == "failure"] == []
