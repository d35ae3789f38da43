"""Where a failed attempt's failure came from, decided from how each rank ended (launcher.reports.fault_origin),
whether it is retried (launcher.rundir.retries), the run's exclusion list (launcher.rundir.exclusions) and
what the retry step reads of an attempt in a run folder (launcher.heal.facts): called directly, no cluster.
The SLURM side (the retry step in real batch scripts) is tests/test_self_healing.py."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from launcher.config.resolve import load_profile, point
from launcher.heal import facts
from launcher.request.executor import sbatch_script
from launcher.request.submission import build
from launcher.rundir import exclusions, restarts, retries
from launcher.reports.fault_origin import RankEnd, Verdict, classify, node_error_line, signature
from trainer.config.job import JobConfig

TOOL = ("/runs/r1/code",)


def python_traceback(exception: str, *frames: tuple[str, int]) -> str:
    lines = "".join(f'  File "{path}", line {line}, in f\n    x()\n' for path, line in frames)
    return f"Traceback (most recent call last):\n{lines}{exception}\n"


def traceback_of(exception: str, *frames: tuple[str, int], body: str = "") -> str:
    """A traceback as submitit's error result carries it (between its rules, then its log paths)."""
    return (f"Job (task=0) failed during processing with trace:\n----------------------\n"
            f"{body or python_traceback(exception, *frames)}----------------------\n"
            f"You can check full logs with 'job.stderr(0)' and 'job.stdout(0)'or at paths:\n  - /x/0_log.err\n")


PEER_SYMPTOM = traceback_of("RuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer",
                            ("/usr/lib/python3.11/site-packages/torch/distributed/c10d.py", 10))
USER_BUG = traceback_of("ValueError: shapes (3,) and (4,) do not match",
                        ("/runs/r1/code/trainer/runners/functions.py", 88), ("/home/me/proj/train.py", 41),
                        ("/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", 1501))


# ----- the node or the code ---------------------------------------------------------------------------

def test_a_hardware_error_in_a_failed_ranks_log_blames_that_ranks_node_and_not_its_peers() -> None:
    ends = [RankEnd(0, "cpu1", "error", PEER_SYMPTOM),
            RankEnd(1, "cpu2", "error", traceback_of("RuntimeError: CUDA error: uncorrectable ECC error encountered"),
                    "NVRM: Xid (PCI:0000:3b:00): 48, pid=7, An uncorrectable double bit error (DBE)")]
    verdict = classify(ends)
    assert (verdict.origin, verdict.nodes, verdict.rank) == ("node", ("cpu2",), 1)
    assert "ECC" in verdict.error or "Xid" in verdict.error


@pytest.mark.parametrize("line", [
    "NCCL WARN Cuda failure 'uncorrectable ECC error encountered'",
    "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled cuda error, NCCL version 2.18.1",
    "[ 1234.5] NVRM: Xid (PCI:0000:07:00): 79, pid=1203, GPU has fallen off the bus.",
    "RuntimeError: CUDA error: no CUDA-capable device is detected",
    "srun: error: gpu7: task 3: Bus error",
])
def test_shipped_patterns_know_cuda_nccl_ecc_xid_and_bus_errors(line: str) -> None:
    assert node_error_line(f"epoch 1\n{line}\nmore") == line


def test_a_healthy_rank_that_printed_a_hardware_word_is_not_blamed() -> None:
    """Only failed ranks are searched: a rank that returned its result blamed nobody."""
    ends = [RankEnd(0, "cpu1", "success", log="warning: ECC error counter read 0"),
            RankEnd(1, "cpu2", "error", USER_BUG)]
    assert classify(ends, tool_code=TOOL).origin == "code"


def test_the_profiles_own_patterns_extend_the_shipped_ones() -> None:
    ends = [RankEnd(0, "cpu1", "error", PEER_SYMPTOM),
            RankEnd(1, "cpu2", "error", traceback_of("OSError: [Errno 5] Input/output error"),
                    "lustre: LustreError: 11-0: fs-OST0003: operation ost_read failed")]
    assert classify(ends).origin == "code"
    verdict = classify(ends, patterns=[r"LustreError"])
    assert verdict.origin == "node" and verdict.nodes == ("cpu2",) and "LustreError" in verdict.evidence


def test_a_rank_killed_by_a_signal_without_an_exception_while_its_peers_only_lost_it_blames_its_node() -> None:
    ends = [RankEnd(0, "cpu1", "error", PEER_SYMPTOM), RankEnd(1, "cpu2", "none", srun="srun: error: cpu2: task 1: Killed")]
    verdict = classify(ends, first_dead=1)
    assert (verdict.origin, verdict.nodes, verdict.rank) == ("node", ("cpu2",), 1)


