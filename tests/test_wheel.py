"""Installed as a user installs it: a wheel built from the checkout, in a fresh virtual environment,
run from an empty folder outside the checkout through the `ddp-submit` console command.

The virtual environment reuses the tests' own torch (tests.helpers.sibling_venv) instead of
downloading 2 GB; the project itself comes only from the wheel (checked: the modules load from the
venv, not from the checkout or an editable install).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, last_json, sibling_venv


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("wheel")
    # Build from a copy of what git would ship (tracked and new files, nothing ignored): an in-tree
    # build would reuse a stale build/ folder.
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    source = base / "source"
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(base / "dist"), str(source)], check=True, capture_output=True, timeout=300)
    (wheel,) = (base / "dist").glob("ddp_submit-*.whl")
    env_dir = sibling_venv(base / "venv")
    subprocess.run([str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--ignore-installed", str(wheel)], check=True, capture_output=True, timeout=300)
    return env_dir


def command(venv: Path, args: list[str], cwd: Path, env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`ddp-submit ARGS` as a user runs it: no PYTHONPATH, the venv's bin first on PATH."""
    # No SLURM_CONF either (the slurm_cluster fixture may have set one for the session): the dry
    # runs of slurm-cpu profiles here are about finding files, not a live cluster's limits.
    full = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DDP_SUBMIT_CONFIG_DIR", "SLURM_CONF")}
    full["PATH"] = f"{venv / 'bin'}{os.pathsep}{full.get('PATH', '')}"
    full["HOME"] = str(cwd.parent / "home")  # no stray ~/.config/ddp-submit of this machine
    full.pop("XDG_CONFIG_HOME", None)
    full.update(env or {})
    return subprocess.run(["ddp-submit", *args], cwd=cwd, env=full, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.fixture
def empty(tmp_path: Path) -> Path:
    folder = tmp_path / "empty"
    folder.mkdir()
    return folder


def test_installed_command_trains_the_default_job(venv: Path, empty: Path) -> None:
    proc = command(venv, ["--json"], empty, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = last_json(proc.stdout)
    assert result["test_accuracy"] >= 0.97
    assert Path(result["run_dir"]).parent == empty / "runs"
    # The code that ran is the wheel's, not the checkout's.
    which = subprocess.run([str(venv / "bin" / "python"), "-c", "import launcher, trainer.config.job as c; "
                            "print(launcher.__file__); print(c.JOB_FILES.shipped)"], cwd=empty, capture_output=True,
                           text=True, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, check=True)
    module, jobs = which.stdout.split()
    assert module.startswith(str(venv)) and jobs.startswith(str(venv)), which.stdout


def test_profiles_are_found_by_path_here_in_the_user_folder_then_shipped(venv: Path, empty: Path) -> None:
    (empty / "my.yaml").write_text("extends: local\ntasks_per_node: 1\n")
    proc = command(venv, ["--profile", "./my.yaml", "--dry-run", "--json"], empty)
    assert proc.returncode == 0, proc.stderr
    assert last_json(proc.stdout)["profile"]["name"] == "my"
    assert last_json(proc.stdout)["world_size"] == 1

    # The user folder: ~/.config/ddp-submit, $XDG_CONFIG_HOME/ddp-submit, or $DDP_SUBMIT_CONFIG_DIR.
    home_profiles = empty.parent / "home" / ".config" / "ddp-submit" / "cluster_profiles"
    home_profiles.mkdir(parents=True)
    (home_profiles / "mine.yaml").write_text("extends: slurm-cpu\ntime: 1-12\n")
    proc = command(venv, ["--profile", "mine", "--dry-run", "--json"], empty)
    assert proc.returncode == 0, proc.stderr
    assert last_json(proc.stdout)["executor_parameters"]["time"] == 2160
    moved = empty.parent / "elsewhere"
    (moved / "cluster_profiles").mkdir(parents=True)
    (moved / "cluster_profiles" / "moved.yaml").write_text("extends: local\ncpus_per_task: 2\n")
    for env in ({"DDP_SUBMIT_CONFIG_DIR": str(moved)}, {"XDG_CONFIG_HOME": str(empty.parent),
                                                        "HOME": "/nonexistent"}):
        if "XDG_CONFIG_HOME" in env:
            shutil.copytree(moved, empty.parent / "ddp-submit")
        proc = command(venv, ["--profile", "moved", "--dry-run", "--json"], empty, env=env)
        assert proc.returncode == 0, proc.stderr
        assert last_json(proc.stdout)["profile"]["cpus_per_task"] == 2

    # ./cluster_profiles in the current directory comes before the user folder and the shipped ones.
    (empty / "cluster_profiles").mkdir()
    (empty / "cluster_profiles" / "local.yaml").write_text("executor: local\ntasks_per_node: 3\n")
    proc = command(venv, ["--dry-run", "--json"], empty)
    assert last_json(proc.stdout)["world_size"] == 3
    listing = command(venv, ["list-profiles", "--json"], empty)
    rows = [json.loads(line) for line in listing.stdout.splitlines()]
    where = {(r["name"], r["from"]): r for r in rows}
    assert where[("local", "current directory")]["used"] and not where[("local", "shipped")]["used"]
    assert where[("mine", "user folder")]["file"] == str(home_profiles / "mine.yaml")
    assert where[("slurm-gpu", "shipped")]["file"].startswith(str(venv))
    shown = command(venv, ["show", "--profile", "mine"], empty)
    assert f"profile mine: {home_profiles / 'mine.yaml'} (extending {venv}" in shown.stdout, shown.stdout
    jobs = command(venv, ["list-jobs"], empty)
    assert "digits-lr-sweep" in jobs.stdout and "shipped" in jobs.stdout


def test_help_and_every_subcommand_without_torch(venv: Path, empty: Path) -> None:
    proc = command(venv, ["--help"], empty, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert proc.returncode == 0 and "usage: ddp-submit" in proc.stdout
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time")}
    assert "launcher.commands.main" in imported
    assert not {m for m in imported if m.split(".")[0] in ("torch", "submitit", "matplotlib")}
    for sub in ("status", "logs", "cancel", "list", "diff", "probe", "list-profiles", "list-jobs", "show"):
        proc = command(venv, [sub, "--help"], empty)
        assert proc.returncode == 0 and f"usage: ddp-submit {sub}" in proc.stdout, (sub, proc.stderr)


def test_python_api_round_trip_from_the_installed_wheel(venv: Path, empty: Path) -> None:
    """A notebook in a folder outside the project, its module beside it, the wheel's launcher.client:
    a local run's result, and a bad config's own error line (no submit.py anywhere: `python -m launcher`)."""
    from tests.test_python_submit import doc_example

    (empty / "mymodel.py").write_text(doc_example()[0])
    (empty / "tmp").mkdir()
    notebook = (
        "import json, launcher.client as c\n"
        "run = c.submit(entrypoint='mymodel:train', config={'steps': 5})\n"
        "print(json.dumps({'client': c.__file__, 'result': run.result(timeout=300)}))\n"
        "try:\n    c.submit(entrypoint='mymodel:train', config={'stepz': 5}).result(timeout=120)\n"
        "except c.SubmitError as err:\n    print(json.dumps({'refused': str(err)}))\n"
        "def train(ctx):\n    return {'world': ctx.world_size}\n"  # (this script's __main__: pickled by value)
        "print(json.dumps({'by_value': c.submit(train).result(timeout=300)['world']}))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DDP_SUBMIT_CONFIG_DIR", "SLURM_CONF")}
    env["TMPDIR"] = str(empty / "tmp")
    done = subprocess.run([str(venv / "bin" / "python"), "-c", notebook], cwd=empty, env=env, capture_output=True,
                          text=True, timeout=400, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    first, second, third = (json.loads(line) for line in done.stdout.splitlines() if line.startswith("{"))
    assert first["client"].startswith(str(venv)), first["client"]
    assert first["result"]["state"] == "COMPLETED" and first["result"]["world_size"] == 2
    assert Path(first["result"]["run_dir"]).parent == empty / "runs"
    assert "unknown key 'config.stepz'" in second["refused"] and "<stdin>" in second["refused"]
    assert third == {"by_value": 2}
    assert [p.name for p in (empty / "tmp").iterdir() if not p.name.startswith("torchinductor_")] == []


def test_the_readmes_own_code_example_runs_from_the_installed_wheel(venv: Path, empty: Path) -> None:
    """README, "Your own code": mymodel.py and tiny.yaml as the reader creates them in a folder of their own,
    run by the installed command (2 local ranks) with the README's own command line."""
    from tests.test_readme import readers_files

    files = readers_files()
    for name in ("mymodel.py", "tiny.yaml"):
        (empty / name).write_text(files[name])
    proc = command(venv, ["--job", "tiny.yaml", "--set", "job.config.lr=0.05", "--json"], empty, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = last_json(proc.stdout)
    assert result["world_size"] == 2 and result["steps"] == 60 and result["accuracy"] > 0.75, result
    assert Path(result["run_dir"]).parent == empty / "runs"


def test_the_shipped_dev_cluster_profile_finds_the_dev_clusters_config_from_the_wheel(venv: Path, empty: Path) -> None:
    """`--profile dev-cluster` from an installed wheel: its slurm_conf names the file `python -m launcher.devcluster
    up` writes (both beside the wheel's shipped profiles), not a folder one level away from it."""
    probe = ("import json; from launcher.config.resolve import load_profile; from launcher.devcluster import paths\n"
             "profile = load_profile('dev-cluster')[0]\n"
             "print(json.dumps({'profile': profile.slurm_conf_file, 'cluster': str(paths.slurm_conf_path()),"
             " 'module': paths.__file__}))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DDP_SUBMIT_CONFIG_DIR", "SLURM_CONF",
                                                             "DEV_CLUSTER_DIR")}
    done = subprocess.run([str(venv / "bin" / "python"), "-c", probe], cwd=empty, env=env, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    said = json.loads(done.stdout.splitlines()[-1])
    assert said["module"].startswith(str(venv)), said
    assert said["profile"] == said["cluster"] and said["cluster"].startswith(str(venv)), said
