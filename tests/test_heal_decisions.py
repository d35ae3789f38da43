"""The retry step's decisions (launcher.heal: `before` and `after` srun, and the facts they read of an attempt's
run folder), called directly in this process: fast, and what the mutation check of tests/mutation.py runs
against launcher/heal/attempt.py and launcher/heal/facts.py. tests/test_decisions.py has the first few;
tests/test_self_healing.py takes the same paths end to end on the SLURM dev cluster.

The run folders are written as the node writes them (submitit's logs and result pickles, the tasks' place notes,
events.jsonl, the trainer's start-up marks, submitit's pickle of the submitted task). The SLURM commands the step
asks (sacct, scontrol) are small stand-in scripts first on PATH that print what a real one prints for the case
(`SlurmAnswers`), with an empty SLURM_CONF behind them: no cluster is reached. A command not given an answer fails
as one whose controller is down does.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from launcher.cluster.slurm.healing import MOVED_EXIT, RERUN_EXIT, RERUN_VARIABLE, RetryPolicy
from launcher.heal import attempt, facts
from launcher.reports import rank_notes
from launcher.reports.fault_origin import RankEnd
from launcher.rundir import exclusions
from launcher.rundir.layout import job_log_dir
from trainer.config.lookup import CODE_ROOT
from trainer.rank import events
from trainer.rank.rundir import TIMING_DIR

UNREACHABLE = "scontrol: error: Unable to contact slurm controller (connect failure)"
STAND_IN = """#!/bin/sh
dir='{dir}'
name=$(basename "$0")
printf '%s\\n' "$name $*" >> "$dir/calls"
for key in "$(printf '%s' "$name $*" | tr -c 'A-Za-z0-9' '_')" "$name"; do
  if [ -f "$dir/$key.out" ]; then
    cat "$dir/$key.out"; [ -f "$dir/$key.err" ] && cat "$dir/$key.err" >&2
    exit "$(cat "$dir/$key.rc")"
  fi
done
echo "$name: error: Unable to contact slurm controller (connect failure)" >&2
exit 1
"""


class SlurmAnswers:
    """What sacct and scontrol answer in a test: `answer("scontrol requeue 7")` (the whole command line, or
    the command's name for any arguments); `calls`: every command line asked, in order."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def answer(self, command: str, out: str = "", rc: int = 0, err: str = "") -> None:
        key = re.sub(r"[^A-Za-z0-9]", "_", command)
        (self.folder / f"{key}.out").write_text(out)
        (self.folder / f"{key}.err").write_text(err)
        (self.folder / f"{key}.rc").write_text(str(rc))

    def calls(self) -> list[str]:
        path = self.folder / "calls"
        return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SlurmAnswers:
    folder = tmp_path / "slurm"
    folder.mkdir()
    for name in ("sacct", "scontrol"):
        script = folder / name
        script.write_text(STAND_IN.format(dir=folder))
        script.chmod(0o755)
    empty = tmp_path / "empty-slurm.conf"
    empty.write_text("")
    monkeypatch.setenv("SLURM_CONF", str(empty))
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    return SlurmAnswers(folder)


# ----- the run folder as the node writes it ---------------------------------------------------------------

def policy(run: Path, pinned: str = "", max_failures: int = 2, patterns: tuple[str, ...] = ()) -> RetryPolicy:
    return RetryPolicy(run=str(run), max_failures=max_failures, patterns=patterns, partition="cpu", nodes=2,
                       tasks_per_node=1, cpus_per_task=1, mem_per_node_mb=0, gpus_per_node=0, gpu_type="",
                       pinned=pinned, stop_signal="USR2")


def job_env(job: str = "7", nodes: str = "cpu[3-4]", restart: int = 0, **more: str) -> dict[str, str]:
    return {"SLURM_JOB_ID": job, "SLURM_JOB_NODELIST": nodes, "SLURM_RESTART_COUNT": str(restart),
            "SLURM_NTASKS_PER_NODE": "1", "SLURM_NTASKS": "2", **more}


def traceback_of(exception: str, *frames: tuple[str, int]) -> str:
    """A rank's error as submitit's result pickle carries it."""
    lines = "".join(f'  File "{path}", line {line}, in f\n    x()\n' for path, line in frames)
    return (f"Job (task=0) failed during processing with trace:\n----------------------\n"
            f"Traceback (most recent call last):\n{lines}{exception}\n----------------------\n")


USER_BUG = traceback_of("ValueError: shapes (3,) and (4,) do not match", ("/home/me/proj/train.py", 41))
PEER_LOST = traceback_of("RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer",
                         ("/usr/lib/python3/site-packages/torch/c10d.py", 9))
KILLED = "srun: error: cpu4: task 1: Killed\n"


def started_attempt(run: Path, job: str = "7", restart: int = 0, places: tuple[str, ...] = ("cpu3", "cpu4"),
                    task_dir: Path | None = None) -> Path:
    """An attempt as `before` and the ranks leave it at its start: each rank's log (empty), the attempt's marks
    (facts.note_start), each task's place note and rank 0's "started" event. Returns the job's log folder."""
    folder = job_log_dir(run, job)
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(len(places)):
        for stream in ("err", "out"):
            (folder / f"{job}_{rank}_log.{stream}").touch()
    facts.note_start(run, job, restart)
    events.append(task_dir or run, "started", job_id=job, slurm_restart_count=restart)
    for rank, node in enumerate(places):
        rank_notes.write_place(folder, rank, node)
    return folder


def append(path: Path, text: str) -> None:
    with open(path, "a") as fh:
        fh.write(text)


def result(folder: Path, job: str, rank: int, kind: str, value: Any, mtime: float | None = None) -> None:
    path = folder / f"{job}_{rank}_result.pkl"
    with open(path, "wb") as fh:
        pickle.dump((kind, value), fh)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def failed_ranks(folder: Path, rank0: tuple[str, Any] | None = ("error", USER_BUG),
                 rank1: tuple[str, Any] | None = ("error", PEER_LOST), srun: str = "") -> None:
    """What an attempt that failed leaves: the ranks' result pickles (None: none), srun's lines in rank 0's log."""
    for rank, ended in enumerate((rank0, rank1)):
        if ended is not None:
            result(folder, folder.name, rank, *ended)
    append(folder / f"{folder.name}_0_log.err", srun)


def stepped(task_dir: Path, at: float) -> None:
    """The trainer's start-up marks of rank 0 (trainer.rank.timing): its first step at `at`."""
    (task_dir / TIMING_DIR).mkdir(parents=True, exist_ok=True)
    (task_dir / TIMING_DIR / "rank-0.json").write_text(json.dumps({"rank": 0, "first_step": at}))


def failures(task_dir: Path) -> list[dict[str, Any]]:
    """The task's "failure" events, without their times."""
    return [{k: v for k, v in e.items() if k != "time"} for e in events.read(task_dir) if e["event"] == "failure"]


def left_out(run: Path) -> list[dict[str, Any]]:
    """The run's exclusion list, without the entries' times."""
    return [{k: v for k, v in e.items() if k != "time"} for e in exclusions.read(run)]


def said(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.splitlines()


def failure(restart: int = 0, **fields: Any) -> dict[str, Any]:
    """A failure event as `after` writes it, the given fields over a code failure of rank 0's USER_BUG."""
    return {"event": "failure", "job_id": "7", "restart": restart, "origin": "code", "rank": 0,
            "error": "ValueError: shapes (3,) and (4,) do not match", "nodes": [],
            "signature": "ValueError at /home/me/proj/train.py:41", "evidence": "", **fields}


def job_record(state: str = "RUNNING", left_s: float | None = None) -> str:
    """`scontrol show job -o 7` of a running job (EndTime: its time limit's end, `left_s` from now)."""
    end = "Unknown" if left_s is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + left_s))
    return (f"JobId=7 JobName=train UserId=me(1000) JobState={state} Reason=None Requeue=1 Restarts=0 "
            f"TimeLimit=01:00:00 EndTime={end} NodeList=cpu[3-4] ExcNodeList=(null)\n")