def test_a_segfault_or_a_plain_exit_code_is_the_codes() -> None:
    for what in ("Segmentation fault", "Exited with exit code 3"):
        ends = [RankEnd(0, "cpu1", "error", PEER_SYMPTOM), RankEnd(1, "cpu2", "none", srun=f"srun: error: cpu2: task 1: {what}")]
        verdict = classify(ends, first_dead=1)
        assert verdict.origin == "code" and verdict.signature == f"no exception: {what}", verdict


def test_a_killed_rank_whose_peer_raised_its_own_exception_is_the_codes() -> None:
    """The peer's real exception is the cause; srun killed the other rank because of it."""
    ends = [RankEnd(0, "cpu1", "error", USER_BUG), RankEnd(1, "cpu2", "none", srun="srun: error: cpu2: task 1: Killed")]
    verdict = classify(ends, tool_code=TOOL, first_dead=0)
    assert verdict.origin == "code" and verdict.rank == 0


def test_a_killed_rank_whose_peer_srun_then_ended_with_sigterm_blames_the_killed_ranks_node() -> None:
    # A script's rank 0 takes no collective that could fail: srun's --kill-on-bad-exit ends it with SIGTERM
    # (its task exits 143), whatever its rank number; the rank srun saw die first is the cause.
    ranks = [RankEnd(0, "cpu1", log="[task] stopped on SIGTERM", srun="srun: error: cpu1: task 0: Exited with exit code 143"),
             RankEnd(1, "cpu2", srun="srun: error: cpu2: task 1: Killed")]
    verdict = classify(ranks, first_dead=1)
    assert verdict.origin == "node" and verdict.rank == 1 and verdict.nodes == ("cpu2",), verdict


def test_a_rank_killed_by_the_profiles_stop_signal_before_it_could_take_it_is_a_stop_retried_even_at_start() -> None:
    # SLURM's warning came while the ranks still started (no handler yet): srun saw them die of it.
    ranks = [RankEnd(0, "cpu1", srun="srun: error: cpu1: task 0: User defined signal 2"),
             RankEnd(1, "cpu2", srun="srun: error: cpu2: task 1: User defined signal 2")]
    verdict = classify(ranks, stop_signal="USR2")
    assert verdict.origin == "stop" and verdict.nodes == () and "SIGUSR2, the profile's stop signal" in verdict.error
    decided = retries.decide(verdict, [], "7", 2, first_attempt=True, reached_first_step=False)
    assert decided.retry and "stop signal came before" in decided.why
    assert not retries.decide(verdict, [{"event": "failure", "retry": True, "job_id": "7"}] * 2, "7", 2,
                              first_attempt=False, reached_first_step=False).retry  # bounded: max_failures
    # Another profile's signal is not this one; without the profile's signal nothing is a stop.
    assert classify(ranks, stop_signal="USR1").origin == "code" and classify(ranks).origin == "code"
    log = [{"event": "started", "job_id": "7", "time": 1.0},
           {"event": "failure", **verdict.as_json(), "retry": True, "job_id": "7", "time": 2.0},
           {"event": "started", "job_id": "7", "time": 3.0}]
    assert restarts.classify(log).by_cause() == {"early-stop-signal": 1}


def test_node_fail_blames_the_lost_nodes() -> None:
    verdict = classify([], node_fail=["cpu3"])
    assert verdict.origin == "node" and verdict.nodes == ("cpu3",) and "NODE_FAIL" in verdict.error


def test_a_python_exception_is_the_codes_and_its_signature_is_the_users_innermost_frame() -> None:
    verdict = classify([RankEnd(0, "cpu1", "error", USER_BUG), RankEnd(1, "cpu2", "error", PEER_SYMPTOM)],
                       tool_code=TOOL)
    assert verdict.origin == "code" and verdict.rank == 0
    assert verdict.error == "ValueError: shapes (3,) and (4,) do not match"
    assert verdict.signature == "ValueError at /home/me/proj/train.py:41"  # not torch's frame, not the tool's


def test_the_signature_of_a_chained_exception_is_the_last_ones() -> None:
    text = traceback_of("", body=python_traceback("KeyError: 'lr'", ("/home/me/proj/a.py", 3))
                        + "\nDuring handling of the above exception, another exception occurred:\n\n"
                        + python_traceback("TypeError: bad config", ("/home/me/proj/b.py", 9)))
    assert signature(text) == "TypeError at /home/me/proj/b.py:9"


# ----- retried or not -----------------------------------------------------------------------------

