"""A SLURM controller that does not answer is told apart from one that does not know the job.

The words are SLURM's own: the lines below were printed by the dev cluster's squeue, scancel and sinfo
with slurmctld unreachable. The last tests use the real SLURM clients against a controller that is not
there (a copy of the dev cluster's slurm.conf naming a port nobody listens on; slurmdbd, which sacct asks,
is the dev cluster's own), so they disturb nothing shared: `status` and `watch` say the controller is
unreachable instead of calling the run lost, and `cancel` keeps trying instead of failing.
tests/test_controller_restart.py stops the real slurmctld during a run.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from launcher.cluster.slurm import controller
from tests.helpers import ROOT, SUBMIT, run_submit, wait_until

# Recorded from the dev cluster's clients with the controller unreachable.
SAID_WHEN_DOWN = [
    "slurm_load_jobs error: Unable to contact slurm controller (connect failure)",
    "scancel: error: Kill job error on job id 999999: Unable to contact slurm controller (connect failure)",
    "slurm_load_partitions: Unable to contact slurm controller (connect failure)",
    "squeue: error: Unable to contact slurm controller (receive failure)",
    "slurm_load_jobs error: Socket timed out on send/recv operation",
]
# ... and with it up: answers about the job, not about the controller.
SAID_WHEN_UP = [
    "slurm_load_jobs error: Invalid job id specified",
    "scancel: error: Kill job error on job id 5: Job/step already completing or completed",
    "sacct: error: Problem talking to the database: Connection refused",
]


@pytest.mark.parametrize("said", SAID_WHEN_DOWN)
def test_the_lines_slurm_prints_for_an_unreachable_controller_are_recognised(said: str) -> None:
    assert controller.unreachable(f"some earlier line\n{said}\n") == said


@pytest.mark.parametrize("said", SAID_WHEN_UP)
def test_an_answer_about_the_job_is_not_an_unreachable_controller(said: str) -> None:
    assert controller.unreachable(said) == ""


def _until_flag(flag: Path) -> list[str]:
    """A command that says what scancel says with the controller down until `flag` exists."""
    said = SAID_WHEN_DOWN[1]
    return ["sh", "-c", f'test -e "{flag}" || {{ echo "{said}" >&2; exit 8; }}; echo delivered']


def test_a_command_is_asked_again_with_backoff_and_the_user_told_once(tmp_path: Path) -> None:
    flag, told, pauses = tmp_path / "up", [], []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 4:
            flag.touch()  # the controller is back

    answer = controller.ask_until_answered(_until_flag(flag), {"PATH": "/usr/bin:/bin"}, "the cancel waits",
                                           say=told.append, pause=pause)
    assert answer.ok and answer.out == "delivered\n"
    assert pauses == [2.0, 3.0, 4.5, 6.75]  # growing by half, from FIRST_DELAY_S
    assert len(told) == 2, told
    assert told[0].startswith(f"slurmctld is unreachable ({SAID_WHEN_DOWN[1]}); the cancel waits, asking again")
    assert "Ctrl-C" in told[0] and told[1].startswith("slurmctld answers again")


def test_past_its_patience_the_command_fails_with_the_controllers_words(tmp_path: Path) -> None:
    told: list[str] = []
    answer = controller.ask_until_answered(_until_flag(tmp_path / "never"), {"PATH": "/usr/bin:/bin"}, "waiting",
                                           patience_s=0, say=told.append, pause=lambda s: None)
    assert not answer.ok and answer.unreachable == SAID_WHEN_DOWN[1] and answer.error == SAID_WHEN_DOWN[1]
    assert not any("answers again" in line for line in told)


def test_a_failure_that_is_not_the_controller_is_not_asked_again(tmp_path: Path) -> None:
    pauses: list[float] = []
    answer = controller.ask_until_answered(["sh", "-c", f'echo "{SAID_WHEN_UP[1]}" >&2; exit 1'],
                                           {"PATH": "/usr/bin:/bin"}, "waiting", say=print, pause=pauses.append)
    assert not answer.ok and answer.error == SAID_WHEN_UP[1] and not answer.unreachable and not pauses


# ----- the real clients, a controller that is not there ------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def silent_controller(slurm_cluster: Path, tmp_path: Path) -> Path:
    """The dev cluster's slurm.conf with its controller on a port nobody listens on."""
    lines = [f"SlurmctldPort={_free_port()}" if line.startswith("SlurmctldPort=") else line
             for line in slurm_cluster.read_text().splitlines()]
    conf = tmp_path / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


def _slurm_run(run_dir: Path, slurm_conf: Path) -> None:
    """A single 2-rank SLURM run whose job (an id the dev cluster's accounting does not know) left no result:
    with the controller up, `status` calls it lost."""
    job_id = "9300000"
    (run_dir / "logs" / job_id).mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({
        "executor": "slurm", "run_dir": str(run_dir), "world_size": 2, "job_ids": [job_id], "created": time.time(),
        "job": {"name": "digits", "target_metric": "test_accuracy", "target_mode": "max", "epochs": 1},
        "profile": {"name": "dev-cluster", "executor": "slurm", "slurm_conf": str(slurm_conf)}}))


@pytest.mark.slurm
def test_status_and_watch_say_the_controller_is_unreachable_instead_of_calling_the_run_lost(
        silent_controller: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "outage"
    _slurm_run(run_dir, silent_controller)
    shown = run_submit(["status", str(run_dir), "--no-collect"], tmp_path, timeout=180)
    assert shown.returncode == 0, shown.stderr
    assert "slurmctld is unreachable (slurm_load_jobs error: Unable to contact slurm controller" in shown.stderr
    assert "lost" not in shown.stdout and "failed" not in shown.stdout, shown.stdout
    assert shown.stdout.splitlines()[0].endswith("1 task(s): unknown — 1 unknown"), shown.stdout

    row = json.loads(run_submit(["status", str(run_dir), "--json", "--no-collect"], tmp_path, timeout=180).stdout)
    assert row["state"] == "unknown" and "Unable to contact slurm controller" in row["controller_unreachable"]
    assert row["run_state"] == "unknown"
    # The Python handle says what status says (it once had a rule of its own, which read this as "completed").
    from launcher.client import attach

    assert attach(run_dir).state() == "unknown"

    frame = run_submit(["watch", str(run_dir), "--once"], tmp_path, timeout=180)
    assert frame.returncode == 0, frame.stdout + frame.stderr  # the run goes on, as far as anyone knows
    seen = " ".join(frame.stdout.split())  # rich wraps the line to the terminal's width
    assert "slurmctld is unreachable" in seen and "asking again every refresh" in seen, frame.stdout


@pytest.mark.slurm
def test_cancel_keeps_trying_while_the_controller_does_not_answer(silent_controller: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "outage"
    _slurm_run(run_dir, silent_controller)
    proc = subprocess.Popen([sys.executable, SUBMIT, "cancel", str(run_dir)], cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    said: list[str] = []
    threading.Thread(target=lambda: said.extend(proc.stderr), daemon=True).start()  # type: ignore[arg-type]
    try:
        told = wait_until(lambda: said[:1], 180, "cancel's first word")[0]
        assert told.startswith("slurmctld is unreachable (scancel: error: Kill job error on job id 9300000: "
                               "Unable to contact slurm controller"), said
        assert "the cancel waits" in told
        assert proc.poll() is None, said  # still trying, not failed
    finally:
        proc.kill()
        proc.wait(timeout=30)
