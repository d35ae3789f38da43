"""Runs that heal themselves, on the SLURM dev cluster (the retry step of the batch script, launcher.heal).

A node that stays up but makes every rank on it fail with a GPU's uncorrectable ECC error
(tests/userpkg/faults.py) fails the first attempt at step 22; the run comes back by itself without that
node, resumes from the checkpoint of step 20 and ends bitwise equal to a run that met no fault, and
`status`, `watch` and `--json` name the node it left out. A bug that raises at the same place on every
attempt is retried once and then stops, the exception shown. A `script:` whose rank is killed comes back too,
though srun stopped its peer with SIGTERM (a stop, but not the scheduler's). Small jobs: the tests' user function
(tests/userpkg/tiny.py), 2 nodes x 1 task, 2 epochs of 16 steps, a checkpoint every 4 steps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT, last_json, run_submit, wait_until
from tests.test_exact_resume import _popen_submit, rank_pid
from trainer.rank import events
from trainer.rank.checkpoint import same_weights

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_cluster")]

JOB = """name: tiny-healing
entrypoint: "tests.userpkg.tiny:train"
target_metric: accuracy
checkpoint_every_steps: 4
config:
  epochs: 2
"""
FAULT_AT = 22  # a checkpoint at step 20 comes before it


class Run:
    """A `submit.py --wait --json` on the dev cluster, from the project root (tests.userpkg is found there)."""

    def __init__(self, tmp: Path, *sets: str) -> None:
        self.tmp = tmp
        (tmp / "job.yaml").write_text(JOB)
        args = ["--profile", "dev-cluster", "--job", str(tmp / "job.yaml"), "--set", f"profile.runs_dir={tmp}",
                *[word for s in sets for word in ("--set", s)], "--wait", "--json"]
        self.proc = _popen_submit(args, ROOT)
        self.done: tuple[int, str, str] | None = None

    def result(self) -> tuple[int, dict[str, Any], str]:
        if self.done is None:
            try:
                out, err = self.proc.communicate(timeout=900)
            finally:
                self.proc.kill()
            self.done = (self.proc.returncode, out, err)
        code, out, err = self.done
        assert out.strip(), err[-3000:]
        return code, last_json(out), err


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Three runs at once: an unfaulted reference, one on a bad node, one with a bug."""
    tmp = {name: tmp_path_factory.mktemp(name) for name in ("reference", "faulty", "buggy")}
    return {"reference": Run(tmp["reference"]),
            "faulty": Run(tmp["faulty"], f"job.config.bad_node_file={tmp['faulty'] / 'bad-node'}",
                          f"job.config.node_fault_at_step={FAULT_AT}"),
            "buggy": Run(tmp["buggy"], f"job.config.fail_at_step={FAULT_AT}")}


def events_named(run_dir: Path, name: str) -> list[dict[str, Any]]:
    return [e for e in events.read(run_dir) if e["event"] == name]


