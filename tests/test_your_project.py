"""Your own repository, as it is (issue 19): a git repository made outside this project, with a flat
package (`mypkg/`) or a src layout (`src/mypkg/`), a job file in `jobs/`, a `scripts/train.py` and a
`data/` folder, submitted from its root and from a subfolder (`sub/`, with its own `data/`).

What a user would notice: the ranks import the snapshot of the repository, not the live files (and
the check before queueing finds what the ranks find); relative paths (`--data data`, `config.data`)
mean the folder the user submitted from; a job held in the queue and edited meanwhile, and its
requeue, run the submitted code; a project over the size cap is refused before anything exists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launcher.commands.main import main
from tests.helpers import ROOT, SUBMIT, last_json, wait_until

ENTRY = '''import os

import torch
import torch.distributed as dist

import mypkg


def main(ctx, config):
    summed = torch.ones(1)
    if dist.is_initialized():
        dist.all_reduce(summed)
    with open(os.path.join(config["data"], "x.txt")) as f:
        data = f.read().strip()
    ctx.log({"summed": float(summed.item())}, 1)
    return {"version": mypkg.VERSION, "data": data, "module": mypkg.__file__, "cwd": os.getcwd()}
'''

# As a torchrun user writes it: its own process group, a relative --data, a last JSON line.
# --hold-first: the first attempt waits (to be requeued); rank 0 notes each attempt's code version.
SCRIPT = '''import argparse, json, os, time

import torch
import torch.distributed as dist

import mypkg

VERSION = "submitted"
parser = argparse.ArgumentParser()
parser.add_argument("--data")
parser.add_argument("--hold-first", action="store_true")
args = parser.parse_args()
dist.init_process_group("gloo")
summed = torch.ones(1)
dist.all_reduce(summed)
notes = os.path.join(os.environ["TRAINER_RUN_DIR"], "attempts.txt")
if dist.get_rank() == 0:
    with open(notes, "a") as f:
        f.write(VERSION + "/" + mypkg.VERSION + "\\n")
dist.barrier()
if args.hold_first and len(open(notes).read().splitlines()) == 1:
    time.sleep(600)
with open(os.path.join(args.data, "x.txt")) as f:
    data = f.read().strip()
print(json.dumps({"version": VERSION + "/" + mypkg.VERSION, "data": data, "script": __file__,
                  "module": mypkg.__file__, "world": dist.get_world_size(), "summed": summed.item()}), flush=True)
dist.destroy_process_group()
'''


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout


def make_repo(root: Path, src_layout: bool) -> Path:
    package = root / ("src/mypkg" if src_layout else "mypkg")
    files = {package / "__init__.py": 'VERSION = "submitted"\n', package / "train.py": ENTRY,
             root / "scripts" / "train.py": SCRIPT, root / "data" / "x.txt": "root-data\n",
             root / "sub" / "data" / "x.txt": "sub-data\n", root / ".gitignore": "runs/\n*.bin\n",
             root / "secret.py": "def main(ctx):\n    pass\n", root / "big.bin": "",
             root / "jobs" / "entry.yaml": 'entrypoint: "mypkg.train:main"\ntarget_metric: summed\nconfig:\n  data: data\n',
             root / "jobs" / "script.yaml": 'script: scripts/train.py\nargs: ["--data", "data"]\n'}
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / ".gitignore").write_text("runs/\n*.bin\nsecret.py\n")
    with open(root / "big.bin", "wb") as f:  # ignored by git: never copied, never counted
        f.truncate(50 * 2**20)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "the submitted code")
    return root


@pytest.fixture(scope="module")
def flat(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(tmp_path_factory.mktemp("users") / "flat", src_layout=False)


@pytest.fixture(scope="module")
def srcrepo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_repo(tmp_path_factory.mktemp("users") / "srcrepo", src_layout=True)


def start(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    """`python submit.py ARGS` from `cwd`, as a user would (the tool on PYTHONPATH, not the user's code)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, SUBMIT, *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], timeout: float = 400) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    return last_json(out)


def edit(repo: Path, package: str) -> None:
    """What a user does while the job waits: change the code it would run."""
    for path in (repo / package / "__init__.py", repo / "scripts" / "train.py"):
        path.write_text(path.read_text().replace('VERSION = "submitted"', 'VERSION = "edited"'))


def test_entrypoint_and_script_on_two_local_ranks_import_the_snapshot_and_read_the_data_meant(
        flat: Path, srcrepo: Path) -> None:
    # Today's code failed the first on both ranks ("no module named 'mypkg'") after its check passed.
    entry = start(["--job", "jobs/entry.yaml", "--set", "profile.tasks_per_node=2", "--json"], flat)
    script = start(["--job", "../jobs/script.yaml", "--set", "profile.tasks_per_node=2", "--json"], srcrepo / "sub")
    result = finish(entry)
    run_dir = Path(result["run_dir"])
    assert result["world_size"] == 2 and result["summed"] == 2.0
    assert (result["version"], result["data"], result["cwd"]) == ("submitted", "root-data", str(flat))
    assert result["module"] == str(run_dir / "project" / "mypkg" / "__init__.py")
    note = json.loads((run_dir / "code" / "SNAPSHOT.json").read_text())["project"]
    assert (note["root"], note["submit_dir"], note["git_dirty"]) == (str(flat), str(flat), False)
    assert note["git_commit"] == git(flat, "rev-parse", "HEAD").strip() and note["files"] == 8
    assert not (run_dir / "project" / "big.bin").exists() and not (run_dir / "project" / "runs").exists()

    result = finish(script)
    run_dir = Path(result["run_dir"])
    assert (result["world"], result["summed"], result["data"]) == (2, 2.0, "sub-data")  # sub/data: where they were
    assert result["script"] == str(run_dir / "project" / "scripts" / "train.py")
    assert result["module"] == str(run_dir / "project" / "src" / "mypkg" / "__init__.py")


def test_resume_from_another_folder_runs_the_snapshot_where_the_run_was_submitted(flat: Path) -> None:
    # Submitted from the root, failing (its data folder is missing), then edited, then resumed from sub/
    # (which has a data/ of its own): the resume runs the submitted code, in the root, reading root/data.
    failed = start(["--job", "jobs/entry.yaml", "--set", "profile.tasks_per_node=1", "--set", "job.config.data=nodata",
                    "--json"], flat)
    out, err = failed.communicate(timeout=300)
    assert failed.returncode == 1, out[-2000:] + err[-2000:]
    run_dir = Path(last_json(out)["run_dir"])
    edit(flat, "mypkg")
    try:
        resumed = finish(start(["--resume", str(run_dir), "--set", "job.config.data=data", "--json"], flat / "sub"))
    finally:
        subprocess.run(["git", "checkout", "--", "."], cwd=flat, check=True)
    assert resumed["state"] == "COMPLETED" and resumed["run_dir"] == str(run_dir)
    result = json.loads((run_dir / "result.json").read_text())
    assert (result["version"], result["data"], result["cwd"]) == ("submitted", "root-data", str(flat))
    assert result["module"] == str(run_dir / "project" / "mypkg" / "__init__.py")
    assert not (flat / "sub" / "runs").exists()  # the run stays where it was


@pytest.mark.slurm
def test_dev_cluster_two_nodes_and_a_held_job_edited_then_requeued_runs_the_submitted_code(
        slurm_cluster: Path, flat: Path, srcrepo: Path) -> None:
    cluster = ["--profile", "dev-cluster", "--set", f"profile.slurm_conf={slurm_cluster}", "--set", "profile.nodes=2",
               "--set", "profile.time=15", "--wait", "--json"]
    held = start(["--job", "jobs/script.yaml", *cluster, "--set", "job.args=[--data, data, --hold-first]",
                  "--set", "profile.sbatch_extra.begin=now+1hour"], flat)
    entry = start(["--job", "../jobs/entry.yaml", *cluster], srcrepo / "sub")
    try:
        record = wait_until(lambda: next(((p, json.loads(p.read_text())) for p in (flat / "runs").glob(
            "*-script-dev-cluster*/run.json") if json.loads(p.read_text()).get("job_ids")), None), 180, "the job id")
        run_dir, job_id = record[0].parent, record[1]["job_ids"][0]
        edit(flat, "mypkg")  # while the job waits in the queue
        subprocess.run(["scontrol", "update", f"jobid={job_id}", "starttime=now"], check=True, timeout=30)
        notes = run_dir / "attempts.txt"
        wait_until(lambda: notes.is_file() and notes.read_text().strip(), 240, "the first attempt")
        subprocess.run(["scontrol", "requeue", job_id], check=True, timeout=30)
        result = finish(held, timeout=400)
    finally:
        held.kill()
        subprocess.run(["git", "checkout", "--", "."], cwd=flat, check=False)
    assert notes.read_text().splitlines() == ["submitted/submitted", "submitted/submitted"]  # both attempts
    assert (result["version"], result["data"], result["restarts"]) == ("submitted/submitted", "root-data", 1)
    assert result["script"] == str(run_dir / "project" / "scripts" / "train.py") and result["world"] == 2

    result = finish(entry)
    assert result["world_size"] == 2 and len(set(result["nodes"])) == 2 and result["data"] == "sub-data"
    assert result["module"] == str(Path(result["run_dir"]) / "project" / "src" / "mypkg" / "__init__.py")
    assert result["cwd"] == str(srcrepo / "sub")


def call(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_dry_run_shows_the_rule_and_the_check_refuses_what_the_ranks_would_miss(
        srcrepo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(srcrepo / "sub")
    monkeypatch.delenv("SLURM_CONF", raising=False)
    before = set((srcrepo / "sub" / "runs").glob("*"))
    code, out, err = call(["--job", "../jobs/entry.yaml", "--dry-run", "--json"], capsys)
    assert code == 0, err
    shown = json.loads(out.strip().splitlines()[-1])["your_code"]
    run = Path(json.loads(out.strip().splitlines()[-1])["run_dir"])
    assert (shown["project_root"], shown["working_directory"]) == (str(srcrepo), str(srcrepo / "sub"))
    assert shown["search_path"][:3] == [str(run / "code"), str(run / "project"), str(run / "project" / "src")]
    # A module that git ignores would be missing on every rank: refused, naming the key and the file.
    code, out, err = call(["--job", "../jobs/entry.yaml", "--set", "job.entrypoint=secret:main"], capsys)
    assert code == 2 and err.startswith("error: ") and "secret.py is left out of the project's snapshot" in err
    # Over the size cap: one line naming the largest files and the keys; no run folder.
    code, out, err = call(["--job", "../jobs/entry.yaml", "--set", "profile.snapshot_max_mb=0.0001"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "snapshot_max_mb" in err and "snapshot_exclude" in err and "jobs/entry.yaml" in err
    assert set((srcrepo / "sub" / "runs").glob("*")) == before  # no run folder made