# ----- facts: what an attempt left in the run folder -------------------------------------------------------

def test_the_rerun_count_is_a_plain_number_else_none() -> None:
    """How many times the batch script ran itself again in its allocation: only digits count."""
    assert facts.rerun({RERUN_VARIABLE: "3"}) == 3
    assert facts.rerun({RERUN_VARIABLE: "0"}) == 0
    assert [facts.rerun(e) for e in ({}, {RERUN_VARIABLE: ""}, {RERUN_VARIABLE: "x"}, {RERUN_VARIABLE: "-1"})] == \
        [0, 0, 0, 0]
    assert RERUN_VARIABLE == "DDP_SUBMIT_RERUN"


def test_an_attempts_marks_hold_each_logs_size_at_its_start_and_return_the_previous_ones(tmp_path: Path) -> None:
    """`before` notes where each log of this attempt starts (only the logs), and hands back the previous attempt's
    marks; with no job folder yet (a first attempt), nothing is written."""
    path = facts.marks_path(tmp_path, "7")
    assert path == tmp_path / "logs" / "7" / "7_attempt.json"
    assert facts.note_start(tmp_path, "7", 0) == {} and not path.exists()
    folder = job_log_dir(tmp_path, "7")
    folder.mkdir(parents=True)
    (folder / "7_0_log.out").write_text("hello")
    (folder / "7_0_log.err").write_text("err")
    (folder / "7_1_log.out").write_text("")
    (folder / "7_submitted.pkl").write_bytes(b"not a log")
    (folder / "7_0_result.pkl").write_bytes(b"nor this")
    before = time.time()
    assert facts.note_start(tmp_path, "7", 0) == {}
    first = facts.read_marks(path)
    assert first["restart"] == 0 and first["sizes"] == {"7_0_log.out": 5, "7_0_log.err": 3, "7_1_log.out": 0}
    assert before <= first["time"] <= time.time()
    append(folder / "7_0_log.out", "!!")
    assert facts.note_start(tmp_path, "7", 1) == first
    second = facts.read_marks(path)
    assert second["restart"] == 1 and second["sizes"] == {"7_0_log.out": 7, "7_0_log.err": 3, "7_1_log.out": 0}


def test_unreadable_marks_read_as_none(tmp_path: Path) -> None:
    """Missing, torn or foreign marks are no marks (the logs then start at 0), never an error."""
    path = tmp_path / "7_attempt.json"
    assert facts.read_marks(path) == {}
    path.write_text('{"restart": 1, "sizes"')
    assert facts.read_marks(path) == {}
    path.write_text('[1, 2]')
    assert facts.read_marks(path) == {}
    path.write_text('{"restart": 1, "sizes": {"a": 2}}')
    assert facts.read_marks(path) == {"restart": 1, "sizes": {"a": 2}}


def test_this_attempts_part_of_a_log_starts_at_its_mark_ends_at_until_and_leaves_out_the_steps_own_lines(
        tmp_path: Path) -> None:
    """What `after` reads of a log: from this attempt's mark (up to `until`'s size), without `[heal]` lines."""
    log = tmp_path / "7_0_log.err"
    log.write_text("old line\n[heal] the attempt failed\nnew 1\n[heal] said\nnew 2\n")
    start = len("old line\n")
    marks = {"sizes": {log.name: start}}
    assert facts.since(log, marks) == "new 1\nnew 2"
    assert facts.since(log, {}) == "old line\nnew 1\nnew 2"
    assert facts.since(log, {"sizes": None}) == "old line\nnew 1\nnew 2"
    assert facts.since(log, {"sizes": {"other.err": 4}}) == "old line\nnew 1\nnew 2"
    upto = start + len("[heal] the attempt failed\nnew 1\n")
    assert facts.since(log, marks, {log.name: upto}) == "new 1"
    assert facts.since(log, marks, {log.name: upto + 3}) == "new 1\n[he"  # (a line cut short is no [heal] line)
    assert facts.since(log, marks, {log.name: start - 2}) == ""  # a size below the mark: nothing
    assert facts.since(log, marks, {"other.err": 100}) == ""  # no size of this log: nothing after the mark
    assert facts.since(tmp_path / "missing.err", marks) == ""
    log.write_bytes(b"ok\n\xff\xfe done\n")
    assert facts.since(log, {}) == "ok\n\ufffd\ufffd done"