def test_a_node_that_fails_every_rank_on_it_is_left_out_and_the_run_completes_bitwise_equal(
        runs: dict[str, Run]) -> None:
    code, result, err = runs["faulty"].result()
    assert code == 0, err[-3000:]
    run_dir = Path(result["run_dir"])
    bad = (runs["faulty"].tmp / "bad-node").read_text()
    assert result["state"] == "COMPLETED" and result["restarts"] == 1, result
    assert result["restart_causes"] == {"node-failure": 1}, result
    assert bad not in result["nodes"] and len(set(result["nodes"])) == 2, (bad, result["nodes"])
    (failure,) = events_named(run_dir, "failure")
    assert failure["origin"] == "node" and failure["nodes"] == [bad] and failure["retry"], failure
    assert "uncorrectable ECC error" in failure["error"]
    assert [e["step"] for e in events_named(run_dir, "resumed")] == [20]  # from the checkpoint, not from scratch
    ref_code, reference, ref_err = runs["reference"].result()
    assert ref_code == 0 and reference["restarts"] == 0, ref_err[-3000:]
    assert same_weights(Path(reference["run_dir"]) / "weights.pt", run_dir / "weights.pt")

    shown = run_submit(["status", str(run_dir)], cwd=ROOT, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert f"left out: node {bad} (task 0, job {result['job_id']}: rank 1: RuntimeError: CUDA error: " \
           f"uncorrectable ECC error encountered)" in shown.stdout, shown.stdout
    (row,) = [json.loads(line) for line in run_submit(["status", str(run_dir), "--json"], cwd=ROOT,
                                                      timeout=60).stdout.splitlines()]
    assert row["restart_causes"] == {"node-failure": 1} and [e["node"] for e in row["excluded_nodes"]] == [bad]
    watched = run_submit(["watch", str(run_dir), "--once"], cwd=ROOT, timeout=60)
    assert watched.returncode == 0 and f"left out: node {bad}" in watched.stdout, watched.stdout


def test_a_bug_that_raises_on_every_attempt_stops_after_the_second_identical_failure(runs: dict[str, Run]) -> None:
    code, result, err = runs["buggy"].result()
    assert code == 1, err[-3000:]
    assert err.startswith(f"error: the run failed on rank 0: RuntimeError: failing on purpose at step {FAULT_AT}")
    assert "Traceback (most recent call last)" in err
    assert "not retried: the same RuntimeError at " in err and "tests/userpkg/tiny.py:" in err, err[-2000:]
    assert result["state"] == "FAILED" and result["restarts"] == 1, result
    assert result["restart_causes"] == {"rank-failure": 1}, result
    run_dir = Path(result["run_dir"])
    failures = events_named(run_dir, "failure")
    assert [(f["origin"], f["retry"]) for f in failures] == [("code", True), ("code", False)], failures
    assert failures[0]["signature"] == failures[1]["signature"]
    assert [e["step"] for e in events_named(run_dir, "resumed")] == [20]
    assert not (run_dir / "excluded-nodes.json").exists()  # the code's failure leaves every node in
    # Retried in its own allocation: one life of the job in accounting, never requeued (no wait for the job
    # credential to expire, no turn in the queue), its two attempts under one SLURM restart count.
    assert failures[0]["in_place"] is True and "in this allocation" in failures[0]["why"], failures[0]
    sacct = subprocess.run(["sacct", "-j", result["job_id"], "-X", "-D", "-n", "-P", "-o", "State"],
                           capture_output=True, text=True, timeout=30).stdout.split()
    assert sacct == ["FAILED"], sacct
    assert [e["slurm_restart_count"] for e in events_named(run_dir, "started")] == [0, 0]


def test_a_script_whose_rank_is_killed_comes_back_by_itself_and_completes(tmp_path: Path) -> None:
    # Rank 0 may outlive rank 1 until srun's --kill-on-bad-exit sends it SIGTERM, and then stop at a step boundary
    # as on any SIGTERM; the retry step must still see rank 1's end. A script's first steps are marked by its own
    # trainer.api.init() process (the retry step's "after the first step": before, a failure is not retried).
    (tmp_path / "job.yaml").write_text(f"name: script-healing\nscript: {ROOT / 'tests' / 'userpkg' / 'script_job.py'}\n"
                                       f"args: ['3', '0.2']\ncode_dir: {ROOT}\n")
    proc = _popen_submit(["--profile", "dev-cluster", "--job", str(tmp_path / "job.yaml"), "--set",
                          f"profile.runs_dir={tmp_path / 'runs'}", "--wait", "--json"], ROOT)
    try:
        run_dir = wait_until(lambda: next((tmp_path / "runs").glob("*/metrics.jsonl"), None), 600,
                             "the script's first epoch").parent
        os.kill(wait_until(lambda: rank_pid(run_dir, 1), 60, "rank 1's pid"), signal.SIGKILL)
        out, err = proc.communicate(timeout=900)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-3000:]
    result = last_json(out)
    assert result["state"] == "COMPLETED" and result["restarts"] == 1, result
    (failure,) = events_named(run_dir, "failure")
    assert failure["rank"] == 1 and failure["retry"] and "Killed" in failure["error"], failure
    # Rank 0 either stopped on srun's SIGTERM at a step boundary (recorded as such) or failed in a collective
    # with the dead rank first: either way the retry step read rank 1's end.
    assert all(e["kind"] == "terminate" and not e["requeued"] for e in events_named(run_dir, "stopped"))


