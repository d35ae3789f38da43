"""`probe` checks the nodes' interpreter before any training: a profile whose `python` is a bare virtual
environment (no pip, no system site packages: no submitit, torch, yaml or numpy) is told, in one `error:`
line, every package it lacks, with `--job` also the job's own top-level imports; locally and on two
dev-cluster nodes. The machine's own interpreter passes and is told only what the job adds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, SUBMIT, last_json, run_submit

NEEDED = "submitit, torch, yaml, numpy"


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's project: jobs/mine.yaml runs mypkg.train:main, which imports a package nobody has,
    its own module mypkg.util and the standard library; and profiles naming a bare venv's python."""
    home = tmp_path_factory.mktemp("nodeenv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home / "bare")], check=True, timeout=120)
    (home / "mypkg").mkdir()
    (home / "mypkg" / "__init__.py").write_text("")
    (home / "mypkg" / "util.py").write_text("")
    (home / "mypkg" / "train.py").write_text(
        "import json\nimport os\n\nimport torch\nimport nosuchpkg_for_probe.layers\n\nfrom mypkg import util\n\n"
        "def main(ctx):\n    import optional_inside_function\n    return {}\n")
    (home / "jobs").mkdir()
    (home / "jobs" / "mine.yaml").write_text('entrypoint: "mypkg.train:main"\n')
    for base in ("local", "dev-cluster"):
        (home / f"bare-{base}.yaml").write_text(f"extends: {base}\npython: bare/bin/python\n")
    return home


def probe(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    """`submit.py probe ARGS`, started (several run at once)."""
    return subprocess.Popen([sys.executable, SUBMIT, "probe", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_local_probe_names_every_missing_package(user: Path) -> None:
    bare = probe(["--profile", "bare-local.yaml", "--job", "jobs/mine.yaml"], user)
    mine = probe(["--profile", "local", "--job", "jobs/mine.yaml", "--json"], user)
    out, err = bare.communicate(timeout=300)
    assert bare.returncode == 1, out + err
    (line,) = err.strip().splitlines()
    assert line.startswith("error: bare-local.yaml") and str(user / "bare" / "bin" / "python") in line
    assert f"cannot import {NEEDED}, nosuchpkg_for_probe (pip install submitit torch pyyaml numpy" in line
    assert "mypkg" not in line.replace("mine.yaml", "") and "optional_inside" not in line
    # This machine's interpreter has the tool's packages: only the job's own missing one is named.
    out, err = mine.communicate(timeout=300)
    assert mine.returncode == 1, out + err
    (line,) = err.strip().splitlines()
    assert line.endswith("cannot import nosuchpkg_for_probe (pip install nosuchpkg_for_probe); install them "
                         "there, or point the profile's 'python' or 'container' at an environment that has them")
    # Without --job the same interpreter passes, and the report says what it found.
    ok = run_submit(["probe", "--profile", "local", "--json"], user, timeout=300)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    (env, *_) = last_json(ok.stdout)["environment"]
    assert env["python"] == sys.executable and env["missing"] == {}
    assert sorted(env["versions"]) == sorted(NEEDED.split(", ")) and "environment: " in ok.stdout


def test_probe_finds_a_script_where_the_check_and_the_ranks_do(tmp_path: Path) -> None:
    """A `script:` given relative to the project root, submitted from a folder below it with the job file
    in another: the check before queueing finds it there (trainer.config.project.script_places), and so
    must `probe`, which looked only next to the job file and so named none of the script's imports."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=60)
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "train.py").write_text("import json\n\nimport nosuchpkg_for_script\n")
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "s.yaml").write_text("name: s\nscript: tools/train.py\n")
    (tmp_path / "sub").mkdir()
    done = run_submit(["probe", "--profile", "local", "--job", "../jobs/s.yaml"], tmp_path / "sub", timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "cannot import nosuchpkg_for_script (pip install nosuchpkg_for_script)" in line, line


@pytest.mark.slurm
def test_dev_cluster_probe_names_every_missing_package(slurm_cluster: Path, user: Path) -> None:
    done = run_submit(["probe", "--profile", "bare-dev-cluster.yaml", "--job", "jobs/mine.yaml"], user,
                      timeout=300, env={"SLURM_CONF": ""})
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert f"cannot import {NEEDED}, nosuchpkg_for_probe (pip install" in line
    assert "(on cpu" in line  # the node that said so