def test_each_task_runs_on_its_block_of_the_jobs_nodes() -> None:
    """srun's default block placement: SLURM_NTASKS_PER_NODE tasks on each node in turn ("2(x2)": 2 on each)."""
    assert facts.placement({"SLURM_JOB_NODELIST": "cpu[3-4]", "SLURM_NTASKS_PER_NODE": "2(x2)"}) == \
        ["cpu3", "cpu3", "cpu4", "cpu4"]
    assert facts.placement({"SLURM_JOB_NODELIST": "cpu[3-4]", "SLURM_NTASKS_PER_NODE": "3"}) == \
        ["cpu3"] * 3 + ["cpu4"] * 3
    for per_node in ("0", "x", ""):
        assert facts.placement({"SLURM_JOB_NODELIST": "cpu3,gpu1", "SLURM_NTASKS_PER_NODE": per_node}) == \
            ["cpu3", "gpu1"]
    assert facts.placement({"SLURM_JOB_NODELIST": "cpu[3-4]"}) == ["cpu3", "cpu4"]
    assert facts.placement({"SLURM_JOB_NODELIST": "", "SLURM_NTASKS_PER_NODE": "2"}) == []
    assert facts.placement({}) == []


def test_how_each_rank_ended_in_this_attempt(tmp_path: Path) -> None:
    """Each rank: its node (its own note), its result (success, error, or none), this attempt's part of its
    logs (err then out) and srun's first line about it; and the rank srun reported first."""
    folder = started_attempt(tmp_path, places=("cpu3", "cpu4"))
    marks = facts.read_marks(facts.marks_path(tmp_path, "7"))
    append(folder / "7_0_log.err", "warn 0\nsrun: error: cpu4: task 1: Killed\n"
                                   "srun: error: cpu3: tasks 0,2: Terminated\nsrun: error: cpu4: task 1: again\n")
    append(folder / "7_0_log.out", "step 5\n")
    append(folder / "7_1_log.out", "step 4\n")
    result(folder, "7", 0, "error", PEER_LOST)
    result(folder, "7", 1, "success", {"accuracy": 0.5})
    result(folder, "7", 2, "weird", "value")
    ends, first = facts.rank_ends(tmp_path, "7", job_env(SLURM_NTASKS="3", SLURM_NTASKS_PER_NODE="2"), marks)
    err0 = ("warn 0\nsrun: error: cpu4: task 1: Killed\nsrun: error: cpu3: tasks 0,2: Terminated\n"
            "srun: error: cpu4: task 1: again")
    assert ends == [
        RankEnd(0, "cpu3", "error", PEER_LOST, err0 + "\nstep 5", "srun: error: cpu3: tasks 0,2: Terminated"),
        RankEnd(1, "cpu4", "success", "", "\nstep 4", "srun: error: cpu4: task 1: Killed"),
        RankEnd(2, "cpu4", "none", "", "\n", "srun: error: cpu3: tasks 0,2: Terminated"),
    ]
    assert first == 1


def test_an_attempts_ranks_without_notes_or_results_of_their_own(tmp_path: Path) -> None:
    """A place note or a result pickle older than the attempt (a second of slack) is an earlier attempt's: the
    rank's node is then srun's block placement, its outcome none. Without SLURM_NTASKS, one task per place."""
    folder = started_attempt(tmp_path, places=())
    marks = facts.read_marks(facts.marks_path(tmp_path, "7"))
    started = float(marks["time"])
    rank_notes.write_place(folder, 0, "old-node")
    note = folder / rank_notes.PLACES_DIR / "task-0.json"
    note.write_text(json.dumps({"task": 0, "host": "old-node", "time": started - 5}))
    rank_notes.write_place(folder, 1, "cpu9")
    result(folder, "7", 0, "error", USER_BUG, mtime=started - 3)  # stale: an earlier attempt's
    result(folder, "7", 1, "error", USER_BUG, mtime=started - 0.5)  # within the second of slack: this one's
    ends, first = facts.rank_ends(tmp_path, "7", {"SLURM_JOB_NODELIST": "cpu[3-4]"}, marks)
    assert [(e.rank, e.node, e.outcome, e.error) for e in ends] == \
        [(0, "cpu3", "none", ""), (1, "cpu9", "error", USER_BUG)]
    assert first is None
    ends, _ = facts.rank_ends(tmp_path, "7", {"SLURM_NTASKS": "0"}, marks)
    assert [(e.rank, e.node) for e in ends] == [(0, "")]  # nothing tells: one task, on no known node
    ends, _ = facts.rank_ends(tmp_path, "7", {"SLURM_NTASKS": "3", "SLURM_JOB_NODELIST": "cpu3"}, marks)
    assert [(e.rank, e.node) for e in ends] == [(0, "cpu3"), (1, "cpu9"), (2, "")]


def test_a_previous_attempts_part_ends_where_the_next_one_began(tmp_path: Path) -> None:
    """`until` (the next attempt's marks): what came after it is not the previous attempt's."""
    folder = started_attempt(tmp_path)
    marks = facts.read_marks(facts.marks_path(tmp_path, "7"))
    append(folder / "7_0_log.err", "srun: error: cpu4: task 1: Killed\n")
    until = {"7_0_log.err": len(KILLED)}
    append(folder / "7_0_log.err", "srun: error: cpu3: task 0: Killed\n")
    ends, first = facts.rank_ends(tmp_path, "7", job_env(), marks, until)
    assert [e.log for e in ends] == ["srun: error: cpu4: task 1: Killed\n", "\n"]
    assert [e.srun for e in ends] == ["", "srun: error: cpu4: task 1: Killed"] and first == 1


def test_an_attempt_took_a_step_only_by_a_first_step_mark_of_its_own(tmp_path: Path) -> None:
    """The trainer's start-up marks: a first step at or after the attempt's start (a second of slack) counts;
    an earlier attempt's, a mark without a first step, a torn or foreign file do not."""
    start = 1000.0
    assert not facts.reached_first_step(tmp_path, start)
    folder = tmp_path / TIMING_DIR
    folder.mkdir()
    (folder / "rank-0.json").write_text(json.dumps({"rank": 0, "run": 1200.0}))
    (folder / "rank-1.json").write_text('{"first_step": 12')
    (folder / "rank-2.json").write_text("[1]")
    (folder / "rank-3.json").write_text(json.dumps({"first_step": "1200"}))
    (folder / "rank-4.json").write_text(json.dumps({"first_step": start - 1.5}))
    (folder / "other.json").write_text(json.dumps({"first_step": 1200.0}))
    assert not facts.reached_first_step(tmp_path, start)
    (folder / "rank-5.json").write_text(json.dumps({"first_step": start - 1}))
    assert facts.reached_first_step(tmp_path, start)
    (folder / "rank-5.json").write_text(json.dumps({"first_step": 1001}))
    assert facts.reached_first_step(tmp_path, start)