CODE = Verdict("code", 0, "ValueError: x", signature="ValueError at /p/t.py:41")
NODE = Verdict("node", 1, "CUDA error: uncorrectable ECC error encountered", ("cpu2",))


def test_a_failure_after_the_first_step_is_retried_and_the_same_one_again_is_not() -> None:
    first = retries.decide(CODE, [], "7", 2, first_attempt=True, reached_first_step=True)
    assert first.retry
    log = [{"event": "failure", "origin": "code", "signature": CODE.signature, "retry": True, "job_id": "7"}]
    again = retries.decide(CODE, log, "7", 2, first_attempt=False, reached_first_step=True)
    assert not again.retry and "the same ValueError at /p/t.py:41" in again.why
    other = Verdict("code", 0, "KeyError: y", signature="KeyError at /p/t.py:50")
    assert retries.decide(other, log, "7", 2, first_attempt=False, reached_first_step=True).retry


def test_a_failure_before_the_first_step_of_the_first_attempt_is_not_retried_but_a_nodes_is() -> None:
    early = retries.decide(CODE, [], "7", 2, first_attempt=True, reached_first_step=False)
    assert not early.retry and "before the first step" in early.why
    assert retries.decide(NODE, [], "7", 2, first_attempt=True, reached_first_step=False).retry
    assert retries.decide(CODE, [], "7", 2, first_attempt=False, reached_first_step=False).retry  # a later attempt


def test_retries_stop_at_max_failures_per_job_and_zero_means_never() -> None:
    log = [{"event": "failure", "origin": "node", "retry": True, "job_id": "7"}] * 2
    assert not retries.decide(NODE, log, "7", 2, first_attempt=False, reached_first_step=True).retry
    assert retries.decide(NODE, log, "8", 2, first_attempt=False, reached_first_step=True).retry  # a --resume's job
    assert not retries.decide(NODE, [], "7", 0, first_attempt=False, reached_first_step=True).retry


def test_restarts_after_a_failure_are_counted_apart_from_requeues() -> None:
    log = [{"event": "started", "job_id": "7", "time": 1.0},
           {"event": "failure", "origin": "node", "error": "ECC", "retry": True, "job_id": "7", "time": 2.0},
           {"event": "started", "job_id": "7", "time": 3.0},
           {"event": "failure", "origin": "code", "error": "ValueError", "retry": True, "job_id": "7", "time": 4.0},
           {"event": "started", "job_id": "7", "time": 5.0},
           {"event": "stopped", "requeued": True, "reason": "preemption", "signal": "USR2", "step": 9, "time": 6.0},
           {"event": "started", "job_id": "7", "time": 7.0}]
    counted = restarts.classify(log)
    assert counted.by_cause() == {"node-failure": 1, "rank-failure": 1, "preemption": 1}
    assert "retried without a failed node" in counted.summary()


# ----- the exclusion list -----------------------------------------------------------------------------

def test_a_node_is_left_out_once_and_never_so_many_that_the_run_cannot_start(tmp_path: Path) -> None:
    fitting = ["cpu1", "cpu2", "cpu3", "cpu4"]
    first = exclusions.add(tmp_path, "cpu2", "ECC", task=0, job_id="7", fitting=fitting, needed=2, partition="cpu")
    assert first["excluded"] and exclusions.excluded(tmp_path) == ["cpu2"]
    assert exclusions.add(tmp_path, "cpu2", "again", fitting=fitting, needed=2) == first  # once
    assert exclusions.add(tmp_path, "cpu3", "Xid", fitting=fitting, needed=2)["excluded"]
    refused = exclusions.add(tmp_path, "cpu4", "Killed", fitting=fitting, needed=2, partition="cpu")
    assert not refused["excluded"] and "would leave 1 usable node(s) of the 4 in partition cpu for a run of 2" in \
        refused["why_not"]
    assert exclusions.excluded(tmp_path) == ["cpu2", "cpu3"]
    pinned = exclusions.add(tmp_path, "cpu1", "Killed", pinned=("cpu1", "cpu4"))
    assert not pinned["excluded"] and "sbatch_extra.nodelist" in pinned["why_not"]
    shown = exclusions.lines(tmp_path)
    assert shown[0] == "left out: node cpu2 (task 0, job 7: ECC)" and shown[2].startswith("not left out: node cpu4")


def test_a_damaged_exclusion_list_reads_as_empty(tmp_path: Path) -> None:
    (tmp_path / exclusions.EXCLUDED_FILE).write_text('{"nodes": [{"node": "cpu')
    assert exclusions.read(tmp_path) == [] and exclusions.lines(tmp_path) == []


