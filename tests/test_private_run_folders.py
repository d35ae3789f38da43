"""Run folders are private to the user: they hold pickles that submitit and `status` load, so anyone
who could write there could run code as the user.

Folders are made 0700 and files 0600 whatever the umask (these runs start from a shell with umask
000), locally and on the SLURM dev cluster (where the job itself writes the logs, the result
pickles, checkpoints and metrics); `status` refuses to load pickles from a folder that others can
write. And no crash leaves a core file in the folder the job was submitted from.
"""

from __future__ import annotations

import os
import resource
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, run_submit, the_run


def submit_with_umask_000(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python submit.py ARGS` from a shell whose umask is 000 (every new file world-writable)."""
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    env["PYTHONPATH"] = str(ROOT)
    command = f"umask 000 && exec {shlex.quote(sys.executable)} {shlex.quote(str(ROOT / 'submit.py'))} " + \
        " ".join(shlex.quote(a) for a in args)
    return subprocess.run(["sh", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def open_to_others(run_dir: Path) -> list[str]:
    """Everything under run_dir (itself included) that group or others may read, write or enter."""
    found = []
    for path in [run_dir, *run_dir.rglob("*")]:
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            continue
        if mode & 0o077:
            found.append(f"{path.relative_to(run_dir.parent)} {stat.filemode(mode)}")
    return found


def test_local_run_folder_is_private_under_umask_000(tmp_path: Path) -> None:
    proc = submit_with_umask_000(["--set", "job.epochs=1", "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = the_run(tmp_path / "runs")
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    assert list(run_dir.glob("logs/*/*_result.pkl")), "no result pickles to check"
    assert (run_dir / "checkpoints").is_dir() or (run_dir / "model_final.pt").is_file()
    assert open_to_others(run_dir) == []
    # Local runs leave no empty submitit folder template behind.
    assert not (run_dir / "logs" / "%j").exists()


CLAIM = ("import os, sys; os.umask(0); from pathlib import Path; from launcher.rundir import layout; "
         "print(layout.claim(Path(sys.argv[1])))")


def test_submitters_started_in_the_same_second_each_claim_their_own_private_folder(tmp_path: Path) -> None:
    """Every creator of a run folder (a submission, `probe`, the local record of a run over SSH) makes it
    with layout.claim: 6 at once asking for one name get 6 folders (the name, then -2 ... -6), each
    0700 under umask 000, none shared."""
    base = tmp_path / "runs" / "20261201-100000-digits-local"
    procs = [subprocess.Popen([sys.executable, "-c", CLAIM, str(base)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)}) for _ in range(6)]
    claimed = [Path(p.communicate(timeout=120)[0].strip()) for p in procs]
    assert sorted(claimed) == sorted([base, *(base.with_name(f"{base.name}-{n}") for n in range(2, 7))]), claimed
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o700 for p in claimed)


@pytest.mark.slurm
def test_slurm_run_folder_is_private_under_umask_000(slurm_cluster: Path, tmp_path: Path) -> None:
    """Here the job writes most of the folder on the nodes (logs, pickles, checkpoints, metrics)."""
    proc = submit_with_umask_000(["--profile", "dev-cluster", "--set", "job.epochs=1", "--set",
                                  f"profile.runs_dir={tmp_path / 'runs'}", "--wait", "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = the_run(tmp_path / "runs")
    assert list(run_dir.glob("logs/*/*_result.pkl")) and list(run_dir.glob("logs/*/*_log.out"))
    assert open_to_others(run_dir) == []


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("finished")
    proc = run_submit(["--set", "job.epochs=1"], cwd=where)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run_dir = the_run(where / "runs")
    return run_dir


@pytest.mark.parametrize("opened", [".", "logs", "logs/JOB"])
def test_status_refuses_pickles_in_a_folder_others_can_write(finished_run: Path, tmp_path: Path,
                                                             opened: str) -> None:
    run_dir = tmp_path / "runs" / "run"
    shutil.copytree(finished_run, run_dir)
    (job_dir,) = (run_dir / "logs").iterdir()
    target = run_dir / opened.replace("JOB", job_dir.name)
    target.chmod(0o777)
    proc = run_submit(["status", str(run_dir)], cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "writable by others" in lines[0] and str(target) in lines[0], proc.stderr
    assert "chmod -R go-w" in lines[0]
    # Made private again (as the message says), the run is read as before.
    subprocess.run(["chmod", "-R", "go-w", str(run_dir)], check=True)
    proc = run_submit(["status", str(run_dir)], cwd=tmp_path)
    assert proc.returncode == 0 and "completed" in proc.stdout, proc.stdout + proc.stderr


def test_a_crashing_task_leaves_no_core_file(tmp_path: Path) -> None:
    """A rank that aborts (SIGABRT, as a C++ `terminate` at exit does) writes no core anywhere, even
    with core dumps allowed in the submitting shell."""
    script = tmp_path / "abort.py"
    script.write_text("import os\nfrom launcher.node.task import private_and_coreless\n"
                      "private_and_coreless()\nos.abort()\n")
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (hard, hard)), check=False)
    assert proc.returncode == -6
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("core")], list(tmp_path.iterdir())
    assert (soft, hard) == resource.getrlimit(resource.RLIMIT_CORE)
