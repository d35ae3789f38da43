"""Sweeps as SLURM job arrays on the real dev cluster: one sbatch, the parallelism cap, the summary
table and plot, a failing task and `--resume`, a split array, `--after`, and `--dry-run`.

Every sweep here is tiny (digits, 1-2 epochs, one node per task unless the test is about multi-node
tasks) so that a whole sweep takes seconds; runs go to the test's own folder (cwd/runs).
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from launcher.rundir.layout import SIGNATURES_DIR
from tests.helpers import ROOT, SUBMIT, last_json, run_submit, wait_until

pytestmark = pytest.mark.slurm

PROFILE = ["--profile", "dev-cluster"]
ONE_NODE = ["--set", "profile.nodes=1"]

SIX_TASKS = """\
extends: digits
name: six-task-sweep
epochs: 2
eval_every_epochs: 1
sweep:
  grid:
    lr: [0.01, 0.05, 0.1]
    batch_size_per_rank: [32, 64]
"""

# Task 2 raises at global step 50 (epoch 2 of 43 steps each), after checkpoints at steps 20, 40 and
# the end of epoch 1; `--resume --set job.fail_at=` lets it continue from the step-43 checkpoint.
WITH_A_FAILING_TASK = """\
extends: digits
name: failing-sweep
epochs: 2
eval_every_epochs: 1
checkpoint_every_steps: 20
sweep:
  tasks:
    - {lr: 0.05}
    - {lr: 0.1}
    - {lr: 0.1, fail_at: "50:0"}
"""

THREE_TASKS = """\
extends: digits
name: split-sweep
epochs: 1
sweep:
  grid:
    lr: [0.05, 0.1, 0.2]
"""


def write(folder: Path, name: str, text: str) -> str:
    path = folder / name
    path.write_text(text)
    return str(path)


def sacct_rows(job_ids: list[str]) -> dict[str, dict[str, str]]:
    """sacct's JobID, State, Start, End, NNodes of the given jobs (array tasks one by one)."""
    bases = ",".join(dict.fromkeys(j.split("_")[0] for j in job_ids))
    out = subprocess.run(["sacct", "-X", "-P", "-n", "-j", bases, "--format=JobID,State,Start,End,NNodes"],
                         capture_output=True, text=True, check=True).stdout
    rows = {}
    for line in out.splitlines():
        jid, state, start, end, nnodes = line.split("|")
        rows[jid] = {"state": state, "start": start, "end": end, "nnodes": nnodes}
    return rows


def epoch(text: str) -> float:
    return datetime.datetime.fromisoformat(text).timestamp()


def wait_for_accounting(job_ids: list[str], timeout: float = 30) -> dict[str, dict[str, str]]:
    """slurmdbd records a job's end a moment after the controller: wait until every job has one."""
    deadline = time.monotonic() + timeout
    while True:
        rows = sacct_rows(job_ids)
        if all(j in rows and rows[j]["end"] not in ("Unknown", "") for j in job_ids) \
                or time.monotonic() > deadline:
            return rows
        time.sleep(1)


def max_concurrent(intervals: list[tuple[float, float]]) -> int:
    """Most intervals [start, end) open at one time (a task starting the second another ends is not
    concurrent with it: sacct times have one-second resolution)."""
    points = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda p: (p[0], p[1]))
    running = best = 0
    for _, delta in points:
        running += delta
        best = max(best, running)
    return best


