"""What the launcher's structure promises users: runs are found in the profile's runs_dir by every
command, `status` inside a SLURM job describes the run (not the enclosing job), and the private
parts of submitit the requeue relies on are present in the installed version."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from launcher import submitit_private
from tests.helpers import ROOT, SUBMIT, last_json, run_submit, wait_until


def test_installed_submitit_has_the_private_parts_we_use() -> None:
    assert submitit_private.check() == []


def test_a_missing_private_part_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from submitit.core.job_environment import SignalHandler

    monkeypatch.delattr(SignalHandler, "has_timed_out")
    missing = submitit_private.check()
    assert len(missing) == 1 and "SignalHandler.has_timed_out" in missing[0]


def test_a_torchrun_workers_time_out_rule_is_submitits_own() -> None:
    # A `launch: torchrun` rank has no submitit handler: it applies submitit's rule to its node task's clock.
    import time

    from submitit.core.job_environment import SignalHandler
    from submitit.core.utils import DelayedSubmission

    for minutes, ran_s in ((30, 60), (30, 1300), (10, 5), (1, 5)):  # 20 min of 30: a time-out from there
        delayed = DelayedSubmission(print)
        delayed._timeout_min = minutes
        handler = SignalHandler(None, None, delayed)  # type: ignore[arg-type]
        handler._start_time = time.time() - ran_s
        clock = submitit_private.timeout_clock(handler)
        assert submitit_private.has_timed_out(clock) == handler.has_timed_out() == (ran_s >= min(
            minutes * 48, minutes * 60 - 600)), (minutes, ran_s)


def test_status_list_and_resume_find_runs_in_the_profiles_runs_dir(tmp_path: Path) -> None:
    """A profile with its own runs_dir: the run lands there, and `status`, `list`, `logs` and
    `--resume` find it by name with --profile (not in ./runs)."""
    profile = tmp_path / "mine.yaml"
    profile.write_text("extends: local\nruns_dir: elsewhere/runs\n")
    failed = run_submit(["--profile", str(profile), "--set", "job.epochs=1", "--set", "job.fail_at=3:1",
                         "--json"], tmp_path)
    assert failed.returncode == 1, failed.stderr
    run_dir = Path(last_json(failed.stdout)["run_dir"])
    assert run_dir.parent == (tmp_path / "elsewhere" / "runs").resolve() and not (tmp_path / "runs").exists()

    status = run_submit(["status", run_dir.name, "--profile", str(profile), "--json"], tmp_path)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout.splitlines()[0])["state"] == "failed"
    newest = run_submit(["status", "--profile", str(profile), "--json"], tmp_path)
    assert newest.returncode == 0 and json.loads(newest.stdout.splitlines()[0])["task_dir"] == str(run_dir)
    listed = run_submit(["list", "--profile", str(profile), "--json"], tmp_path)
    assert [json.loads(line)["run"] for line in listed.stdout.splitlines()] == [run_dir.name]
    assert "no runs in" in run_submit(["list"], tmp_path).stdout  # ./runs (the local profile's) is empty
    logs = run_submit(["logs", run_dir.name, "--profile", str(profile), "--rank", "1", "--err"], tmp_path)
    assert "injected failure at step 3 on rank 1" in logs.stdout

    # Without --profile the name is looked up in the local profile's runs_dir, and refused cleanly.
    lost = run_submit(["--resume", run_dir.name], tmp_path)
    assert lost.returncode == 2 and "not a run folder" in lost.stderr and "Traceback" not in lost.stderr
    dry = run_submit(["--resume", run_dir.name, "--profile", str(profile), "--dry-run"], tmp_path)
    assert dry.returncode == 0 and "would resubmit task(s) 0" in dry.stdout
    resumed = run_submit(["--resume", run_dir.name, "--profile", str(profile), "--set", "job.fail_at=",
                          "--json"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert last_json(resumed.stdout)["state"] == "COMPLETED"


@pytest.mark.slurm
def test_status_inside_a_slurm_job_describes_the_run(slurm_cluster: Path, tmp_path: Path) -> None:
    """`submit.py status` run as a step of another SLURM job (a pipeline's check) must ask about the
    run, not the job it runs in: the enclosing job's variables (its id, and a user's
    SLURM_TIME_FORMAT exported with it) must not leak into sacct and squeue."""
    done = run_submit(["--profile", "dev-cluster", "--set", "profile.nodes=1", "--set", "job.epochs=1",
                       "--set", f"profile.runs_dir={tmp_path / 'runs'}", "--wait", "--json"], tmp_path)
    assert done.returncode == 0, done.stderr
    run_dir = last_json(done.stdout)["run_dir"]
    wait_until(lambda: (s := json.loads(run_submit(["status", run_dir, "--json"], tmp_path).stdout
                                        .splitlines()[0]))["source"] == "sacct" and s["wall_time_s"] is not None,
               60, "accounting to record the run's end")
    # Accounting may record a short job's steps (MaxRSS and TotalCPU among them) after its allocation:
    # `status` is asked, inside the job and out, once sacct's answer no longer changes.
    rows = _settled_sacct(last_json(done.stdout)["job_id"])
    outside = json.loads(run_submit(["status", run_dir, "--json"], tmp_path).stdout.splitlines()[0])
    out_file = tmp_path / "inside.json"
    wrap = f"cd {ROOT} && exec python3 {SUBMIT} status {run_dir} --json > {out_file}"
    env = {**os.environ, "SLURM_TIME_FORMAT": "relative", "SQUEUE_FORMAT": "%i"}
    sbatch = subprocess.run(["sbatch", "--parsable", "--export=ALL", "-N1", "-n1", "-t", "2", "-o",
                             str(tmp_path / "wrap.out"), "--wrap", wrap], env=env, capture_output=True,
                            text=True, timeout=30, check=True)
    enclosing = sbatch.stdout.strip().split(";")[0]
    wait_until(lambda: out_file.exists() and out_file.read_text().strip(), 120, "status inside the job")
    inside = json.loads(out_file.read_text().splitlines()[0])
    assert inside["job_id"] == outside["job_id"] != enclosing
    assert inside["state"] == "completed" and inside["source"] == "sacct"
    # Start and end read from sacct in its standard format, as outside the job.
    assert inside["start"] is not None and inside["end"] is not None
    assert inside == outside
    _assert_cost_is_what_sacct_reports(outside, rows, run_dir, tmp_path)


# sacct's states of a job (or step) that is not over yet.
_NOT_OVER = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED")


def _settled_sacct(job_id: str) -> list[dict[str, str]]:
    """sacct's rows of the job, allocation and steps (bytes: --noconvert), once every row is over and two
    reads in a row agree: what `status` computes the cost from, no longer changing."""
    seen: list[list[dict[str, str]]] = []

    def read() -> list[dict[str, str]] | None:
        out = subprocess.run(["sacct", "-D", "-P", "--noconvert", "-j", job_id,
                              "--format=JobID,State,ElapsedRaw,TotalCPU,AllocCPUS,NNodes,MaxRSS"], capture_output=True,
                             text=True, timeout=30, check=True).stdout.splitlines()
        rows = [dict(zip(out[0].split("|"), line.split("|"))) for line in out[1:]]
        over = len(rows) > 1 and all(r["State"].split()[0] not in _NOT_OVER for r in rows)  # the steps are there
        settled = over and seen and seen[-1] == rows
        seen.append(rows)
        return rows if settled else None
    return wait_until(read, 120, "sacct to record the job's steps", poll=2)


def _assert_cost_is_what_sacct_reports(task: dict, rows: list[dict[str, str]], run_dir: str, cwd: Path) -> None:
    """Issue 21: a finished dev-cluster run's `status --json` holds its elapsed time, CPU efficiency, peak
    memory against mem_per_task and node-hours, equal to sacct's own figures (here in bytes, --noconvert);
    its table shows them and names the request it used under half of (10 minutes for a run of seconds).
    A figure sacct has not recorded for a job of seconds (MaxRSS, TotalCPU) is None in `status`, never a failure."""
    alloc = next(r for r in rows if r["JobID"] == task["job_id"])
    elapsed, cpus, nodes = int(alloc["ElapsedRaw"]), int(alloc["AllocCPUS"]), int(alloc["NNodes"])
    cost = task["cost"]
    assert cost["elapsed_s"] == elapsed > 0 and cost["alloc_cpus"] == cpus and cost["nodes"] == nodes == 1
    if alloc["TotalCPU"]:
        minutes, seconds = alloc["TotalCPU"].rsplit(":", 1)
        total_cpu = int(minutes.split(":")[-1]) * 60 + float(seconds)
        assert cost["cpu_efficiency"] == pytest.approx(total_cpu / (elapsed * cpus), abs=1e-4)
    else:
        assert cost["cpu_efficiency"] is None
    peaks = [int(r["MaxRSS"]) for r in rows if r["MaxRSS"]]
    assert cost["max_rss_mb"] == (pytest.approx(max(peaks) / 2**20, abs=0.1) if peaks else None), (cost, rows)
    assert cost["mem_requested_mb"] == 768
    assert cost["node_hours"] == pytest.approx(elapsed * nodes / 3600, abs=1e-6)
    table = run_submit(["status", run_dir], cwd).stdout
    assert f"{cost['node_hours']:.4f} node-h" in table and "cost: the longest task ran" in table
    assert "lower time (now 10)" in table
