"""The interpreter on the nodes: a profile naming a second virtual environment's Python runs the
job with it, on the SLURM dev cluster and with the local executor (the task reports sys.executable).

The second environment is a real `python -m venv` that sees the tests' own packages
(tests.helpers.sibling_venv: it reuses their torch and submitit instead of installing 2 GB); what makes it
different is its path, which is all the profile names.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers import last_json, run_submit, sibling_venv


@pytest.fixture(scope="module")
def second_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = sibling_venv(tmp_path_factory.mktemp("second") / "venv", pip=False)
    python = venv / "bin" / "python"
    assert str(python) != sys.executable
    return python


def write_profile(extends: str, python: Path) -> Path:
    """A profile kept next to the environment, naming its Python by a relative path (read from the
    profile file's folder): conf/second.yaml with `python: ../venv/bin/python`."""
    home = python.parents[2]
    (home / "conf").mkdir(exist_ok=True)
    profile = home / "conf" / f"second-{Path(extends).stem}.yaml"
    profile.write_text(f"extends: {extends}\npython: {Path('..') / python.relative_to(home)}\n")
    return profile


def test_local_job_runs_with_the_profiles_python(second_python: Path, tmp_path: Path) -> None:
    profile = write_profile("local", second_python)
    proc = run_submit(["--profile", str(profile), "--set", "job.epochs=2", "--json"], cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert last_json(proc.stdout)["python"] == str(second_python)


def test_dev_cluster_job_runs_with_the_profiles_python(slurm_cluster: Path, second_python: Path,
                                                       tmp_path: Path) -> None:
    profile = write_profile("dev-cluster", second_python)
    proc = run_submit(["--profile", str(profile), "--set", "job.epochs=2", "--set", f"profile.runs_dir={tmp_path}",
                       "--wait", "--json"], cwd=tmp_path, timeout=400,
                      env={"SLURM_CONF": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = last_json(proc.stdout)
    assert result["python"] == str(second_python)
    script = next(Path(result["run_dir"]).glob("logs/*/*_submission.sh")).read_text()
    assert f"--kill-on-bad-exit=1 {second_python} -u -m submitit.core._submit" in script
    # And the probe, the torch-free look at what every task gets, says the same for each rank.
    probe = run_submit(["probe", "--profile", str(profile), "--set", f"profile.runs_dir={tmp_path}", "--json"],
                       cwd=tmp_path, timeout=300, env={"SLURM_CONF": ""})
    assert probe.returncode == 0, probe.stdout + probe.stderr
    assert {t["python"] for t in last_json(probe.stdout)["tasks"]} == {str(second_python)}
