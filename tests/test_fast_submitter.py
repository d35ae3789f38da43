"""A quick submitter: no torch on the submitting side, and a 1,000-task array is one sbatch call."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT, SUBMIT, last_json, run_submit

TASKS = 1000


def _sweep_file(tmp_path: Path, tasks: int = TASKS) -> Path:
    seeds = ", ".join(str(i) for i in range(tasks))
    path = tmp_path / "array1000.yaml"
    path.write_text(f"extends: digits\nname: array1000\nepochs: 1\nsweep:\n  grid:\n    seed: [{seeds}]\n")
    return path


def _imported_modules(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[int, set[str], str]:
    """Run `python -X importtime submit.py ARGS`; return its exit status and every module it imported."""
    proc = subprocess.run([sys.executable, "-X", "importtime", SUBMIT, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    modules = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
               if line.startswith("import time:")}
    assert "sys" in modules or "os" in modules or len(modules) > 20, proc.stderr[-2000:]  # importtime worked
    return proc.returncode, modules, proc.stdout + proc.stderr


def test_dry_run_of_a_1000_task_sweep_does_not_import_torch(tmp_path: Path) -> None:
    rc, modules, output = _imported_modules(["--job", str(_sweep_file(tmp_path)), "--dry-run", "--json"], tmp_path)
    assert rc == 0, output[-3000:]
    assert "torch" not in modules
    assert not any(m.startswith(("torch.", "torchvision", "sklearn")) for m in modules)
    assert not (tmp_path / "runs").exists()  # a dry run creates nothing


def test_local_dry_run_loads_neither_the_sending_nor_the_waiting_nor_the_slurm_code(tmp_path: Path) -> None:
    # The preview users wait for most plans and shows; submitit, sbatch and the waiting loop are for sending.
    rc, modules, output = _imported_modules(["--dry-run"], tmp_path)
    assert rc == 0 and "Dry run: nothing was submitted." in output, output[-3000:]
    assert not modules & {"submitit", "launcher.request.send", "launcher.waiting.ends", "launcher.waiting.echo",
                          "launcher.request.over_ssh", "launcher.remote.transport", "launcher.remote.connection",
                          "launcher.cluster.slurm.limits"}  # (a local profile: no SLURM preflight, nor SSH either)


def test_a_reader_that_goes_away_gets_no_traceback(tmp_path: Path) -> None:
    # `submit.py --dry-run | head -1`: the pipe closes before the (long) listing is written.
    proc = subprocess.Popen([sys.executable, SUBMIT, "--job", str(_sweep_file(tmp_path)), "--dry-run"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err[-2000:]
    assert "Traceback" not in err and "BrokenPipeError" not in err, err[-2000:]


def test_help_imports_neither_torch_nor_submitit(tmp_path: Path) -> None:
    rc, modules, output = _imported_modules(["--help"], tmp_path)
    assert rc == 0 and "--dry-run" in output
    assert "torch" not in modules and "submitit" not in modules


def _sbatch_shim(tmp_path: Path) -> tuple[Path, Path]:
    """A directory with an `sbatch` that records each call, then runs the real one."""
    real = subprocess.run(["which", "sbatch"], capture_output=True, text=True, check=True).stdout.strip()
    shim_dir, log = tmp_path / "shim", tmp_path / "sbatch-calls.log"
    shim_dir.mkdir()
    shim = shim_dir / "sbatch"
    # One "CALL" line per call, followed by the script it was given (its last argument).
    shim.write_text(f'#!/bin/sh\nfor last; do :; done\necho "CALL $*" >> {log}\ncat "$last" >> {log}\n'
                    f'exec {real} "$@"\n')
    shim.chmod(0o755)
    return shim_dir, log


def test_a_1000_task_array_is_one_sbatch_call_and_status_does_not_import_torch(slurm_cluster: Path,
                                                                                 tmp_path: Path) -> None:
    shim_dir, log = _sbatch_shim(tmp_path)
    env = {"PATH": f"{shim_dir}{os.pathsep}{os.environ['PATH']}"}
    proc = run_submit(["--profile", "dev-cluster", "--job", str(_sweep_file(tmp_path)), "--json"], cwd=tmp_path,
                      env=env, timeout=300)
    job_id = ""
    try:
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        payload = last_json(proc.stdout)
        job_id = payload["job_id"]
        assert len(payload["job_ids"]) == TASKS
        assert payload["job_ids"][0] == f"{job_id}_0" and payload["job_ids"][-1] == f"{job_id}_{TASKS - 1}"
        recorded = log.read_text()
        calls = [line for line in recorded.splitlines() if line.startswith("CALL ")]
        assert len(calls) == 1, calls  # one sbatch for the whole array
        assert f"#SBATCH --array=0-{TASKS - 1}%" in recorded  # all 1,000 tasks, throttled
    finally:
        if job_id:  # the dev cluster is shared: never leave 1,000 digits runs queued
            subprocess.run(["scancel", job_id], capture_output=True, text=True, timeout=60)
    # `status` reads the run folder and asks SLURM; it must not pay for torch either.
    rc, modules, output = _imported_modules(["status", payload["run_dir"], "--no-collect"], tmp_path, env)
    assert rc == 0, output[-3000:]
    assert "torch" not in modules
    assert f"{job_id}" in output
