"""The Python client's handles (launcher/client/handles.py) read in this process, as a notebook reads them:
`state()` and `wait()` while a run still runs (they were only ever read after runs had ended), a sweep's
results with a failed point and its rerun, and what `RunFailed` tells from a task's state. The runs are real
local ones (2 ranks of tests/userpkg/tiny.py); the handles ask the command line, as they do for users.
These tests are in mutmut's selection (tests/mutation.py): each assertion pins one decision of a handle."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.client import RunFailed, Run, SubmitError, Sweep, attach, runs, submit, sweep
from launcher.remote.ssh_record import RECORD
from launcher.rundir.layout import RESULT_FILE, RUN_FILE, SUMMARY_CSV, SUMMARY_MD, SUMMARY_PNG
from launcher.rundir.signature import of_run
from tests.helpers import wait_until

TINY = "tests.userpkg.tiny:train"


@pytest.fixture
def stop(tmp_path: Path) -> Iterator[Path]:
    """The file a run trains until (tiny's `until_file`), made at teardown too: a test that failed halfway leaves
    no run training for ever (under mutmut, a broken `cancel` or `state` left several)."""
    path = tmp_path / "stop"
    yield path
    path.touch()


def test_state_and_wait_while_a_run_runs_then_after_it_ended(tmp_path: Path, stop: Path) -> None:
    """A run that trains until a file appears: `state()` says running, `wait()` with a short timeout raises
    TimeoutError naming the run (the submitting handle through its engine, an attached one through `status`),
    and once it ended both handles wait, state and result alike."""
    run = submit(entrypoint=TINY, config={"until_file": str(stop), "epochs": 1000, "step_sleep_s": 0.01},
                 cwd=tmp_path)
    attached = attach(run.run_dir.name, cwd=tmp_path)
    assert type(attached) is Run and attached == run and hash(attached) == hash(run) == hash(run.run_dir)
    assert repr(attached) == f"Run({str(run.run_dir)!r})" and not attached.remote
    wait_until(lambda: attached.state() == "running", 120, "the run to start", poll=0.2)
    with pytest.raises(TimeoutError, match="still running after 0.2 s"):
        attached.result(timeout=0.2)  # result() waits as long as it is told
    for handle in (run, attached):
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=f"^{run.run_dir} still running after 0.3 s$"):
            handle.wait(timeout=0.3, poll_s=0.05)
        assert time.monotonic() - started < 30  # it gave up at the timeout, not when the run ended
    (states,) = [attached.status()]
    assert [s["state"] for s in states] == ["running"] and states[0]["run_state"] == "running"
    stop.touch()
    (ended,) = attached.wait(timeout=300, poll_s=0.1)
    assert ended["state"] == "completed" and ended["task"] == 0
    assert [s["state"] for s in run.wait(timeout=60)] == ["completed"] and run.state() == "completed"
    result = run.result(timeout=60)
    assert result == json.loads((run.run_dir / RESULT_FILE).read_text()) == attached.result()
    assert result["world_size"] == 2 and result["steps"] == ended["result"]["steps"]
    assert "rank 1/2" in attached.logs(rank=1) and "rank 0/2" in attached.logs()
    assert "submitit INFO" in attached.logs() and "submitit INFO" not in attached.logs(err=True)  # stderr: no log lines
    recorded = json.loads((run.run_dir / RUN_FILE).read_text())["signature"]
    assert run.signature == attached.signature == recorded == ended["signature"] == ended["run_signature"]
    assert [row["signature"] for row in runs(cwd=tmp_path)] == [recorded]
    assert [row["run_dir"] for row in runs(cwd=tmp_path, signature=recorded)] == [str(run.run_dir)]
    assert runs(cwd=tmp_path, signature="0" * 16) == []
    with pytest.raises(SubmitError, match=r"^error: --signature 'Run': expected a signature"):
        runs(cwd=tmp_path, signature="Run")


def test_a_cancelled_run_ends_cancelled_and_an_identical_submission_continues_it(tmp_path: Path, stop: Path) -> None:
    """The same function and config submitted again (a notebook cell run twice, launcher.commands.reuse): while
    the run runs, the new handle is that run's; once it was cancelled, it is continued in its own folder (a new
    attempt, from its checkpoint where it has one) instead of started over in a new one."""
    config = {"until_file": str(stop), "epochs": 1000, "step_sleep_s": 0.01}
    run = submit(entrypoint=TINY, config=config, cwd=tmp_path)
    assert not run.reused
    wait_until(lambda: run.state() == "running", 120, "the run to start", poll=0.2)
    same = submit(entrypoint=TINY, config=config, cwd=tmp_path)
    assert same.reused and same == run and same.state() == "running"
    run.cancel()
    (state,) = run.wait(timeout=120, poll_s=0.1)
    assert state["state"] == "cancelled" and run.state() == "cancelled"
    with pytest.raises(RunFailed) as raised:
        run.result(timeout=60)
    assert str(raised.value).startswith(f"{run.run_dir.name}: cancelled") and raised.value.state == state
    again = submit(entrypoint=TINY, config=config, cwd=tmp_path)
    assert again.reused and again == run
    wait_until(lambda: again.state() == "running", 120, "the continued run to start", poll=0.2)
    stop.touch()
    assert "accuracy" in again.result(timeout=300) and [s["restarts"] for s in again.status()] == [1]
    assert [p.name for p in (tmp_path / "runs").iterdir() if (p / RUN_FILE).is_file()] == [run.run_dir.name]


def test_a_sweep_with_a_failed_point_then_its_rerun(tmp_path: Path) -> None:
    """results() raises RunFailed naming the failed point (or, with failed="none", leaves None in its place, the
    others in point order); rerun_failed() queues that point only, and the same handle then has every result."""
    grid = sweep(entrypoint=TINY, grid={"fail_at_step": [0, 3]}, config={"epochs": 1, "samples": 128}, cwd=tmp_path)
    assert type(grid) is Sweep and type(attach(grid.run_dir)) is Sweep
    with pytest.raises(ValueError, match=r"^failed='skip': expected 'raise' or 'none'$"):
        grid.results(failed="skip")
    with pytest.raises(RunFailed) as raised:
        grid.results(timeout=300)
    assert str(raised.value) == (f"{grid.run_dir.name} task 1 (config.fail_at_step=3): rank 0 raised RuntimeError: "
                                 "failing on purpose at step 3 (config.fail_at_step)")
    assert raised.value.rank == 0 and raised.value.error_type == "RuntimeError"
    assert raised.value.state["task"] == 1 and raised.value.error_message.startswith("failing on purpose at step 3")
    # The traceback is your code's: the frames of the runner that called it are left out.
    assert 'tests/userpkg/tiny.py", line' in raised.value.details and "trainer/runners" not in raised.value.details
    assert raised.value.details.splitlines()[-1] == "RuntimeError: failing on purpose at step 3 (config.fail_at_step)"
    first, second = grid.results(failed="none")
    assert second is None and first is not None and first["steps"] == 128 // 16 // 2
    assert first == json.loads((Path(grid.status()[0]["task_dir"]) / RESULT_FILE).read_text())
    assert grid.states() == ["completed", "failed"] and grid.state() == "failed"
    points = grid.signatures()
    assert len(set(points)) == 2 and grid.signature == of_run(points, is_sweep=True) not in points
    rows = grid.summary()
    assert sorted((row["task"], row["state"]) for row in rows) == [("0", "completed"), ("1", "failed")]
    assert (grid.summary_csv, grid.summary_md, grid.summary_png) == tuple(
        grid.run_dir / name for name in (SUMMARY_CSV, SUMMARY_MD, SUMMARY_PNG))
    assert grid.summary_csv.is_file() and grid.summary_md.is_file()

    assert "RuntimeError: failing on purpose at step 3" in grid.logs(task=1, err=True)  # the rank's stderr
    refused = r"^error: .*run\.json \(profile, with --set\): key 'nodes' has invalid value 0;"
    with pytest.raises(SubmitError, match=refused):  # refused: nothing queued, the handle unchanged
        grid.rerun_failed(sets=["profile.nodes=0"])
    assert grid.states() == ["completed", "failed"] and [s["restarts"] for s in grid.status()] == [0, 0]
    assert grid.rerun_failed(sets=["job.config.fail_at_step=0"]) is grid
    again = grid.result(timeout=300)
    assert again[0] == first and again[1] is not None and again[1]["steps"] == first["steps"]
    assert grid.states() == ["completed", "completed"] and grid.state() == "completed"
    assert [s["restarts"] for s in grid.status()] == [0, 1]  # only the failed point ran again
    assert grid.rerun_failed() is grid and grid.results() == again  # nothing left to rerun: nothing queued
    assert [s["restarts"] for s in grid.status()] == [0, 1] and grid.states() == ["completed", "completed"]


def test_a_handle_on_a_folder_that_is_no_run_says_so(tmp_path: Path) -> None:
    """`status` refuses it with its own error line, which the handle raises as it is."""
    folder = tmp_path / "runs" / "gone"
    folder.mkdir(parents=True)
    handle = Run(tmp_path, "local", folder)
    with pytest.raises(SubmitError, match=r"^error: ") as raised:
        handle.status()
    assert str(folder) in str(raised.value) or "gone" in str(raised.value)
    with pytest.raises(SubmitError, match=r"^error: "):
        handle.state()


def test_run_failed_tells_the_rank_and_the_error_from_a_tasks_state() -> None:
    """Pure: the message and fields RunFailed.of makes of what `status --json` said of a task."""
    raised = {"task": 2, "state": "failed", "failed_rank": 3,
              "failure": {"rank": 1, "type": "KeyError", "message": "'lr'", "traceback": "File x\nKeyError: 'lr'"}}
    one = RunFailed.of("r1", raised, point="lr=0.1")
    assert str(one) == "r1 task 2 (lr=0.1): rank 1 raised KeyError: 'lr'"
    assert (one.rank, one.error_type, one.error_message, one.details) == (1, "KeyError", "'lr'", "File x\nKeyError: 'lr'")
    assert one.__notes__ == ["Traceback on rank 1:\nFile x\nKeyError: 'lr'"] and one.state == raised
    assert one._render_traceback_() == ["Traceback on rank 1 (your function):", "File x", "KeyError: 'lr'", "",
                                        "RunFailed: r1 task 2 (lr=0.1): rank 1 raised KeyError: 'lr'"]
    alone = RunFailed.of("r1", raised)
    assert str(alone) == "r1: rank 1 raised KeyError: 'lr'"
    bare = RunFailed.of("r1", {"task": 0, "state": "failed", "failure": {"rank": 0, "type": "OSError"}})
    assert str(bare) == "r1: rank 0 raised OSError" and bare.details == "" and not hasattr(bare, "__notes__")

    timed_out = RunFailed.of("r2", {"task": 0, "state": "timeout", "failed_rank": 0, "error": "time limit"})
    assert str(timed_out) == "r2: timeout on rank 0: time limit"
    assert (timed_out.rank, timed_out.error_type, timed_out.error_message, timed_out.details) == (0, None, None, "")
    assert not hasattr(timed_out, "__notes__") and timed_out._render_traceback_() == [f"RunFailed: {timed_out}"]
    silent = RunFailed.of("r3", {"task": 0, "state": "cancelled", "failed_rank": None, "failure": None})
    assert str(silent) == "r3: cancelled: no error recorded" and silent.rank is None
    assert RunFailed("m", state=None).state == {} and RunFailed("m").rank is None

    assert SubmitError("error: x")._render_traceback_() == ["SubmitError: error: x"]
    refused = SubmitError("error: bad value")
    refused.add_note("your code's traceback")
    assert refused._render_traceback_() == ["SubmitError: error: bad value", "your code's traceback"]


def test_a_remote_runs_result_is_what_status_read_there(tmp_path: Path) -> None:
    """Over SSH the local folder is a record: the metrics come from `status` (the cluster side's result.json),
    never from a stale local file; here, a local result.json beside the record is not read."""
    folder = tmp_path / "r"
    folder.mkdir()
    handle = Run(tmp_path, "p", folder)
    (folder / RESULT_FILE).write_text(json.dumps({"loss": 1.0}))
    assert handle._metrics({"result": {"loss": 2.0}}, folder) == {"loss": 1.0}
    (folder / RECORD).write_text("{}")
    assert handle.remote and handle._metrics({"result": {"loss": 2.0}}, folder) == {"loss": 2.0}
    assert handle._metrics({"result": None}, folder) == {}
    assert Run(tmp_path, "p", folder) == handle and Run(tmp_path, "p", tmp_path) != handle and handle != folder
