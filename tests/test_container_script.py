"""The interpreter and the container on the nodes, as `--dry-run` shows them and sbatch gets them.

The scripts for an apptainer and a pyxis profile are compared with recorded files
(tests/data/*-dry-run.sbatch; neither runtime is installable here: Debian 12 packages no apptainer,
pyxis needs enroot and a SLURM plugin). Re-record after an intended change:
UPDATE_RECORDED=1 python -m pytest tests/test_container_script.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, last_json, run_submit

DATA = ROOT / "tests" / "data"


def srun_line(script: str) -> str:
    """The batch script's srun line (a retry step's line may follow it)."""
    return next(line for line in script.splitlines() if line.startswith("srun "))


def dry_run(tmp_path: Path, *args: str) -> dict:
    proc = run_submit([*args, "--dry-run", "--json"], cwd=tmp_path, timeout=60,
                      env={"SLURM_CONF": str(tmp_path / "none.conf")})  # the preflight is skipped
    assert proc.returncode == 0, proc.stderr
    return last_json(proc.stdout)


def normalised(info: dict, tmp_path: Path) -> str:
    # (the interpreter first: a venv of the checkout's own, .venv, lies inside the project)
    return (info["sbatch_script"].replace(info["run_dir"], "<RUN_DIR>").replace(sys.executable, "<PYTHON>")
            .replace(str(ROOT), "<PROJECT>").replace(str(tmp_path), "<TMP>"))


@pytest.mark.parametrize("runtime", ["apptainer", "pyxis"])
def test_container_script_is_the_recorded_one(tmp_path: Path, runtime: str) -> None:
    info = dry_run(tmp_path, "--profile", str(DATA / f"{runtime}.yaml"))
    script = normalised(info, tmp_path)
    recorded = DATA / f"{runtime}-dry-run.sbatch"
    if os.environ.get("UPDATE_RECORDED"):
        recorded.write_text(script)
    assert script == recorded.read_text()
    command = srun_line(script)
    if runtime == "apptainer":
        # The image file is read relative to the profile file, quoted (it has a space); GPUs: --nv;
        # the run folder, the code and the directory the ranks start in (the submit directory) are bound
        # as on the host; the image's interpreter runs.
        assert ("apptainer exec --nv --bind /tmp --bind /var/tmp:/scratch --bind <PROJECT> --bind "
                "<RUN_DIR> --bind <TMP> '<PROJECT>/tests/data/images/pytorch 24.08.sif' /opt/conda/bin/python -u -m "
                "submitit.core._submit") in command
    else:
        assert ("--container-image=nvcr.io/nvidia/pytorch:24.08-py3 --container-mounts=/tmp:/datasets:ro,"
                "<PROJECT>:<PROJECT>,<RUN_DIR>:<RUN_DIR>,<TMP>:<TMP> python3 -u -m submitit.core._submit") in command


def test_python_on_the_nodes_is_a_path_or_a_command(tmp_path: Path) -> None:
    """A path (relative: from the profile file) or a bare command found on the node's PATH after
    the setup lines; values are quoted, so a path with metacharacters stays one word."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "p.yaml").write_text("extends: slurm-cpu\npython: ../envs/a b/bin/python\n")
    command = srun_line(dry_run(tmp_path, "--profile", "conf/p.yaml")["sbatch_script"])
    assert f" '{tmp_path}/envs/a b/bin/python' -u -m submitit.core._submit " in command
    info = dry_run(tmp_path, "--profile", "slurm-gpu")
    assert srun_line(info["sbatch_script"]).split("--kill-on-bad-exit=1 ")[1].startswith("python -u -m")
    assert 'eval "$(conda shell.bash hook)"\nconda activate ddp\n' in info["sbatch_script"]
    command = dry_run(tmp_path, "--profile", "slurm-cpu", "--set", "profile.python=$(touch x)")["sbatch_script"]
    assert "'$(touch x)' -u -m submitit.core._submit" in command


@pytest.mark.parametrize("sets,message", [
    (["profile.container=img.sif", "profile.executor=local", "profile.nodes=1"], "'container'"),
    (["profile.python=/x/python", "profile.executor=debug", "profile.nodes=1", "profile.tasks_per_node=1"],
     "'python'"),
    (["profile.container_binds=[\"/a,/b\"]", "profile.container=i.sif"], "no commas"),
    (["profile.container_runtime=docker"], "'apptainer', 'singularity', 'pyxis'"),
])
def test_bad_container_settings_are_one_line_errors(tmp_path: Path, sets: list[str], message: str) -> None:
    args = ["--profile", "slurm-cpu"]
    for item in sets:
        args += ["--set", item]
    proc = run_submit([*args, "--dry-run"], cwd=tmp_path, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith("error: ") and message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