def test_a_sweep_tasks_folder_and_run_folder_come_from_submitits_pickle(tmp_path: Path) -> None:
    """A sweep's task trains in its own folder below the run folder; a single run's folder is the run folder."""
    from submitit.core.utils import DelayedSubmission

    from launcher.node.task import TrainTask
    from trainer.config.job import JobConfig, RunSettings

    assert facts.task_of(tmp_path, "12_3") == (tmp_path, str(tmp_path))
    folder = job_log_dir(tmp_path, "12_3")
    folder.mkdir(parents=True)
    (folder / "12_3_submitted.pkl").write_bytes(b"torn")
    assert facts.task_of(tmp_path, "12_3") == (tmp_path, str(tmp_path))
    task = TrainTask(JobConfig(), RunSettings(run_dir=str(tmp_path / "task-0003")), run_root="/runs/sweep")
    DelayedSubmission(task).dump(folder / "12_3_submitted.pkl")
    assert facts.task_of(tmp_path, "12_3") == (tmp_path / "task-0003", "/runs/sweep")
    assert facts.job_id({"SLURM_JOB_ID": "900", "SLURM_ARRAY_JOB_ID": "12", "SLURM_ARRAY_TASK_ID": "3"}) == "12_3"
    assert facts.restart_count({"SLURM_RESTART_COUNT": "2"}) == 2


# ----- before srun ------------------------------------------------------------------------------------------

def test_before_notes_where_this_attempts_logs_start(tmp_path: Path, slurm: SlurmAnswers) -> None:
    """Before srun: the marks of this attempt (its restart count, each log's size), nothing else on a first attempt."""
    folder = started_attempt(tmp_path)
    append(folder / "7_0_log.err", "attempt 0 said this\n")
    assert attempt.before(policy(tmp_path), job_env(restart=1, **{RERUN_VARIABLE: "1"})) == 0
    marks = facts.read_marks(facts.marks_path(tmp_path, "7"))
    assert marks["restart"] == 1 and marks["sizes"]["7_0_log.err"] == len("attempt 0 said this\n")
    assert slurm.calls() == []  # a rerun in the allocation follows no SLURM-ended life: nothing asked


NODE_FAIL = "JobID|State|NodeList\n7|REQUEUED|cpu[1-2]\n7|NODE_FAIL|cpu[3-4]\n7|RUNNING|cpu[3,5]\n"


def node(name: str, state: str) -> str:
    reason = " Reason=Not responding [slurm@12:00:00]" if "DOWN" in state else ""
    return f"NodeName={name} Arch=x86_64 CPUTot=4 State={state} Partitions=cpu{reason}\n"


def test_before_leaves_out_the_node_slurm_lost_and_records_the_previous_attempts_failure(
        tmp_path: Path, slurm: SlurmAnswers, capsys: pytest.CaptureFixture[str]) -> None:
    """SLURM ended the previous attempt NODE_FAIL and requeued the job: the node it still has down goes on the
    exclusion list, with a failure event of the previous attempt (not retried by us: SLURM requeued it)."""
    started_attempt(tmp_path, restart=1)
    slurm.answer("sacct", NODE_FAIL)
    slurm.answer("scontrol show node -o cpu3,cpu4", node("cpu3", "IDLE") + node("cpu4", "DOWN+NOT_RESPONDING"))
    assert attempt.before(policy(tmp_path), job_env(nodes="cpu[3,5]", restart=2)) == 0
    assert failures(tmp_path) == [{
        "event": "failure", "job_id": "7", "restart": 1, "origin": "node", "rank": None,
        "error": "SLURM lost node(s) cpu4 (NODE_FAIL)", "nodes": ["cpu4"], "signature": "", "evidence": "NODE_FAIL",
        "retry": False, "why": "requeued by SLURM after NODE_FAIL", "excluded": ["cpu4"]}]
    assert left_out(tmp_path) == [{"node": "cpu4", "excluded": True, "reason": "SLURM lost node(s) cpu4 (NODE_FAIL)",
                                   "task": 0, "job_id": "7"}]
    assert said(capsys) == ["[heal] node cpu4 left out of this run's later attempts"]
    assert slurm.calls()[0].startswith("sacct ") and " -j 7 " in slurm.calls()[0]


def test_before_blames_the_lost_node_whose_ranks_vanished_when_slurm_has_it_back(
        tmp_path: Path, slurm: SlurmAnswers, capsys: pytest.CaptureFixture[str]) -> None:
    """The lost node is back (ReturnToService): the node whose ranks ended without a word in the previous
    attempt's part of the logs (its tasks' notes: where they ran then) is the one left out."""
    folder = started_attempt(tmp_path, restart=0, places=("cpu3", "cpu4"))
    append(folder / "7_0_log.err", PEER_LOST)  # rank 0 lost its peer; rank 1 (on cpu4) said nothing
    slurm.answer("sacct", NODE_FAIL)
    slurm.answer("scontrol show node -o cpu3,cpu4", node("cpu3", "IDLE") + node("cpu4", "IDLE"))
    assert attempt.before(policy(tmp_path), job_env(nodes="cpu[3,5]", restart=1)) == 0
    assert [(f["restart"], f["nodes"], f["error"], f["excluded"]) for f in failures(tmp_path)] == \
        [(0, ["cpu4"], "SLURM lost node(s) cpu4 (NODE_FAIL)", ["cpu4"])]
    assert exclusions.excluded(tmp_path) == ["cpu4"]
    assert said(capsys) == ["[heal] node cpu4 left out of this run's later attempts"]


