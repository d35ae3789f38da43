"""Requeues on the real dev cluster: a preemption signal (the job requeues itself through submitit),
`scontrol requeue` (SLURM requeues it), and the pre-timeout signal of a short time limit. Every
interrupted run resumes from its checkpoint in the same run folder and ends bitwise identical to
the uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from launcher.devcluster.faults import job_start
from tests.helpers import assert_one_mlflow_run, last_json, recipe_params, run_submit, wait_until
from tests.test_exact_resume import _popen_submit, attempt_banners, rank_pid
from trainer.rank import events
from trainer.rank.checkpoint import same_weights

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_cluster")]

JOB = "extends: digits\nname: digits-requeue\nepochs: 120\neval_every_epochs: 40\nlog_every_steps: 100000\n"
# 30 minutes: submitit calls a signal in the first 20 minutes a preemption (later: a time-out), and
# no requeue after a time-out is allowed, so the requeue below shows that preemptions are not capped.
PROFILE = ["--profile", "dev-cluster", "--wait", "--set", "profile.time=30",
           "--set", "profile.max_timeout_requeues=0", "--json"]


class Background:
    """A `submit.py --wait` running while the test acts on its job."""

    def __init__(self, cwd: Path, args: list[str], job: str = JOB) -> None:
        (cwd / "job.yaml").write_text(job)
        self.cwd, self.proc = cwd, _popen_submit(["--job", "job.yaml", *args], cwd)
        self._result: dict[str, Any] | None = None

    @property
    def run_dir(self) -> Path:
        return wait_until(lambda: next((self.cwd / "runs").glob("*/run.json"), None), 60, "the run folder").parent

    def result(self) -> dict[str, Any]:
        if self._result is None:
            try:
                out, err = self.proc.communicate(timeout=400)
            finally:
                self.proc.kill()
            assert self.proc.returncode == 0, err[-3000:]
            self._result = last_json(out)
        return self._result


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Background:
    """The uninterrupted run, started at once so that it trains while the tests interrupt theirs."""
    return Background(tmp_path_factory.mktemp("reference"), PROFILE)


def events_of(run_dir: Path, name: str) -> list[dict[str, Any]]:
    return [e for e in events.read(run_dir) if e["event"] == name]


def epochs_done(run_dir: Path) -> int:
    path = run_dir / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_preemption_signal_then_scontrol_requeue_resume_exactly(reference: Background, tmp_path: Path) -> None:
    # Also fed to MLflow (a file store beside the run folders): one MLflow run across the 3 attempts on 2 nodes.
    run = Background(tmp_path, PROFILE, JOB + "tracker: {mlflow: {}}\n")
    run_dir = run.run_dir
    wait_until(lambda: epochs_done(run_dir) >= 2, 180, "training")
    job_id = events_of(run_dir, "started")[0]["job_id"]
    # A preemption warning: SLURM's --signal is delivered to every task of the job's steps.
    subprocess.run(["scancel", "--signal=USR2", job_id], check=True, timeout=30)
    wait_until(lambda: events_of(run_dir, "resumed"), 180, "the first resume")
    done = epochs_done(run_dir)
    wait_until(lambda: epochs_done(run_dir) > done, 120, "training after the first resume")
    subprocess.run(["scontrol", "requeue", job_id], check=True, timeout=30)  # SIGTERM, then a new start
    result = run.result()

    assert result["restarts"] == 2 and result["restart_causes"] == {"preemption": 1, "slurm-requeue": 1}
    first, second = events_of(run_dir, "stopped")
    assert first["signal"] == "USR2" and first["requeued"] and first["reason"] == "preemption"
    assert second["signal"] == "TERM" and not second["requeued"]  # SLURM requeued it, not the job
    resumed = events_of(run_dir, "resumed")
    assert [e["step"] for e in resumed] == [first["step"], second["step"]]  # nothing lost either time
    assert [e["slurm_restart_count"] for e in events_of(run_dir, "started")] == [0, 1, 2]
    assert attempt_banners(run_dir, 0) == 3 and attempt_banners(run_dir, 1) == 3
    ref = reference.result()
    assert ref["restarts"] == 0
    assert same_weights(Path(ref["run_dir"]) / "model_final.pt", run_dir / "model_final.pt")
    assert len(set(result["nodes"])) == 2, result["nodes"]
    assert_one_mlflow_run(run_dir, "digits-requeue", recipe_params(run_dir, "dev-cluster"), job_id, attempts=3)


def test_time_limit_signal_requeues_then_the_time_out_cap_ends_the_job(tmp_path: Path) -> None:
    # A 1-minute limit with the signal 45 s before it: SLURM signals each attempt 15-45 s after it
    # starts (it checks limits every 30 s). One requeue after a time-out is allowed, not two.
    (tmp_path / "job.yaml").write_text("extends: digits\nname: digits-long\nepochs: 5000\neval_every_epochs: 5000\n")
    proc = run_submit(["--job", "job.yaml", "--profile", "dev-cluster", "--wait", "--set", "profile.time=1",
                       "--set", "profile.signal_delay_s=45", "--set", "profile.max_timeout_requeues=1", "--json"],
                      cwd=tmp_path, timeout=400)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = last_json(proc.stdout)
    assert result["restarts"] == 1 and result["restart_causes"] == {"timeout": 1}
    assert "timed-out too many times" in result["error"] and "python submit.py --resume" in proc.stderr
    run_dir = Path(result["run_dir"])
    first, second = events_of(run_dir, "stopped")
    assert first["requeued"] and first["reason"] == "timeout" and not second["requeued"]
    (resumed,) = events_of(run_dir, "resumed")
    assert resumed["step"] == first["step"]


def test_a_run_requeued_by_its_time_limit_completes_bitwise_identical_to_an_uninterrupted_one(
        tmp_path: Path) -> None:
    # A 1-minute limit with the signal 45 s before it: SLURM signals each attempt 15-45 s after it
    # starts. So that the first attempt cannot end before its signal however fast this machine is, the
    # test freezes both ranks (SIGSTOP: a slow machine) mid-training until the signal is due, then lets
    # them go: they stop at the next step, checkpoint and requeue as a time-out; later attempts finish
    # the remaining steps (on a loaded machine an attempt may do little before its signal: many
    # time-out requeues are allowed).
    # 4 epochs: the attempts after the frozen one finish them in one or two more (each attempt costs
    # 2 rank starts and a requeue; 10 epochs took up to 7 attempts on a loaded machine).
    job = "extends: digits\nname: digits-timelimit\nepochs: 4\neval_every_epochs: 4\nlog_every_steps: 100000\n"
    for name in ("limited", "plain"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "job.yaml").write_text(job)
    common = ["--job", "job.yaml", "--profile", "dev-cluster", "--wait", "--json"]
    reference = _popen_submit([*common, "--set", "profile.time_min=10"], tmp_path / "plain")
    run = _popen_submit([*common, "--set", "profile.time_min=1", "--set", "profile.signal_delay_s=45",
                         "--set", "profile.max_timeout_requeues=20",
                         # a collective in flight when the ranks froze must not time out once they resume
                         "--set", "profile.collective_timeout_s=600"], tmp_path / "limited")
    try:
        run_dir = wait_until(lambda: next((tmp_path / "limited" / "runs").glob("*/run.json"), None), 120,
                             "the run folder").parent
        wait_until(lambda: (run_dir / "metrics.jsonl").exists(), 180, "the first epoch", poll=0.02)
        # Frozen first (an epoch takes a fraction of a second here), then held until the signal is due.
        pids = [rank_pid(run_dir, 0), rank_pid(run_dir, 1)]
        try:
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            due = job_start(events_of(run_dir, "started")[0]["job_id"]) + 47  # SLURM has signalled by then
            time.sleep(max(0.0, due - time.time()))  # none: this machine was slow enough by itself
        except ProcessLookupError:
            pass  # that attempt had already stopped on its signal (a slow machine needs no freezing)
        finally:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        out, err = run.communicate(timeout=780)
        ref_out, ref_err = reference.communicate(timeout=300)
    finally:
        run.kill()
        reference.kill()
    assert run.returncode == 0, out + err[-3000:]
    assert reference.returncode == 0, ref_err[-3000:]
    result, ref = last_json(out), last_json(ref_out)
    assert result["restarts"] >= 1 and result["restart_causes"] == {"timeout": result["restarts"]}, result
    assert ref["restarts"] == 0
    stopped = events_of(run_dir, "stopped")
    assert len(stopped) == result["restarts"]
    assert all(e["requeued"] and e["reason"] == "timeout" for e in stopped), stopped
    assert [e["step"] for e in events_of(run_dir, "resumed")] == [e["step"] for e in stopped]  # nothing lost
    assert result["epochs"] == ref["epochs"] == 4
    assert same_weights(Path(ref["run_dir"]) / "model_final.pt", run_dir / "model_final.pt")