# ----- an attempt, as the retry step reads it from the run folder -----------------------------------

def test_the_retry_step_reads_only_this_attempts_part_of_each_log(tmp_path: Path) -> None:
    """submitit appends every attempt to the same files: an ECC line of an earlier attempt on another
    node is history; this attempt's killed rank on cpu4 is what counts."""
    folder = tmp_path / "logs" / "7"
    folder.mkdir(parents=True)
    banner = "===== [submit.py] attempt started 2026-12-02 04:17:22: job 7, SLURM restart count {r}, rank {k}/2 on {n}, pid 9 ====="
    old = {0: banner.format(r=0, k=0, n="cpu1") + "\n", 1: banner.format(r=0, k=1, n="cpu2") + "\nCUDA error: uncorrectable ECC error\n"}
    for rank, text in old.items():
        (folder / f"7_{rank}_log.err").write_text(text)
        (folder / f"7_{rank}_log.out").write_text("")
    environ = {"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "1", "SLURM_JOB_NODELIST": "cpu[3-4]",
               "SLURM_NTASKS_PER_NODE": "1", "SLURM_NTASKS": "2"}
    facts.note_start(tmp_path, "7", 1)
    marks = json.loads(facts.marks_path(tmp_path, "7").read_text())
    assert marks["restart"] == 1 and marks["sizes"]["7_1_log.err"] == len(old[1])
    with open(folder / "7_0_log.err", "a") as fh:
        fh.write(banner.format(r=1, k=0, n="cpu3") + "\n[heal] the ECC error of cpu2 is history\n"
                 "srun: error: cpu4: task 1: Killed\n")
    with open(folder / "7_1_log.err", "a") as fh:
        fh.write(banner.format(r=1, k=1, n="cpu4") + "\n")
    with open(folder / "7_0_result.pkl", "wb") as fh:
        pickle.dump(("error", PEER_SYMPTOM), fh)
    ends, first = facts.rank_ends(tmp_path, "7", environ, marks)
    assert [(e.rank, e.node, e.outcome) for e in ends] == [(0, "cpu3", "error"), (1, "cpu4", "none")] and first == 1
    assert "[heal]" not in ends[0].log and "ECC" not in ends[1].log
    verdict = classify(ends, first_dead=first)
    assert (verdict.origin, verdict.nodes) == ("node", ("cpu4",))


def test_the_retry_step_reads_where_each_task_ran_from_the_tasks_own_notes(tmp_path: Path) -> None:
    """Each SLURM task writes its node as data when its attempt starts (rank_notes.write_place); the retry step
    reads it (not the banner's words, nor srun's block placement, which a --distribution=cyclic would break).
    A note of an earlier attempt is not this attempt's."""
    from launcher.reports import rank_notes

    folder = tmp_path / "logs" / "7"
    folder.mkdir(parents=True)
    for rank in (0, 1):
        (folder / f"7_{rank}_log.err").write_text("")
        (folder / f"7_{rank}_log.out").write_text("")
    environ = {"SLURM_JOB_ID": "7", "SLURM_RESTART_COUNT": "0", "SLURM_JOB_NODELIST": "cpu[3-4]",
               "SLURM_NTASKS_PER_NODE": "1", "SLURM_NTASKS": "2"}
    rank_notes.write_place(folder, 1, "cpu2")  # an earlier attempt's note
    (folder / "places" / "task-1.json").write_text(json.dumps({"task": 1, "host": "cpu2", "time": 1.0}))
    facts.note_start(tmp_path, "7", 0)
    marks = json.loads(facts.marks_path(tmp_path, "7").read_text())
    rank_notes.write_place(folder, 0, "cpu4")  # this attempt: tasks placed cyclically, 0 on cpu4
    (folder / "7_0_log.err").write_text("srun: error: cpu4: task 0: Killed\n")
    ends, first = facts.rank_ends(tmp_path, "7", environ, marks)
    assert [(e.rank, e.node) for e in ends] == [(0, "cpu4"), (1, "cpu4")] and first == 0  # 1: srun's placement
    assert rank_notes.places(folder, 0.0) == {0: "cpu4", 1: "cpu2"}