def test_a_lost_node_back_is_found_among_the_nodes_slurm_lost_not_this_attempts(
        tmp_path: Path, slurm: SlurmAnswers, capsys: pytest.CaptureFixture[str]) -> None:
    """SLURM lost cpu[3-4] and has both back; cpu4's task died before writing where it ran, and this attempt
    runs on cpu[3,5]: the silent rank ran on cpu4 (the NODE_FAIL's nodes, in srun's order), and cpu5, which
    the previous attempt never had, is not blamed (it was, and the attempt then moved off a healthy node)."""
    folder = started_attempt(tmp_path, restart=0, places=("cpu3",))
    (folder / "7_1_log.err").touch()
    (folder / "7_1_log.out").touch()
    append(folder / "7_0_log.err", PEER_LOST)
    slurm.answer("sacct", NODE_FAIL)
    slurm.answer("scontrol show node -o cpu3,cpu4", node("cpu3", "IDLE") + node("cpu4", "IDLE"))
    assert attempt.before(policy(tmp_path), job_env(nodes="cpu[3,5]", restart=1)) == 0
    assert exclusions.excluded(tmp_path) == ["cpu4"]
    assert said(capsys) == ["[heal] node cpu4 left out of this run's later attempts"]


def test_before_names_no_node_when_the_lost_ones_are_back_and_the_ranks_do_not_tell(
        tmp_path: Path, slurm: SlurmAnswers, capsys: pytest.CaptureFixture[str]) -> None:
    """Back, and the previous attempt's ranks point at the code (one raised its own exception): the NODE_FAIL is
    recorded, but no node is left out."""
    folder = started_attempt(tmp_path, restart=0)
    result(folder, "7", 0, "error", USER_BUG)
    slurm.answer("sacct", "JobID|State|NodeList\n7|NODE_FAIL|None assigned\n7|RUNNING|cpu[3-4]\n")
    assert attempt.before(policy(tmp_path), job_env(restart=1)) == 0
    assert [(f["error"], f["nodes"], f["excluded"], f["retry"]) for f in failures(tmp_path)] == \
        [("SLURM lost node(s) ? (NODE_FAIL)", [], [], False)]
    assert exclusions.read(tmp_path) == [] and said(capsys) == []


@pytest.mark.parametrize("case", ["first attempt", "rerun", "no previous marks", "ended otherwise", "accounting off"])
def test_before_records_no_lost_node_unless_slurm_requeued_the_job_after_node_fail(
        tmp_path: Path, slurm: SlurmAnswers, case: str) -> None:
    """Only a later life of the job (not a rerun in its allocation), after an attempt that left its marks and that
    sacct says ended NODE_FAIL, looks for a lost node."""
    if case != "no previous marks":
        started_attempt(tmp_path, restart=0)
    else:
        job_log_dir(tmp_path, "7").mkdir(parents=True)
    if case != "accounting off":
        slurm.answer("sacct", NODE_FAIL.replace("NODE_FAIL", "FAILED") if case == "ended otherwise" else NODE_FAIL)
    slurm.answer("scontrol show node -o cpu3,cpu4", node("cpu4", "DOWN"))
    environ = job_env(restart=0 if case == "first attempt" else 1, **({RERUN_VARIABLE: "2"} if case == "rerun" else {}))
    assert attempt.before(policy(tmp_path), environ) == 0
    assert failures(tmp_path) == [] and exclusions.read(tmp_path) == []
    asked = [c.split()[0] for c in slurm.calls()]
    assert asked == ([] if case in ("first attempt", "rerun", "no previous marks") else ["sacct"])


def test_before_moves_an_attempt_off_a_left_out_node_to_the_queue_without_every_left_out_node(
        tmp_path: Path, slurm: SlurmAnswers, capsys: pytest.CaptureFixture[str]) -> None:
    """Landed on nodes the run leaves out: requeued (SIGTERM ignored meanwhile, then as before) with all of the
    run's left-out nodes on its ExcNodeList, a "moved" event, and MOVED_EXIT (the batch script ends)."""
    for name in ("cpu2", "cpu4", "cpu9"):
        exclusions.add(tmp_path, name, "ECC")
    for _ in range(attempt.MOST_MOVES):
        events.append(tmp_path, "moved", job_id="8", nodes=["cpu2"])  # another job's moves: not this one's
    slurm.answer("scontrol show job -o 7", job_record().replace("ExcNodeList=(null)", "ExcNodeList=cpu8"))
    slurm.answer("scontrol requeue 7")
    slurm.answer("scontrol update jobid=7 excnodelist=cpu8,cpu2,cpu4,cpu9")
    handler = signal.getsignal(signal.SIGTERM)
    assert attempt.before(policy(tmp_path), job_env(nodes="cpu[1-4]")) == MOVED_EXIT
    assert signal.getsignal(signal.SIGTERM) == handler
    assert slurm.calls() == ["scontrol show job -o 7", "scontrol requeue 7",
                             "scontrol update jobid=7 excnodelist=cpu8,cpu2,cpu4,cpu9"]
    moved = [e for e in events.read(tmp_path) if e["event"] == "moved" and e["job_id"] == "7"]
    assert [(e["nodes"], e["note"]) for e in moved] == [(["cpu2", "cpu4"], "")]
    assert said(capsys) == ["[heal] this attempt landed on cpu2, cpu4, which the run leaves out: requeued without it"]


def test_before_moves_even_where_the_exclusion_could_not_be_set_and_says_so_in_the_moved_event(
        tmp_path: Path, slurm: SlurmAnswers) -> None:
    """Requeued, but its ExcNodeList not set: still moved (its next attempt checks its nodes again)."""
    exclusions.add(tmp_path, "cpu4", "ECC")
    slurm.answer("scontrol requeue 7")
    slurm.answer("scontrol update jobid=7 excnodelist=cpu4", rc=1, err="scontrol: error: Job is running\n")
    assert attempt.before(policy(tmp_path, pinned="cpu3"), job_env()) == MOVED_EXIT
    moved = [e for e in events.read(tmp_path) if e["event"] == "moved"]
    note = ("requeued, but leaving out cpu4 failed: scontrol: error: Job is running (the next attempt checks its "
            "nodes again before it starts)")
    assert [(e["nodes"], e["note"]) for e in moved] == [(["cpu4"], note)]


