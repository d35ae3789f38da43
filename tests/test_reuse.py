"""Concurrent identical submissions queue one run between them (launcher.rundir.claims, launcher.commands.reuse):
the signature is claimed under a lock the kernel drops when its holder dies; 16 at once on the dev cluster make
one job, which later identical submissions are answered with, following it while it runs, without sbatch once it
ended. (A completed local run answered and `--rerun`: tests/test_user_code.py; a running run followed and a
cancelled one continued, from Python: tests/test_client_handles.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from launcher.rundir import claims
from launcher.rundir.layout import SIGNATURES_DIR
from tests.helpers import ROOT, last_json, run_submit, run_submits, wait_until

JOB = """name: tiny
entrypoint: "tests.userpkg.tiny:train"
target_metric: accuracy
config:
  epochs: 1
  samples: 128
"""


def runs_in(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if (p / "run.json").is_file())


HOLD = """
import sys, time
from pathlib import Path
from launcher.rundir import claims
with claims.claim(Path(sys.argv[1]), "0123456789abcdef"):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_claim_waits_for_its_holder_and_is_free_once_the_holder_died(tmp_path: Path, capfd) -> None:  # noqa: ANN001
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        got: list[claims.Claim] = []

        def take() -> None:
            with claims.claim(tmp_path, "0123456789abcdef") as held:
                got.append(held)
                held.names(tmp_path / "run-a")

        taker = threading.Thread(target=take)
        taker.start()
        wait_until(lambda: "an identical submission is being made" in capfd.readouterr().err, 30,
                   "the waiting note")
        assert taker.is_alive() and not got  # still held: it waits
    finally:
        holder.kill()  # killed while holding it, as a submitter killed before it queued
        holder.wait()
    taker.join(60)
    assert not taker.is_alive() and got
    # It named a folder that holds no run (as when sbatch refused the run and its folder was removed): the claim
    # leaves nothing behind, no index and no lock file.
    assert not (tmp_path / SIGNATURES_DIR).exists()
    (tmp_path / "run-a").mkdir()
    (tmp_path / "run-a" / "run.json").write_text("{}")
    with claims.claim(tmp_path, "0123456789abcdef") as held:
        assert held.run() is None
        held.names(tmp_path / "run-a")
    index = tmp_path / SIGNATURES_DIR / "0123456789abcdef.json"
    assert json.loads(index.read_text()) == {"run": "run-a"}
    with claims.claim(tmp_path, "0123456789abcdef") as held:
        assert held.run() == tmp_path / "run-a"
        index.write_text('{"run": "../elsewhere"}')
        assert held.run() is None  # an edited index names nothing outside the runs folder


@pytest.mark.slurm
def test_sixteen_identical_submissions_queue_one_run_then_it_is_answered_without_sbatch(
    slurm_cluster: Path, tmp_path: Path
) -> None:
    (tmp_path / "tiny.yaml").write_text(JOB)
    args = ["--profile", "dev-cluster", "--set", f"profile.runs_dir={tmp_path / 'runs'}", "--job",
            str(tmp_path / "tiny.yaml"), "--json"]
    done = run_submits([args] * 16, cwd=ROOT, rerun=False)
    for proc in done:
        assert proc.returncode == 0, proc.stderr[-2000:]
    said = [last_json(proc.stdout) for proc in done]
    assert len({s["run_dir"] for s in said}) == 1 and len(runs_in(tmp_path / "runs")) == 1
    assert len({s["job_id"] for s in said}) == 1 and sum(not s.get("reused") for s in said) == 1
    ended = run_submit([*args, "--wait"], cwd=ROOT)  # follows the queued run until it ends
    assert ended.returncode == 0, ended.stderr[-3000:]
    result = last_json(ended.stdout)
    assert result["reused"] is True and result["state"] == "COMPLETED" and result["job_id"] == said[0]["job_id"]
    again = run_submit(args, cwd=ROOT)
    assert last_json(again.stdout)["reused"] is True and "nothing was queued" in again.stdout
    assert last_json(again.stdout)["job_ids"] == result["job_ids"]