def test_a_job_slurm_requeued_after_node_fail_leaves_the_lost_node_out_before_it_starts_again(tmp_path: Path) -> None:
    # The lost node is the batch host (its slurmd, slurmstepds and job processes killed, tests/test_node_failure.py):
    # nothing of the job is left to react (the retry step runs there), and SLURM requeues the job itself once the
    # node stops answering (NODE_FAIL). A blocker holds the cluster's other cpu nodes, so the requeued job waits:
    # `--wait` must set its ExcNodeList while it waits, not move it once it started there (no "moved" event).
    # Whole nodes (4 CPUs a task on the dev cluster's 4-CPU nodes): nothing else runs on the node killed.
    from launcher.devcluster.faults import kill_node, restore, scontrol_job

    blocker, lost, run = "", "", None
    try:
        blocker = subprocess.run(["sbatch", "--parsable", "-p", "cpu", "-N", "2", "-n", "2", "-c", "4", "-t", "10",
                                  "-o", "/dev/null", "--wrap", "sleep 600"], capture_output=True, text=True,
                                 check=True, timeout=30).stdout.strip()
        wait_until(lambda: scontrol_job(blocker).get("JobState") == "RUNNING", 600, "the blocker on two cpu nodes")
        run = Run(tmp_path, "profile.cpus_per_task=4", "profile.time=30", "job.config.step_sleep_s=0.5")

        def started() -> tuple[Path, str] | None:
            ckpt = next(tmp_path.glob("*/checkpoints/ckpt-*.pt"), None)  # (past the first step: a true restart)
            ids = [e.get("job_id") for e in events.read(ckpt.parent.parent)] if ckpt else []
            return (ckpt.parent.parent, str(ids[0])) if ids and ids[0] else None

        run_dir, job_id = wait_until(started, 600, "the run's first checkpoint")
        node = lost = scontrol_job(job_id)["BatchHost"]
        kill_node(job_id, node)
        pending = wait_until(lambda: (j := scontrol_job(job_id)).get("JobState") == "PENDING"
                             and j.get("ExcNodeList") == node and j, 180, f"job {job_id} pending without {node}")
        assert pending["Restarts"] == "1", pending
        restore(node)
        lost = ""
        subprocess.run(["scancel", blocker], check=True, timeout=30)
        code, result, err = run.result()
    finally:
        if lost:
            restore(lost)
        if blocker:
            subprocess.run(["scancel", blocker], timeout=30, check=False)
        if run is not None:
            run.proc.kill()
    assert code == 0, err[-3000:]
    assert result["state"] == "COMPLETED" and result["restarts"] == 1 and node not in result["nodes"], result
    assert f"job {job_id} waits to start again: {node} left out of it before it starts" in err, err[-3000:]
    assert not events_named(run_dir, "moved"), events.read(run_dir)
    (failure,) = events_named(run_dir, "failure")
    assert failure["evidence"] == "NODE_FAIL" and not failure["retry"], failure
    (row,) = [json.loads(line) for line in run_submit(["status", str(run_dir), "--json"], cwd=ROOT,
                                                      timeout=60).stdout.splitlines()]
    assert row["restart_causes"] == {"node-failure": 1}, row
    assert [(e["node"], e["excluded"], e["reason"]) for e in row["excluded_nodes"]] == [
        (node, True, f"SLURM lost node {node} (NODE_FAIL)")], row


@pytest.mark.parametrize("signal_name", ["USR2", "KILL"])
def test_a_signal_that_comes_after_the_ranks_returned_their_results_ends_the_job_completed_in_one_attempt(
        tmp_path: Path, signal_name: str) -> None:
    # A time limit's warning (the stop signal, USR2) that arrives as the ranks exit, after their results are written:
    # it once reached submitit's handler, which requeued the finished job; its last steps ran again and met the signal
    # again, until max_failures ended it FAILED (the chaos soak's run39). The ranks' own handlers now only note it.
    # A signal no handler takes (KILL) fails srun after the results: the retry step sees the work done.
    from launcher.devcluster.faults import scontrol_job

    code, result, err = Run(tmp_path, f"job.config.signal_at_exit={signal_name}").result()
    assert code == 0, err[-3000:]
    run_dir = Path(result["run_dir"])
    assert result["state"] == "COMPLETED" and result["restarts"] == 0, result
    job = wait_until(lambda: (j := scontrol_job(result["job_id"])).get("JobState") not in ("RUNNING", "COMPLETING")
                     and j, 120, f"the end of job {result['job_id']}")
    assert (job["JobState"], job["Restarts"]) == ("COMPLETED", "0"), job
    assert not events_named(run_dir, "failure") and len(events_named(run_dir, "started")) == 1, events.read(run_dir)
    log = next((run_dir / "logs").glob("*/*_0_log.out")).read_text()
    healed = "every rank returned its result in this attempt; srun's exit status" in log
    assert healed == (signal_name == "KILL") and "Requeued job" not in log, log[-3000:]