def status_json(run_dir: str, cwd: Path, env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    done = run_submit(["status", run_dir, "--json"], cwd, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def read_summary(run_dir: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(run_dir / "summary.csv", newline="") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


# ----- a 6-task sweep, at most 2 at once -----------------------------------------------------------

@pytest.fixture(scope="module")
def six_task_sweep(slurm_cluster: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The sweep, submitted with --wait, and followed meanwhile by `watch` in two real terminals (tmux,
    tests/terminal.py): one to the end, one quit with `q` early. Watching it costs no SLURM run of its own;
    with at most 2 of its 6 tasks running at once, 4 of them wait pending while the view is on."""
    cwd = tmp_path_factory.mktemp("six")
    sweep = write(cwd, "six.yaml", SIX_TASKS)
    started = time.monotonic()
    args = [sys.executable, SUBMIT, *PROFILE, "--job", sweep, *ONE_NODE, "--set", "profile.array_parallelism=2",
            "--wait", "--json"]
    proc = subprocess.Popen(args, cwd=cwd, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    watched: dict[str, Any] = {}
    try:
        record = wait_until(lambda: next((r for r in cwd.glob("runs/*/run.json")
                                          if json.loads(r.read_text()).get("job_ids")), None), 120, "the job ids")
        watched = watch_both(record.parent, cwd, proc)
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    done = subprocess.CompletedProcess(args, proc.returncode, out, err)
    return {"cwd": cwd, "done": done, "payload": last_json(done.stdout) if done.stdout.strip() else {},
            "seconds": time.monotonic() - started, "watch": watched}


def watch_both(run_dir: Path, cwd: Path, sweep: subprocess.Popen[str]) -> dict[str, Any]:
    """Follow the sweep in one terminal until its watch exits; in another, press q at the first frame."""
    from tests.terminal import TmuxWatch, follow, task_states

    follower, quitter = TmuxWatch(run_dir, cwd, "follow"), TmuxWatch(run_dir, cwd, "quit")
    quit_at: dict[str, Any] = {}

    def press_q(_: list[str]) -> None:
        if not quit_at and task_states(quitter.screen()):
            quitter.keys("q")
            quit_at.update(sweep_running=sweep.poll() is None, squeue=squeue_ids(run_dir))
    try:
        seen = follow(follower, time.monotonic() + 600, press_q)  # a shared cluster may hold the tasks for minutes
        wait_until(lambda: quitter.exit_status is not None, 30, "watch to quit on q")
        return {"seen": seen, "exit_status": follower.exit_status, "history_size": follower.history_size(),
                "everything": follower.everything(), "screen": follower.screen(), "quit_at": quit_at,
                "quit_status": quitter.exit_status, "quit_screen": quitter.screen()}
    finally:
        follower.close()
        quitter.close()


def squeue_ids(run_dir: Path) -> list[str]:
    """The run's jobs SLURM still has queued or running."""
    base = json.loads((run_dir / "run.json").read_text())["job_ids"][0].split("_")[0]
    out = subprocess.run(["squeue", "-h", "-r", "-j", base, "-o", "%i"], capture_output=True, text=True, timeout=30)
    return out.stdout.split()


def test_sweep_is_one_array_with_at_most_two_tasks_running(six_task_sweep: dict[str, Any]) -> None:
    done, payload = six_task_sweep["done"], six_task_sweep["payload"]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    job_ids = payload["job_ids"]
    assert len(job_ids) == 6
    assert len({j.split("_")[0] for j in job_ids}) == 1, f"one sbatch, one array: {job_ids}"
    rows = wait_for_accounting(job_ids)
    assert all(rows[j]["state"] == "COMPLETED" for j in job_ids), rows
    intervals = [(epoch(rows[j]["start"]), epoch(rows[j]["end"])) for j in job_ids]
    assert max_concurrent(intervals) <= 2, f"array_parallelism=2 but sacct shows more at once: {rows}"
    # ... and the cap is not 1 either: two tasks did run side by side.
    assert max_concurrent(intervals) == 2, rows
    record = json.loads((Path(payload["run_dir"]) / "run.json").read_text())
    assert "--array=0-5%2" in Path(payload["run_dir"], "logs", job_ids[0].split("_")[0],
                                   f"{job_ids[0].split('_')[0]}_submission.sh").read_text()
    assert record["tasks"] == 6


def test_watch_on_a_terminal_follows_each_task_from_pending_to_done(six_task_sweep: dict[str, Any]) -> None:
    from tests.terminal import ORDER

    watch = six_task_sweep["watch"]
    assert six_task_sweep["done"].returncode == 0
    seen = watch["seen"]
    assert sorted(seen) == list(range(6)), watch["screen"]
    for task, states in seen.items():
        # Only forward (pending -> running -> done), ending done; no other state on the way.
        assert states[-1] == "done" and all(s in ORDER for s in states), (task, states)
        assert [ORDER.index(s) for s in states] == sorted(ORDER.index(s) for s in states), (task, states)
    # The cap of 2 kept tasks 2-5 pending at the first frame, and each was then seen running.
    assert all(seen[t][:2] == ["pending", "running"] for t in range(2, 6)), seen
    assert watch["exit_status"] == 0  # the sweep completed: as --wait
    # Redrawn in place: nothing scrolled into tmux's history, one copy of the view in all tmux holds.
    assert watch["history_size"] == 0, watch["everything"]
    heads = [line for line in watch["everything"] if "task(s):" in line]
    assert len(heads) == 1 and "6 task(s): completed — 6 done" in heads[0], watch["everything"]  # status's head line
    # q at the first frame: watch exited 0 while the sweep still ran, and the sweep went on to complete.
    quit_at = watch["quit_at"]
    assert quit_at["sweep_running"] and quit_at["squeue"], quit_at
    assert watch["quit_status"] == 0
    assert any("the run goes on" in line for line in watch["quit_screen"]), watch["quit_screen"]


def test_summary_table_has_one_row_per_task_sorted_by_the_target_metric(six_task_sweep: dict[str, Any]) -> None:
    payload = six_task_sweep["payload"]
    run_dir = Path(payload["run_dir"])
    header, rows = read_summary(run_dir)
    assert header[:4] == ["task", "lr", "batch_size_per_rank", "state"]
    for column in ("test_accuracy", "test_loss", "train_loss", "images_per_second", "wall_time_s", "error"):
        assert column in header
    assert sorted(int(r["task"]) for r in rows) == list(range(6))
    assert {(float(r["lr"]), int(r["batch_size_per_rank"])) for r in rows} == \
        {(lr, b) for lr in (0.01, 0.05, 0.1) for b in (32, 64)}
    assert all(r["state"] == "completed" for r in rows)
    accuracies = [float(r["test_accuracy"]) for r in rows]
    assert accuracies == sorted(accuracies, reverse=True), "best first (target_mode max)"
    assert accuracies[0] > 0.9 and accuracies[-1] > 0.5
    assert all(float(r["wall_time_s"]) > 0 for r in rows)
    assert payload["best"]["test_accuracy"] == pytest.approx(accuracies[0])
    # Each task's row agrees with that task's own run folder.
    for row in rows:
        task_dir = run_dir / f"task-{int(row['task']):04d}"
        result = json.loads((task_dir / "result.json").read_text())
        assert result["test_accuracy"] == pytest.approx(float(row["test_accuracy"]))
        assert result["overrides"] == {"lr": float(row["lr"]), "batch_size_per_rank": int(row["batch_size_per_rank"])}
        assert (task_dir / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    markdown = (run_dir / "summary.md").read_text()
    assert markdown.count("| completed |") == 6 and "| task | lr | batch_size_per_rank | state |" in markdown
    assert (run_dir / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_status_json_and_list(six_task_sweep: dict[str, Any]) -> None:
    cwd, run_dir = six_task_sweep["cwd"], six_task_sweep["payload"]["run_dir"]
    lines = status_json(run_dir, cwd)
    assert [line["task"] for line in lines] == list(range(6))
    assert all(line["state"] == "completed" and line["restarts"] == 0 and line["source"] == "sacct"
               for line in lines), lines
    listed = run_submit(["list", "--json"], cwd, timeout=60)
    assert listed.returncode == 0, listed.stderr
    runs = [json.loads(line) for line in listed.stdout.splitlines()]
    mine = next(r for r in runs if r["run_dir"] == run_dir)
    best = max(float(r["test_accuracy"]) for r in read_summary(Path(run_dir))[1])
    assert mine["state"] == "completed" and mine["profile"] == "dev-cluster" and mine["job"] == "six-task-sweep"
    assert mine["best"]["test_accuracy"] == pytest.approx(best)
    human = run_submit(["list"], cwd, timeout=60).stdout
    assert Path(run_dir).name in human and f"test_accuracy {best:.4f}" in human


def test_status_without_accounting_reads_squeue_and_the_run_folder(six_task_sweep: dict[str, Any],
                                                                 tmp_path: Path) -> None:
    """With sacct disabled (as on clusters without slurmdbd) the states come from squeue while the
    controller still knows the jobs, and from the run folder (result pickles) once it has forgotten
    them; both must agree with sacct."""
    cwd, run_dir = six_task_sweep["cwd"], six_task_sweep["payload"]["run_dir"]
    expected = [(line["task"], line["state"]) for line in status_json(run_dir, cwd)]
    # 1. Accounting switched off for the submitter.
    off = status_json(run_dir, cwd, env={"SUBMIT_NO_SACCT": "1"})
    assert [(line["task"], line["state"]) for line in off] == expected
    assert all(line["source"] in ("squeue", "run folder") for line in off), off
    # 2. An sacct that fails the way SLURM's does with accounting_storage/none, and a squeue that no
    #    longer lists the jobs (past MinJobAge): only the run folder is left.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sacct").write_text("#!/bin/sh\necho 'sacct: error: Slurm accounting storage is disabled' >&2\n"
                                   "exit 1\n")
    (bin_dir / "squeue").write_text("#!/bin/sh\nexit 0\n")
    for tool in ("sacct", "squeue"):
        (bin_dir / tool).chmod(0o755)
    gone = status_json(run_dir, cwd, env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    assert [(line["task"], line["state"]) for line in gone] == expected
    assert all(line["source"] == "run folder" for line in gone), gone


def test_status_draws_missing_curves_a_batch_at_a_time(six_task_sweep: dict[str, Any]) -> None:
    """A thousand-task sweep must not make `status` draw a thousand pictures in one call."""
    from launcher.rundir import results

    run_dir = Path(six_task_sweep["payload"]["run_dir"])
    pictures = [run_dir / f"task-{t:04d}" / "curves.png" for t in range(6)]
    for picture in pictures:
        picture.unlink()
    assert results.collect(run_dir, max_curves=4)["curves_left"] == 2
    assert sum(p.exists() for p in pictures) == 4
    assert results.collect(run_dir, max_curves=4)["curves_left"] == 0
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pictures)


def test_status_does_not_import_torch(six_task_sweep: dict[str, Any]) -> None:
    run_dir = six_task_sweep["payload"]["run_dir"]
    code = ("import sys; from launcher.commands.main import main; "
            f"rc = main(['status', {run_dir!r}]); main(['list', '--runs-dir', {str(Path(run_dir).parent)!r}]); "
            "assert rc == 0; print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "False", "status/list imported torch"


def test_a_grown_grid_queues_one_array_of_its_new_points_and_its_summary_has_them_all(
    six_task_sweep: dict[str, Any]
) -> None:
    """The six-point grid with a fourth lr: its two new points are the only ones queued (one array of 2), and
    its summary has all eight, the six earlier ones from the first sweep's folder, named there. The point index
    is removed first, as in a runs folder from before it: the first lookup makes it again."""
    cwd, first = six_task_sweep["cwd"], Path(six_task_sweep["payload"]["run_dir"])
    shutil.rmtree(cwd / "runs" / SIGNATURES_DIR / "points")
    grown = write(cwd, "grown.yaml", SIX_TASKS.replace("lr: [0.01, 0.05, 0.1]", "lr: [0.01, 0.05, 0.1, 0.2]"))
    args = [*PROFILE, "--job", grown, *ONE_NODE, "--json"]
    done = run_submit([*args, "--wait"], cwd, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"6 of the sweep's 8 point(s) already completed in {first.name}" in done.stdout, done.stdout[-2000:]
    run_dir = Path(last_json(done.stdout)["run_dir"])
    task_jobs = json.loads((run_dir / "run.json").read_text())["task_jobs"]
    queued = {t: ids for t, ids in enumerate(task_jobs) if ids}
    assert sorted(queued) == [6, 7], task_jobs  # lr 0.2 is the grid's last value: its points are the last two
    base = {ids[0].split("_")[0] for ids in queued.values()}
    rows_sacct = sacct_rows([ids[0] for ids in queued.values()])  # (every element of that array)
    assert len(base) == 1 and sorted(rows_sacct) == sorted(ids[0] for ids in queued.values()), rows_sacct
    header, rows = read_summary(run_dir)
    assert len(rows) == 8 and all(r["state"] == "completed" for r in rows) and "reused_from" in header
    _, before = read_summary(first)
    earlier = {(r["lr"], r["batch_size_per_rank"]): r for r in before}
    for row in rows:
        if float(row["lr"]) == 0.2:
            assert row["reused_from"] == "" and row["job_id"] in rows_sacct
            continue
        came = earlier[(row["lr"], row["batch_size_per_rank"])]
        assert row["reused_from"] == f"{first.name}/task-{int(came['task']):04d}"
        assert (row["test_accuracy"], row["job_id"]) == (came["test_accuracy"], came["job_id"])
    assert [line["task"] for line in status_json(str(run_dir), cwd)] == list(range(8))
    again = run_submit(args, cwd, timeout=120)  # the grown sweep itself, now done: answered, nothing queued
    assert last_json(again.stdout)["reused"] is True and last_json(again.stdout)["run_dir"] == str(run_dir)


# ----- a failing task, then --resume ---------------------------------------------------------------

def test_failing_task_is_a_failed_row_and_resume_reruns_only_it(slurm_cluster: Path, tmp_path: Path) -> None:
    sweep = write(tmp_path, "failing.yaml", WITH_A_FAILING_TASK)
    # (max_failures 0: the failing task's own retries are tests/test_self_healing.py's)
    done = run_submit([*PROFILE, "--job", sweep, *ONE_NODE, "--set", "profile.max_failures=0", "--wait", "--json"],
                      tmp_path, timeout=300)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    payload = last_json(done.stdout)
    run_dir = Path(payload["run_dir"])
    assert payload["counts"] == {"completed": 2, "failed": 1}
    assert "--resume" in done.stderr
    header, rows = read_summary(run_dir)
    assert header[:3] == ["task", "lr", "fail_at"]
    by_task = {int(r["task"]): r for r in rows}
    assert by_task[2]["state"] == "failed"
    assert "injected failure at step 50 on rank 0" in by_task[2]["error"]
    assert by_task[2]["test_accuracy"] == ""
    assert [r["task"] for r in rows][-1] == "2", "failed rows come after the completed ones"
    lines = status_json(str(run_dir), tmp_path)
    assert [line["state"] for line in lines] == ["completed", "completed", "failed"]
    assert lines[2]["failed_rank"] == 0

    untouched = {t: (run_dir / f"task-{t:04d}" / "metrics.jsonl").stat().st_mtime_ns for t in (0, 1)}
    first_ids = json.loads((run_dir / "run.json").read_text())["job_ids"]
    resumed = run_submit(["--resume", str(run_dir), "--set", "job.fail_at=", "--wait", "--json"], tmp_path,
                         timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "running sweep failing-sweep: 1 task(s)" in resumed.stdout
    record = json.loads((run_dir / "run.json").read_text())
    assert record["task_jobs"][0] == [first_ids[0]] and record["task_jobs"][1] == [first_ids[1]]
    assert len(record["task_jobs"][2]) == 2 and record["task_jobs"][2][0] == first_ids[2]
    assert record["resumes"][0]["tasks"] == [2]
    for task, mtime in untouched.items():
        assert (run_dir / f"task-{task:04d}" / "metrics.jsonl").stat().st_mtime_ns == mtime, \
            f"completed task {task} was rerun"
    # The retried task continued from its checkpoint at the end of epoch 1 instead of starting over.
    events = [json.loads(line) for line in (run_dir / "task-0002" / "events.jsonl").read_text().splitlines()]
    resumes = [e for e in events if e["event"] == "resumed"]
    assert resumes and resumes[-1]["step"] == 43, events
    _, rows = read_summary(run_dir)
    assert [r["state"] for r in rows] == ["completed"] * 3
    retried = next(r for r in rows if r["task"] == "2")
    assert float(retried["test_accuracy"]) > 0.9 and int(retried["restarts"]) >= 1 and retried["error"] == ""
    assert retried["fail_at"] == "", "the row shows what the task ran with after --set"
    assert json.loads((run_dir / "run.json").read_text())["submitted_overrides"][2]["fail_at"] == "50:0"
    lines = status_json(str(run_dir), tmp_path)
    assert [line["state"] for line in lines] == ["completed"] * 3 and lines[2]["attempts"] == 2
    # Nothing left to do: a second --resume submits nothing.
    again = run_submit(["--resume", str(run_dir), "--json"], tmp_path, timeout=60)
    assert again.returncode == 0 and last_json(again.stdout)["resubmitted"] == []


# ----- a split array (small max array size), multi-node tasks, no --wait, and --after ----------------

def test_split_array_of_multinode_tasks_then_a_run_after_it(slurm_cluster: Path, tmp_path: Path) -> None:
    sweep = write(tmp_path, "three.yaml", THREE_TASKS)
    args = [*PROFILE, "--job", sweep, "--set", "profile.nodes=2", "--set", "profile.max_array_size=2"]
    dry = run_submit([*args, "--dry-run"], tmp_path, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert "split into 2 arrays of at most 2 tasks" in dry.stdout
    assert not (tmp_path / "runs").exists()

    started = time.monotonic()
    done = run_submit([*args, "--json"], tmp_path, timeout=60)
    returned_after = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    payload = last_json(done.stdout)
    run_dir, job_ids = Path(payload["run_dir"]), payload["job_ids"]
    arrays = list(dict.fromkeys(j.split("_")[0] for j in job_ids))
    # Two sbatch calls: an array of 2, then the last task (submitit queues a piece of one as a plain job).
    assert len(arrays) == 2 and job_ids[:2] == [f"{arrays[0]}_0", f"{arrays[0]}_1"], job_ids
    assert job_ids[2] in (arrays[1], f"{arrays[1]}_0"), job_ids
    assert returned_after < 15, "without --wait, submitting returns at once"
    assert not (run_dir / "summary.csv").exists()

    # A single run that may start only once the whole sweep (both arrays) succeeded.
    after = run_submit([*PROFILE, "--job", "digits", *ONE_NODE, "--set", "job.epochs=1", "--after", str(run_dir),
                        "--wait", "--json"], tmp_path, timeout=300)
    assert after.returncode == 0, after.stdout[-3000:] + after.stderr[-3000:]
    result = last_json(after.stdout)
    after_record = json.loads((Path(result["run_dir"]) / "run.json").read_text())
    assert after_record["executor_parameters"]["dependency"] == f"afterok:{arrays[0]}:{arrays[1]}"
    rows = wait_for_accounting([*job_ids, result["job_id"]])
    sweep_end = max(epoch(rows[j]["end"]) for j in job_ids)
    assert epoch(rows[result["job_id"]]["start"]) >= sweep_end, rows
    assert all(rows[j]["nnodes"] == "2" for j in job_ids), "each array task is a 2-node DDP run"

    # The sweep was not waited for: status collects it afterwards, from the folder and sacct.
    lines = status_json(str(run_dir), tmp_path)
    assert [line["state"] for line in lines] == ["completed"] * 3
    header, summary = read_summary(run_dir)
    assert header[:3] == ["task", "lr", "state"] and len(summary) == 3
    for row in summary:
        task_result = json.loads((run_dir / f"task-{int(row['task']):04d}" / "result.json").read_text())
        assert task_result["world_size"] == 2
    assert (run_dir / "summary.png").exists()


def test_dry_run_lists_the_expanded_tasks_and_the_array_script(slurm_cluster: Path, tmp_path: Path) -> None:
    done = run_submit([*PROFILE, "--job", "digits-lr-sweep", "--set", "profile.array_parallelism=3",
                       "--dry-run", "--json"], tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr
    payload = last_json(done.stdout)
    assert payload["dry_run"] is True and payload["tasks"] == 9
    assert len(payload["sweep_overrides"]) == 9 and payload["sweep_overrides"][-1]["nesterov"] is True
    assert "#SBATCH --array=0-8%3" in payload["sbatch_script"]
    assert [d.rsplit("/", 1)[-1] for d in payload["task_dirs"]] == [f"task-{i:04d}" for i in range(9)]
    human = done.stdout
    assert human.count("#   task-00") == 9 and "task-0000: lr=0.005 batch_size_per_rank=16" in human
    assert "Dry run: nothing was submitted." in human
    assert not (tmp_path / "runs").exists()