def test_before_stays_where_the_requeue_fails(tmp_path: Path, slurm: SlurmAnswers,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The requeue refused: the attempt stays on the left-out node (0), no "moved" event, and the line says why."""
    exclusions.add(tmp_path, "cpu4", "ECC")
    assert attempt.before(policy(tmp_path), job_env()) == 0
    assert [e for e in events.read(tmp_path) if e["event"] == "moved"] == []
    stays = "[heal] this attempt landed on cpu4, which the run leaves out, and stays: scontrol requeue 7 failed: "
    assert said(capsys) == [stays + UNREACHABLE]
    assert attempt.before(policy(tmp_path), {"SLURM_JOB_ID": "7"}) == 0  # no node list: nowhere it landed
    assert said(capsys) == []


# ----- after srun ended with an error -----------------------------------------------------------------------

def test_after_a_bug_past_the_first_step_is_retried_in_the_allocation_with_the_users_frame_as_its_signature(
        tmp_path: Path, slurm: SlurmAnswers, capsys: pytest.CaptureFixture[str]) -> None:
    """The code's failure, with an hour left: retried here (RERUN_EXIT). Its signature names the user's innermost
    frame, not this tool's (the checkout's or the run's code snapshot, trainer/ and launcher/)."""
    folder = started_attempt(tmp_path)
    stepped(tmp_path, time.time())
    bug = traceback_of("ValueError: shapes (3,) and (4,) do not match", ("/home/me/proj/train.py", 41),
                       (f"{CODE_ROOT}/launcher/node/task.py", 5), (f"{CODE_ROOT}/trainer/api.py", 6),
                       (f"{tmp_path}/code/launcher/node/task.py", 7), (f"{tmp_path}/code/trainer/api.py", 8))
    failed_ranks(folder, rank0=("error", bug))
    slurm.answer("scontrol show job -o 7", job_record(left_s=3600))
    assert attempt.after(1, policy(tmp_path), job_env()) == RERUN_EXIT
    why = "retry 1 of 2: from the newest checkpoint; in this allocation (no requeue)"
    assert failures(tmp_path) == [failure(retry=True, why=why, in_place=True, excluded=[])]
    assert said(capsys) == [f"[heal] the attempt failed (code: ValueError: shapes (3,) and (4,) do not match); {why}"]
    assert slurm.calls() == ["scontrol show job -o 7"]  # no requeue, no exclusion asked


def test_after_a_bug_with_little_time_left_is_requeued_instead(
        tmp_path: Path, slurm: SlurmAnswers, capsys: pytest.CaptureFixture[str]) -> None:
    """Under RERUN_MIN_LEFT_S of the time limit left: the retry is a requeue (a new attempt gets a whole one)."""
    folder = started_attempt(tmp_path)
    stepped(tmp_path, time.time())
    failed_ranks(folder)
    slurm.answer("scontrol show job -o 7", job_record(left_s=attempt.RERUN_MIN_LEFT_S - 60))
    slurm.answer("scontrol requeue 7")
    handler = signal.getsignal(signal.SIGTERM)
    assert attempt.after(1, policy(tmp_path), job_env()) == 0
    assert signal.getsignal(signal.SIGTERM) == handler
    why = "retry 1 of 2: from the newest checkpoint"
    assert failures(tmp_path) == [failure(retry=True, why=why, in_place=False, excluded=[])]
    assert said(capsys) == [f"[heal] the attempt failed (code: ValueError: shapes (3,) and (4,) do not match); {why}"]
    assert slurm.calls() == ["scontrol show job -o 7", "scontrol show job -o 7", "scontrol requeue 7"]
    assert attempt.RERUN_MIN_LEFT_S == 300


def test_after_a_bug_in_a_job_without_a_time_limit_is_retried_in_the_allocation(
        tmp_path: Path, slurm: SlurmAnswers) -> None:
    """No time limit (EndTime Unknown): all the time needed is left, the retry stays in the allocation."""
    folder = started_attempt(tmp_path)
    stepped(tmp_path, time.time())
    failed_ranks(folder)
    slurm.answer("scontrol show job -o 7", job_record(left_s=None))
    assert attempt.after(1, policy(tmp_path), job_env()) == RERUN_EXIT


def test_after_a_killed_rank_leaves_its_node_out_and_requeues_the_job_without_it(
        tmp_path: Path, slurm: SlurmAnswers, capsys: pytest.CaptureFixture[str]) -> None:
    """A node's failure: that node on the exclusion list (with the rank and srun's line as the reason), the job
    requeued without it; a requeue whose ExcNodeList could not be set says so and still ends the script well."""
    folder = started_attempt(tmp_path)
    failed_ranks(folder, rank0=("error", PEER_LOST), rank1=None, srun=KILLED)
    slurm.answer("scontrol requeue 7")
    slurm.answer("scontrol update jobid=7 excnodelist=cpu4", rc=1, err="scontrol: error: Job is running\n")
    assert attempt.after(137, policy(tmp_path), job_env()) == 0
    killed = KILLED.strip()
    why = "retry 1 of 2: a node failure (cpu4)"
    assert failures(tmp_path) == [failure(origin="node", rank=1, error=killed, nodes=["cpu4"], signature="",
                                          evidence=killed, retry=True, why=why, in_place=False, excluded=["cpu4"])]
    assert left_out(tmp_path) == [{"node": "cpu4", "excluded": True, "reason": f"rank 1: {killed}", "task": 0,
                                   "job_id": "7"}]
    assert said(capsys) == [
        "[heal] node cpu4 left out of this run's later attempts",
        f"[heal] the attempt failed (node: {killed}); {why}",
        ("[heal] requeued, but leaving out cpu4 failed: scontrol: error: Job is running (the next attempt checks its "
         "nodes again before it starts)")]


def test_after_a_failed_requeue_ends_the_job_with_sruns_status(
        tmp_path: Path, slurm: SlurmAnswers, capsys: pytest.CaptureFixture[str]) -> None:
    """A retry whose requeue the controller refuses: the job ends failed, with srun's status and the reason said."""
    folder = started_attempt(tmp_path)
    failed_ranks(folder, rank0=("error", PEER_LOST), rank1=None, srun=KILLED)
    assert attempt.after(137, policy(tmp_path), job_env()) == 137
    assert said(capsys)[-1] == f"[heal] scontrol requeue 7 failed: {UNREACHABLE}"


def test_after_a_failed_node_the_job_names_is_not_left_out(
        tmp_path: Path, slurm: SlurmAnswers, capsys: pytest.CaptureFixture[str]) -> None:
    """A pinned node (sbatch_extra.nodelist) stays in the run: the entry and the line say why."""
    folder = started_attempt(tmp_path)
    failed_ranks(folder, rank0=("error", PEER_LOST), rank1=None, srun=KILLED)
    slurm.answer("scontrol requeue 7")
    assert attempt.after(137, policy(tmp_path, pinned="cpu[3-4]"), job_env()) == 0
    assert failures(tmp_path)[0]["excluded"] == [] and exclusions.excluded(tmp_path) == []
    assert said(capsys)[0] == ("[heal] node cpu4 not left out: the job asks for it by name "
                               "(sbatch_extra.nodelist)")
    assert slurm.calls()[-1] == "scontrol requeue 7"  # requeued, with no node to leave out


def test_after_a_sweep_tasks_failure_is_recorded_in_its_folder_and_its_node_left_out_of_the_whole_run(
        tmp_path: Path, slurm: SlurmAnswers) -> None:
    """Task 3 of array 12 (a sweep's task-0003): its events in its own folder, the node left out at the run's top,
    named by the task and the array task's id; the trainer's "started" names the raw SLURM job id."""
    from submitit.core.utils import DelayedSubmission

    from launcher.node.task import TrainTask
    from trainer.config.job import JobConfig, RunSettings

    task_dir = tmp_path / "task-0003"
    folder = started_attempt(tmp_path, job="12_3", task_dir=task_dir)
    (task_dir / "events.jsonl").write_text(json.dumps({"event": "started", "time": time.time(), "job_id": "900",
                                                       "slurm_restart_count": 0}) + "\n")
    DelayedSubmission(TrainTask(JobConfig(), RunSettings(run_dir=str(task_dir)), run_root=str(tmp_path))).dump(
        folder / "12_3_submitted.pkl")
    failed_ranks(folder, rank0=("error", PEER_LOST), rank1=None, srun=KILLED)
    events.append(task_dir, "stopped", kind="terminate", step=2)  # srun's kill of the peers: no stop
    environ = job_env(job="900", SLURM_ARRAY_JOB_ID="12", SLURM_ARRAY_TASK_ID="3")
    assert attempt.after(137, policy(tmp_path), environ) == 137
    assert [(f["job_id"], f["origin"], f["excluded"]) for f in failures(task_dir)] == [("12_3", "node", ["cpu4"])]
    assert failures(tmp_path) == []
    assert [(e["node"], e["task"], e["job_id"]) for e in exclusions.read(tmp_path)] == [("cpu4", 3, "12_3")]


def test_an_array_tasks_attempt_is_known_by_the_raw_job_id_its_trainer_names_and_its_first_step_by_its_folder(
        tmp_path: Path, slurm: SlurmAnswers) -> None:
    """Task 3 of array 12: the trainer's "started" names SLURM_JOB_ID (900), not 12_3; its first-step mark is in
    the task's folder. Its bug after a step is retried in the allocation; a stop of that attempt is submitit's."""
    from submitit.core.utils import DelayedSubmission

    from launcher.node.task import TrainTask
    from trainer.config.job import JobConfig, RunSettings

    task_dir = tmp_path / "task-0003"
    folder = started_attempt(tmp_path, job="12_3", task_dir=tmp_path / "elsewhere")
    events.append(task_dir, "started", job_id="900", slurm_restart_count=0)
    DelayedSubmission(TrainTask(JobConfig(), RunSettings(run_dir=str(task_dir)), run_root=str(tmp_path))).dump(
        folder / "12_3_submitted.pkl")
    stepped(task_dir, time.time())
    failed_ranks(folder)
    environ = job_env(job="900", SLURM_ARRAY_JOB_ID="12", SLURM_ARRAY_TASK_ID="3")
    assert attempt.after(1, policy(tmp_path), environ) == RERUN_EXIT
    assert [(f["job_id"], f["retry"], f["in_place"]) for f in failures(task_dir)] == [("12_3", True, True)]
    events.append(task_dir, "stopped", kind="requeue", step=3)
    assert attempt.after(143, policy(tmp_path), environ) == 143
    assert len(failures(task_dir)) == 1


def test_after_a_stop_of_this_attempt_is_left_to_submitit(tmp_path: Path, slurm: SlurmAnswers,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A "stopped" event (not srun's SIGTERM of a dead rank's peers) since this attempt's "started": the stop
    signal ended it, and submitit requeues it: srun's status, nothing recorded or said."""
    folder = started_attempt(tmp_path)
    failed_ranks(folder)
    events.append(tmp_path, "stopped", kind="requeue", step=3)
    assert attempt.after(143, policy(tmp_path), job_env()) == 143
    assert failures(tmp_path) == [] and said(capsys) == [] and slurm.calls() == []


@pytest.mark.parametrize("started", [{"job_id": "8", "slurm_restart_count": 0},
                                     {"job_id": "7", "slurm_restart_count": 1}])
def test_after_a_stop_of_another_attempt_does_not_count(tmp_path: Path, slurm: SlurmAnswers,
                                                        started: dict[str, Any]) -> None:
    """The newest "started" is not this attempt's (another job's, another life's): its stop is not this one's, and
    this attempt (whose rank 0 never started) follows those: not a first attempt, so its bug is retried."""
    folder = started_attempt(tmp_path)
    failed_ranks(folder)
    events.append(tmp_path, "started", **started)
    events.append(tmp_path, "stopped", kind="requeue", step=3)
    assert attempt.after(1, policy(tmp_path), job_env()) == RERUN_EXIT
    assert [(f["origin"], f["retry"]) for f in failures(tmp_path)] == [("code", True)]


@pytest.mark.parametrize("state", ["COMPLETING", "PENDING", "CANCELLED"])
def test_after_a_job_the_scheduler_is_ending_is_left_to_it(tmp_path: Path, slurm: SlurmAnswers, state: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The controller no longer has the job RUNNING (scancel, a time limit, a requeue): srun's status, nothing
    recorded, no node left out."""
    folder = started_attempt(tmp_path)
    failed_ranks(folder, rank0=("error", PEER_LOST), rank1=None, srun=KILLED)
    slurm.answer("scontrol show job -o 7", job_record(state))
    assert attempt.after(143, policy(tmp_path), job_env()) == 143
    assert failures(tmp_path) == [] and exclusions.read(tmp_path) == [] and said(capsys) == []


def test_after_every_rank_returned_the_job_ends_as_done(tmp_path: Path, slurm: SlurmAnswers,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Every rank returned its result before srun's error status: done (0), no failure recorded."""
    folder = started_attempt(tmp_path)
    failed_ranks(folder, rank0=("success", 1.0), rank1=("success", 2.0))
    slurm.answer("scontrol show job -o 7", job_record("RUNNING"))
    assert attempt.after(143, policy(tmp_path), job_env()) == 0
    done = "[heal] every rank returned its result in this attempt; srun's exit status 143 came after that: "
    assert said(capsys) == [done + "the job ends as done"]
    assert failures(tmp_path) == []


def test_after_reads_only_this_attempts_part_of_the_logs(tmp_path: Path, slurm: SlurmAnswers) -> None:
    """A hardware line an earlier life wrote before this attempt's marks is no evidence against the node now."""
    folder = started_attempt(tmp_path, restart=1)
    (folder / "7_1_log.err").write_text("NVRM: Xid (PCI:0000:3b:00): 48, pid=7, An uncorrectable ECC error\n")
    facts.note_start(tmp_path, "7", 1)
    failed_ranks(folder)
    assert attempt.after(1, policy(tmp_path), job_env(restart=1)) == 1
    assert [(f["origin"], f["restart"]) for f in failures(tmp_path)] == [("code", 1)]


@pytest.mark.parametrize("marks", ["none", "another life's"])
def test_after_without_this_attempts_marks_the_logs_start_at_zero(tmp_path: Path, slurm: SlurmAnswers,
                                                                  marks: str) -> None:
    """No marks of this life (`before` found no folder yet): the whole of each log is this attempt's."""
    folder = started_attempt(tmp_path, restart=1)
    (folder / "7_1_log.err").write_text("NVRM: Xid (PCI:0000:3b:00): 48, pid=7, An uncorrectable ECC error\n")
    path = facts.marks_path(tmp_path, "7")
    if marks == "none":
        path.unlink()
    else:
        path.write_text(json.dumps({**facts.read_marks(path), "restart": 0, "sizes": {"7_1_log.err": 100}}))
    failed_ranks(folder)
    assert attempt.after(1, policy(tmp_path), job_env(restart=1)) == 1  # the requeue fails: srun's status
    assert [(f["origin"], f["nodes"], f["rank"]) for f in failures(tmp_path)] == [("node", ["cpu4"], 1)]


def test_after_the_profiles_node_error_patterns_blame_a_node(tmp_path: Path, slurm: SlurmAnswers) -> None:
    """A line only the profile's node_error_patterns know (a Lustre error) blames the node that printed it."""
    folder = started_attempt(tmp_path)
    append(folder / "7_1_log.err", "LustreError: 11-0: fs-OST0003: operation ost_read failed\n")
    failed_ranks(folder)
    assert attempt.after(1, policy(tmp_path), job_env()) == 1
    assert failures(tmp_path)[0]["origin"] == "code"
    assert attempt.after(1, policy(tmp_path, patterns=("LustreError",)), job_env()) == 1
    assert failures(tmp_path)[1]["origin"] == "node" and failures(tmp_path)[1]["nodes"] == ["cpu4"]


def test_after_the_stop_signal_at_start_up_is_a_stop_requeued_even_on_the_first_attempt(
        tmp_path: Path, slurm: SlurmAnswers) -> None:
    """Ranks killed by the profile's stop signal (USR2) at start-up: a stop, retried by a requeue, no node left out."""
    folder = started_attempt(tmp_path)
    failed_ranks(folder, rank0=None, rank1=None, srun="srun: error: cpu3: task 0: User defined signal 2\n"
                                                       "srun: error: cpu4: task 1: User defined signal 2\n")
    slurm.answer("scontrol requeue 7")
    slurm.answer("scontrol show job -o 7", job_record(left_s=3600))
    assert attempt.after(140, policy(tmp_path), job_env()) == 0
    [stop] = failures(tmp_path)
    assert (stop["origin"], stop["retry"], stop["in_place"], stop["excluded"]) == ("stop", True, False, [])
    assert stop["why"] == "retry 1 of 2: the stop signal came before the ranks could take it"
    # (a stop names no node: nothing to leave out, no partition asked)
    assert slurm.calls() == ["scontrol show job -o 7", "scontrol show job -o 7", "scontrol requeue 7"]


def test_after_a_bug_before_the_first_step_ends_the_job_on_a_first_attempt_only(
        tmp_path: Path, slurm: SlurmAnswers, capsys: pytest.CaptureFixture[str]) -> None:
    """A first attempt that failed before any step (a mark of an earlier attempt does not count): not retried.
    A later attempt (an earlier "started" in the task's log) is retried."""
    folder = started_attempt(tmp_path)
    stepped(tmp_path, time.time() - 60)  # an earlier life's first step
    failed_ranks(folder)
    assert attempt.after(1, policy(tmp_path), job_env()) == 1
    why = ("not retried: it failed before the first step of the run's first attempt (a bug in the code or its "
           "input, not worth retrying)")
    assert failures(tmp_path) == [failure(retry=False, why=why, in_place=False, excluded=[])]
    assert said(capsys) == [f"[heal] the attempt failed (code: ValueError: shapes (3,) and (4,) do not match); {why}"]

    retried = tmp_path / "again"
    events.append(retried, "started", job_id="7", slurm_restart_count=0)
    folder = started_attempt(retried, restart=1)
    failed_ranks(folder)
    assert attempt.after(1, policy(retried), job_env(restart=1)) == RERUN_EXIT
    assert failures(retried)[0]["restart"] == 1 and failures(retried)[0]["retry"] is True


def test_after_max_failures_retries_the_job_ends_with_sruns_status(tmp_path: Path, slurm: SlurmAnswers) -> None:
    """Retried max_failures times already by this job: not again, whatever the failure."""
    folder = started_attempt(tmp_path)
    failed_ranks(folder, rank0=("error", PEER_LOST), rank1=None, srun=KILLED)
    events.append(tmp_path, "failure", job_id="7", retry=True, origin="node")
    assert attempt.after(137, policy(tmp_path, max_failures=1), job_env()) == 137
    last = failures(tmp_path)[-1]
    assert (last["retry"], last["why"]) == (False, "not retried: retried 1 time(s) already (max_failures 1)")
    assert last["excluded"] == ["cpu4"]  # the node is left out all the same
    assert slurm.calls()[-1] != "scontrol requeue 7"
