"""`--in-allocation` on the real dev cluster, as a user inside `salloc -N 2` runs it: the ranks run as a job step
of that allocation (no new job: squeue and sacct show none), trained on both nodes; a request larger than the
allocation is one error line, exit 2; `cancel` ends the run's step and leaves the allocation alone."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.helpers import ROOT, SUBMIT, last_json, run_submit

pytestmark = pytest.mark.slurm

# Run inside the allocation (salloc's command, non-interactive): the bad request, the run (squeue looked at
# while its ranks run; its status once it ended, as from another host, while the allocation runs on), then a
# long run cancelled; each step's output in its own file.
SCRIPT = """
set -u
echo "$SLURM_JOB_ID" > allocation
{submit} --set profile.nodes=3 > big.out 2> big.err; echo $? > big.rc
{submit} --set job.epochs=3 --json > run.out 2> run.err &
pid=$!
until ls runs/*/logs/*/*_1_log.out >/dev/null 2>&1 || ! kill -0 $pid 2>/dev/null; do sleep 0.5; done
squeue -h -o '%i|%j' > squeue.txt
wait $pid; echo $? > run.rc
run=$(dirname runs/*{name}*/run.json)
python -c 'import json, sys; p = sys.argv[1] + "/run.json"; r = json.load(open(p)); r["allocation"]["host"] = "elsewhere"; json.dump(r, open(p, "w"))' "$run"
python {cli} status "$run" --json --no-collect > elsewhere.out 2> elsewhere.err
{submit} --set job.epochs=500 --set job.name={name}-long > long.out 2> long.err &
pid=$!
until grep -qs 'step ' runs/*{name}-long*/logs/*/*_0_log.out || ! kill -0 $pid 2>/dev/null; do sleep 0.5; done
python {cli} cancel "$(ls -d runs/*{name}-long*)" > cancel.out 2>&1
wait $pid; echo $? > long.rc
squeue -h -j "$SLURM_JOB_ID" -o '%i|%T' > after.txt
"""


def test_a_run_inside_salloc_is_a_job_step_of_it(slurm_cluster: Path, tmp_path: Path) -> None:
    name = f"inalloc-{uuid.uuid4().hex[:8]}"
    submit = f"python {SUBMIT} --profile dev-cluster --in-allocation --set job.name={name}"
    script = SCRIPT.format(submit=submit, name=name, cli=SUBMIT)
    done = subprocess.run(["salloc", "-N", "2", "-p", "cpu", "-t", "15", "bash", "-c", script], cwd=tmp_path,
                          capture_output=True, text=True, timeout=900, env={**dict(__import__("os").environ),
                                                                           "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    held = (tmp_path / "allocation").read_text().strip()
    # More nodes than the allocation holds: one error line, exit 2, nothing made.
    assert (tmp_path / "big.rc").read_text().strip() == "2"
    said = (tmp_path / "big.err").read_text().strip().splitlines()
    assert len(said) == 1 and said[0].startswith("error: profile.nodes: 3") and f"allocation {held}" in said[0], said
    # The run: a job step of the allocation, on both of its nodes; no job of its own, ever.
    assert (tmp_path / "run.rc").read_text().strip() == "0", (tmp_path / "run.err").read_text()[-3000:]
    result = last_json((tmp_path / "run.out").read_text())
    assert result["job_id"] == held and len(set(result["nodes"])) == 2 and result["test_accuracy"] > 0.9, result
    queued = (tmp_path / "squeue.txt").read_text().splitlines()
    assert f"{held}|interactive" in queued and not any(name in line for line in queued), queued
    sacct = subprocess.run(["sacct", "-P", "-n", "-j", held, "--format=JobID,JobName,NNodes"], capture_output=True,
                           text=True, timeout=60).stdout.splitlines()
    run_dir = Path(result["run_dir"])
    assert f"{held}.0|ddp-submit:{run_dir.name}|2" in sacct, sacct
    jobs = subprocess.run(["sacct", "-X", "-P", "-n", "--name", name, "--format=JobID", "-S", "now-1hours"],
                          capture_output=True, text=True, timeout=60).stdout.split()
    assert jobs == [], jobs
    status = run_submit(["status", str(run_dir), "--json"], tmp_path, timeout=60)
    assert json.loads(status.stdout.splitlines()[0])["state"] == "completed", status.stdout + status.stderr
    # Seen from a host other than the one that held the allocation: the step has ended, though the allocation
    # still ran then.
    elsewhere = (tmp_path / "elsewhere.out").read_text()
    assert json.loads(elsewhere.splitlines()[0])["state"] == "completed", elsewhere + (tmp_path / "elsewhere.err").read_text()
    # Cancelled: its step ended, the allocation ran on.
    assert "cancelled 1 task(s)" in (tmp_path / "cancel.out").read_text(), (tmp_path / "cancel.out").read_text()
    assert (tmp_path / "long.rc").read_text().strip() != "0"
    assert (tmp_path / "after.txt").read_text().strip() == f"{held}|RUNNING"
    long_dir = next(tmp_path.glob(f"runs/*{name}-long*"))
    status = run_submit(["status", str(long_dir), "--json"], tmp_path, timeout=60)
    assert json.loads(status.stdout.splitlines()[0])["state"] == "cancelled", status.stdout + status.stderr