def test_a_later_submission_of_the_run_asks_sbatch_to_leave_its_nodes_out(tmp_path: Path) -> None:
    """--resume RUN (and any submission into the run's folder) excludes the run's left-out nodes, beside the
    profile's own sbatch_extra.exclude; the retry step's lines carry the profile's max_failures and patterns."""
    exclusions.add(tmp_path, "cpu2", "ECC")
    exclusions.add(tmp_path, "cpu1", "Killed", pinned=("cpu1",))  # not left out: not excluded
    profile, _ = load_profile("dev-cluster", {"sbatch_extra": {"exclude": "cpu[3-4]"}, "max_failures": 1,
                                              "node_error_patterns": ["LustreError"]})
    sub = build(profile, [point(profile, 0, JobConfig(name="digits"))], tmp_path, is_sweep=False)
    script = sbatch_script(sub)
    assert "#SBATCH --exclude=cpu3,cpu4,cpu2" in script.splitlines()
    (after,) = [line for line in script.splitlines() if "-m launcher.heal after" in line]
    policy = json.loads(after.split(" after \"$srun_status\" ", 1)[1].split("'")[1])
    assert policy["max_failures"] == 1 and policy["patterns"] == ["LustreError"] and policy["run"] == str(tmp_path)
    fresh = build(profile, [point(profile, 0, JobConfig(name="digits"))], tmp_path / "new-run", is_sweep=False)
    assert "--exclude=cpu3,cpu4\n" in sbatch_script(fresh) + "\n"  # a new run: only the profile's own


def test_a_retry_in_the_allocation_runs_the_batch_script_again_counted(tmp_path: Path) -> None:
    """The retry step's teardown line as the batch script runs it: srun fails, `after` answers 76, the script runs
    itself again ($0, with DDP_SUBMIT_RERUN=1); srun succeeds and the job ends 0. Any other answer is the job's
    exit status, as before."""
    import os
    import subprocess

    from launcher.cluster.slurm.healing import RERUN_EXIT, RetryPolicy, lines

    policy = RetryPolicy(run=str(tmp_path), max_failures=2, patterns=(), partition="", nodes=1, tasks_per_node=1,
                         cpus_per_task=1, mem_per_node_mb=0, gpus_per_node=0, gpu_type="", pinned="", stop_signal="USR2")
    fake = tmp_path / "python"  # stands for the tasks' interpreter running `-m launcher.heal after STATUS POLICY`
    for answer, expected in ((RERUN_EXIT, 0), (1, 1)):
        (tmp_path / "runs").unlink(missing_ok=True)
        fake.write_text(f'#!/bin/sh\necho "after $4 rerun=${{DDP_SUBMIT_RERUN:-0}}" >> {tmp_path}/said\nexit {answer}\n')
        fake.chmod(0o755)
        _, after = lines(policy, str(fake))
        script = tmp_path / "slurm_script"
        script.write_text("#!/bin/bash\n"
                          f'n=$(cat {tmp_path}/runs 2>/dev/null || echo 0); echo $((n + 1)) > {tmp_path}/runs\n'
                          f'echo "run $((n + 1)) rerun=${{DDP_SUBMIT_RERUN:-0}}" >> {tmp_path}/said\n'
                          '[ "$n" -ge 1 ]  # srun: fails the first time\n' + after[0] + "\n")
        script.chmod(0o755)
        (tmp_path / "said").unlink(missing_ok=True)
        done = subprocess.run([str(script)], env={**os.environ, "DDP_SUBMIT_RERUN": ""}, timeout=30)
        said = (tmp_path / "said").read_text().splitlines()
        assert done.returncode == expected, said
        if answer == RERUN_EXIT:
            assert said == ["run 1 rerun=0", "after 1 rerun=0", "run 2 rerun=1"], said
        else:
            assert said == ["run 1 rerun=0", "after 1 rerun=0"], said


def test_a_failure_of_the_code_is_retried_in_the_allocation_while_time_is_left() -> None:
    from launcher.cluster.slurm import requeue
    from launcher.heal.attempt import RERUN_MIN_LEFT_S, _in_place

    import datetime
    import time

    code = Verdict("code", 1, "RuntimeError: x", (), signature="RuntimeError at a.py:3")
    node = Verdict("node", 1, "ECC", ("cpu2",))

    def ending_in(seconds: float) -> dict[str, str]:  # a job record's EndTime, as scontrol writes it
        return {"EndTime": datetime.datetime.fromtimestamp(time.time() + seconds).strftime("%Y-%m-%dT%H:%M:%S")}

    assert requeue.seconds_left(ending_in(600)) == pytest.approx(600, abs=2)
    assert requeue.seconds_left({"EndTime": "Unknown"}) is None
    assert _in_place(code, ending_in(RERUN_MIN_LEFT_S + 60)) and _in_place(code, {"EndTime": "Unknown"})
    assert not _in_place(code, ending_in(RERUN_MIN_LEFT_S - 60))  # too little left: a requeue gets a whole limit
    assert not _in_place(node, ending_in(3600))  # a node's failure: requeued without that node
