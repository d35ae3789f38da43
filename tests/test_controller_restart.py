"""The controller goes away mid-run, on the SLURM dev cluster: a user's 2-node run (tests/userpkg/tiny.py, which
trains until the test says the controller is back, so that it outlasts the outage on any machine) has taken its
first steps when `slurmctld` is stopped (SIGTERM: it saves its state and exits, as for a maintenance restart).
For 60 s nothing answers squeue, scontrol or scancel; sacct's slurmdbd stays up. Meanwhile `status` exits
0 and says the controller is unreachable (the task is `running` from accounting, never lost or failed),
`watch --once` says so too, the submitter's `--wait` keeps waiting and says so once, and a `cancel` of a
second run says so and keeps trying. Then slurmctld is started again exactly as the dev cluster starts it;
it recovers the jobs from its saved state, the first run completes and `--wait` returns 0 with the run
COMPLETED; the cancel is delivered and the second run checkpoints on SLURM's SIGTERM, as after any cancel.

This test stops the shared cluster's controller: it carries the `controller_outage` marker, and
tests/run_all.sh runs it alone, after every other test. Whatever happens, the `finally` starts slurmctld
again and waits until every node is usable, then checks it with `python -m launcher.devcluster status`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.devcluster import daemons, load_spec, running_pid
from launcher.devcluster.faults import controller_back
from trainer.rank.rundir import checkpoint_name
from tests.helpers import ROOT, last_json, run_submit, wait_until
from tests.test_exact_resume import _popen_submit
from tests.test_requeue_slurm import events_of

OUTAGE_S = 60


def job(folder: Path) -> str:
    """Trains until `folder`/controller-back exists (a step every 50 ms or so; a checkpoint every 20 steps). A
    run that trained a fixed number of epochs had to be tuned to the machine, and on a fast one would end
    before the controller came back. (At a step every 10 ms its 4 ranks took 80 CPU s of the 90 s; the local
    test files that run beside this one, tests/schedule.py's BESIDE_OUTAGE, need them.)"""
    return (f"name: controller-restart\nentrypoint: tests.userpkg.tiny:train\ncheckpoint_every_steps: 20\n"
            f"config:\n  epochs: 1000000\n  step_sleep_s: 0.05\n  until_file: {folder / 'controller-back'}\n")


def checkpoints(run_dir: Path) -> list[Path]:
    return sorted((run_dir / "checkpoints").glob("ckpt-*.pt"))


def results_left(run_dir: Path) -> list[Path]:
    """The ranks' result pickles: written when the run's job ends."""
    return sorted((run_dir / "logs").glob("*/*_result.pkl"))


def first_checkpoint(folder: Path) -> Path:
    """The run folder under `folder` once the run has taken its first steps (its first checkpoint)."""
    run_dir = wait_until(lambda: next((folder / "runs").glob("*/run.json"), None), 120, "the run folder").parent
    wait_until(lambda: checkpoints(run_dir), 300, "the run's first checkpoint (its first steps)", poll=0.2)
    return run_dir


@pytest.mark.slurm
@pytest.mark.controller_outage
def test_a_run_survives_a_minute_without_slurmctld_and_wait_returns_0(slurm_cluster: Path, tmp_path: Path) -> None:
    waited, cancelled = tmp_path / "waited", tmp_path / "cancelled"
    for folder in (waited, cancelled):
        folder.mkdir()
        (folder / "job.yaml").write_text(job(folder))

    def submit(folder: Path) -> list[str]:  # from the project root, where the user's package (tests.userpkg) is
        return ["--job", str(folder / "job.yaml"), "--profile", "dev-cluster", "--set",
                f"profile.runs_dir={folder / 'runs'}", "--json"]

    proc = _popen_submit([*submit(waited), "--wait"], ROOT)
    queued = run_submit(submit(cancelled), ROOT, timeout=300)
    run_dir: Path | None = None
    other: Path | None = None
    cancel: subprocess.Popen[str] | None = None
    try:
        assert queued.returncode == 0, queued.stdout + queued.stderr
        run_dir, other = first_checkpoint(waited), first_checkpoint(cancelled)

        daemons.stop_daemon("slurmctld")
        stopped_at = time.monotonic()
        steps_before = int(checkpoints(run_dir)[-1].stem.split("-")[-1])
        assert running_pid("slurmctld") is None

        shown = run_submit(["status", str(run_dir), "--no-collect"], waited, timeout=180)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        assert "slurmctld is unreachable (" in shown.stderr and "Unable to contact slurm controller" in shown.stderr
        head = shown.stdout.splitlines()[0]
        assert "running" in head and "lost" not in shown.stdout and "failed" not in shown.stdout, shown.stdout
        row = json.loads(run_submit(["status", str(run_dir), "--json", "--no-collect"], waited, timeout=180).stdout)
        assert row["state"] == "running" and row["controller_unreachable"], row
        frame = run_submit(["watch", str(run_dir), "--once"], waited, timeout=180)
        assert frame.returncode == 0 and "slurmctld is unreachable" in " ".join(frame.stdout.split()), frame.stdout
        cancel = _popen_submit(["cancel", str(other)], cancelled)

        # The outage's length is what is under test: a minute since the stop, whatever the above took.
        wait_until(lambda: time.monotonic() - stopped_at >= OUTAGE_S, OUTAGE_S + 5, "a minute without slurmctld")
        assert proc.poll() is None, "--wait gave up while the controller was away"
        assert cancel.poll() is None, "cancel gave up while the controller was away"
        assert not results_left(run_dir), "the run ended before the controller came back"
        daemons.start_slurmctld(load_spec())
        back_after = time.monotonic() - stopped_at
        (waited / "controller-back").touch()  # the first run may end now; the second trains on until cancelled

        told, complained = cancel.communicate(timeout=600)
        out, err = proc.communicate(timeout=1800)  # loaded: several times slower
    finally:
        for started in (proc, cancel):
            if started is not None and started.poll() is None:
                started.kill()
        controller_back()
        for folder, left in ((waited, run_dir), (cancelled, other)):
            if left is not None and (proc.returncode != 0 or folder == cancelled):
                run_submit(["cancel", str(left)], cwd=folder, timeout=120)  # nothing of this test left running
        up = subprocess.run([sys.executable, "-m", "launcher.devcluster", "status"], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
        assert up.returncode == 0, up.stdout + up.stderr
    print(f"slurmctld away {back_after:.0f} s; --wait said: {[l for l in err.splitlines() if 'slurmctld' in l]}")

    assert proc.returncode == 0, out + err[-3000:]
    result = last_json(out)
    assert result["state"] == "COMPLETED" and result["steps"] > steps_before + 100, (steps_before, result)
    # --wait said that the controller was away, once, and that it came back.
    said = [line for line in err.splitlines() if line.startswith("slurmctld ")]
    assert len(said) == 2 and said[0].startswith("slurmctld is unreachable (") and "--wait keeps waiting" in said[0] \
        and said[1].startswith("slurmctld answers again"), err[-3000:]
    # The controller, back, tells accounting that the job ended (a moment after its ranks wrote their results).
    final = wait_until(lambda: (r := json.loads(run_submit(["status", str(run_dir), "--json", "--no-collect"],
                                                           waited, timeout=180).stdout))["state"] != "running" and r,
                       180, "the job's end in accounting", poll=2)
    assert final["state"] == "completed" and "controller_unreachable" not in final, final

    # The cancel said that it waited for the controller, and was delivered once it was back: SLURM's SIGTERM
    # stopped the second run at a step boundary, with a checkpoint of that step.
    assert cancel.returncode == 0 and "cancelled 1 task(s)" in told, told + complained
    assert complained.startswith("slurmctld is unreachable (scancel: error: Kill job error") \
        and "the cancel waits" in complained and "slurmctld answers again" in complained, complained
    (stopped,) = wait_until(lambda: events_of(other, "stopped"), 120, "the cancelled run's stop")
    assert stopped["signal"] == "TERM", stopped
    assert (other / "checkpoints" / checkpoint_name(stopped["step"])).exists(), (stopped, checkpoints(other))
