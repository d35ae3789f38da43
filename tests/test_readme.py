"""The README's commands run as written: a newcomer copies them first, so each one that can run on this
machine is run here, from a temporary copy of the checkout (runs/ and the example files land there, not in
the checkout). Those that cannot are listed with the reason; a command in neither list fails the test, so a
new README command must be placed in one of them."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()

# Commands that cannot run here, and why.
NOT_RUN = {
    "python3 -m venv .venv": "tests/run_all.sh makes .venv itself where python3 is externally managed (PEP 668)",
    ". .venv/bin/activate": "tests/run_all.sh activates .venv where it made or found one",
    "pip install torch==2.14.1 torchvision==0.29.1 -e .":
        "what tests/run_all.sh runs first (test_the_pip_line_is_the_one_run_all_installs checks they agree)",
    "bash tests/run_all.sh": "the test command itself",
    "python submit.py --profile slurm-gpu --job cifar10": "needs a real SLURM cluster with GPUs",
    "python submit.py --profile slurm-gpu --set profile.launch=torchrun":
        "needs a real SLURM cluster with GPUs (tests/test_torchrun_launch.py runs the shape on the dev cluster)",
    "python submit.py --profile mylab --job digits --wait":
        "needs an ssh login to a cluster (tests/test_remote.py runs it through a local sshd)",
    "salloc -N 2 python submit.py --profile dev-cluster --in-allocation":
        "holds 2 of the shared dev cluster's nodes for the run (tests/test_in_allocation.py runs it inside salloc -N 2)",
    "python submit.py diff RUN_A RUN_B": "RUN_A and RUN_B stand for two of the reader's runs (tests/test_signature.py "
                                         "runs diff on two runs' records, as a user calls it)",
}
# Commands that run on this machine, each with something a user would see in its output.
LOCAL = {
    "python submit.py": "test_accuracy",
    "python submit.py --profile debug": "test_accuracy",
    "torchrun --standalone --nproc_per_node=2 -m trainer --job digits": "test_accuracy",
    "python submit.py --profile my-profile.yaml --job my-job.yaml --dry-run": "Dry run: nothing was submitted.",
    "python submit.py --profile my-profile.yaml --job my-job.yaml --set job.epochs=1 --json": '"run_dir"',
    "python submit.py list-profiles": "dev-cluster",
    "python submit.py show --job digits": "digits.yaml",
    "python submit.py --job tiny.yaml --set job.config.lr=0.05": "accuracy",
    "python submit.py list": "digits",
}
# Commands for the dev cluster (shared, already up): submitted, then cancelled so nothing stays queued.
DEV_CLUSTER = {
    "python submit.py --profile dev-cluster --job digits-lr-sweep": "digits-lr-sweep",
    "python submit.py probe --profile dev-cluster --job tiny.yaml": "environment: ",
    "python submit.py --profile dev-cluster --when": "Nothing was queued.",
    "python submit.py --profile pool.yaml --job digits-lr-sweep": "digits-lr-sweep",
}


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README, flags=re.S | re.M)


def commands() -> list[str]:
    found = []
    for block in blocks("bash"):
        for line in block.splitlines():
            # A trailing `  # comment` explains the command to the reader; bash would drop it too.
            command = re.sub(r"\s+#.*$", "", line).strip()
            if command and not command.startswith("#"):
                # `a && b` is two commands: each is run, or listed, on its own.
                found.extend(part.strip() for part in command.split(" && "))
    return found


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tracked files of the checkout, plus the README's files named by their first comment line."""
    dest = tmp_path_factory.mktemp("readme") / "project"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    for name in files.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    if (ROOT / ".dev-cluster").exists():  # dev-cluster.yaml finds slurm.conf through ../.dev-cluster
        (dest / ".dev-cluster").symlink_to((ROOT / ".dev-cluster").resolve())
    for name, block in readers_files().items():
        (dest / name).write_text(block)
    return dest


def readers_files() -> dict[str, str]:
    """The files the README has its reader create, by name: each block whose first line names a file in
    the reader's own folder (`# my-job.yaml`, `# mymodel.py`), written whole, as the reader would."""
    found = {}
    for block in blocks("yaml") + blocks("python"):
        match = re.fullmatch(r"# (\S+\.(?:yaml|py))", block.splitlines()[0])
        if match and "/" not in match.group(1):
            found[match.group(1)] = block
    return found


def run(command: str, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    env.pop("DDP_SUBMIT_CONFIG_DIR", None)
    # The user folder must not change what a name resolves to.
    env["XDG_CONFIG_HOME"] = str(cwd / ".config")
    # `python` and `torchrun` as a user types them: this interpreter's.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_every_readme_command_is_run_or_listed_with_a_reason() -> None:
    listed = {**NOT_RUN, **LOCAL, **DEV_CLUSTER}
    assert [c for c in commands() if c not in listed] == []
    assert [c for c in listed if c not in commands()] == []


def test_the_pip_line_is_the_one_run_all_installs() -> None:
    readme_pip = next(c for c in commands() if c.startswith("pip install")).split()
    run_all = next(line for line in (ROOT / "tests/run_all.sh").read_text().splitlines()
                   if " pip install " in line).split()
    pins = lambda words: [w for w in words if "==" in w]  # noqa: E731
    assert pins(readme_pip) == pins(run_all) != []
    # The README installs the project itself; run_all.sh adds the test extra.
    assert "." in readme_pip[readme_pip.index("-e") + 1:][:1] and "'.[test]'" in run_all


@pytest.fixture(scope="module")
def ran(copy: Path) -> Callable[[str], subprocess.CompletedProcess]:
    """Each local command run once in the copy; the tests below that read a command's run folder share it."""
    done: dict[str, subprocess.CompletedProcess] = {}

    def run_once(command: str) -> subprocess.CompletedProcess:
        if command not in done:
            done[command] = run(command, copy)
        return done[command]
    return run_once


# Commands that read what another one made, in the order a reader runs them: each test runs those first (once).
AFTER = {"python submit.py list": ("python submit.py",)}


@pytest.mark.parametrize("command", list(LOCAL))
def test_a_local_readme_command_runs(command: str, ran: Callable[[str], subprocess.CompletedProcess]) -> None:
    for first in AFTER.get(command, ()):
        assert ran(first).returncode == 0, first
    done = ran(command)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert LOCAL[command] in done.stdout + done.stderr


CONTRACT = ("run_dir", "world_size", "test_accuracy", "test_loss", "epochs", "images_per_second")


def test_the_first_command_trains_the_embedded_default_on_two_local_ranks(
        ran: Callable[[str], subprocess.CompletedProcess], copy: Path) -> None:
    """`python submit.py`: digits on 2 local ranks, and a run folder that holds what the README says."""
    done = ran("python submit.py")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    shown = re.search(r"^run folder: (\S+)$", done.stdout, flags=re.M)
    assert shown and "test_accuracy" in done.stdout, done.stdout[-3000:]
    run_dir = copy / shown.group(1)  # shown relative to where the user is, if below it
    assert run_dir.parent == copy / "runs"
    result = json.loads((run_dir / "result.json").read_text())
    assert [key for key in CONTRACT if key not in result] == []
    assert result["world_size"] == 2 and result["test_accuracy"] >= 0.97
    # The resolved config, per-task logs, metrics and the final weights.
    for name in ("run.json", "profile.yaml", "job.yaml", "metrics.jsonl", "model_final.pt", "result.json"):
        assert (run_dir / name).is_file(), name
    epochs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in epochs] == list(range(1, result["epochs"] + 1))
    assert all({"train_loss", "images_per_second", "epoch_time_s"} <= set(e) for e in epochs)
    assert "global_batch_size: 64" in (run_dir / "job.yaml").read_text()
    logs = sorted(p.name for p in run_dir.glob("logs/*/*_log.out"))
    assert len(logs) == 2, logs  # one log per rank


def test_torchrun_runs_the_trainer_unchanged(ran: Callable[[str], subprocess.CompletedProcess], copy: Path) -> None:
    """The README's torchrun line: torchrun's own ranks, the same trainer, the same accuracy."""
    done = ran("torchrun --standalone --nproc_per_node=2 -m trainer --job digits")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["world_size"] == 2 and result["test_accuracy"] >= 0.97
    assert (copy / result["run_dir"] / "model_final.pt").is_file()  # runs/trainer, below the user's folder


@pytest.mark.slurm
@pytest.mark.parametrize("command", list(DEV_CLUSTER))
def test_a_dev_cluster_readme_command_runs(command: str, copy: Path, slurm_cluster: Path) -> None:
    done = run(command, copy)
    try:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert DEV_CLUSTER[command] in done.stdout
    finally:
        # Whatever it queued is cancelled: the cluster is shared.
        for run_dir in (copy / "runs").glob("*digits-lr-sweep*"):
            run(f"python submit.py cancel {shlex.quote(str(run_dir))}", copy)


def test_the_own_code_example_is_a_whole_file_of_the_readers_project_that_a_job_names() -> None:
    """The README's own code is a module the reader creates in their project's folder (not a package of this
    checkout), named by a job file the reader creates too: it works from an installed wheel
    (tests/test_wheel.py runs it there), and the commands above run it here."""
    files = readers_files()
    modules = [name for name in files if name.endswith(".py")]
    assert modules == ["mymodel.py"], list(files)
    assert 'entrypoint: "mymodel:train"' in files["tiny.yaml"]
    assert all(re.fullmatch(r"# (\S+\.py)", block.splitlines()[0]) for block in blocks("python")
               if not NOTEBOOK_CELL.fullmatch(block.splitlines()[0])), \
        "a python block that is neither a file the reader creates nor a notebook cell a test runs"
    assert "tests." not in "".join(blocks("python") + blocks("yaml")), "an example that needs this checkout"


# A README python block may also be a notebook cell, run as written in a real kernel by the test it names.
NOTEBOOK_CELL = re.compile(r"# a notebook cell \((tests/\S+\.py) runs it as written\)")


def test_every_notebook_cell_is_run_by_the_test_it_names() -> None:
    cells = [block for block in blocks("python") if NOTEBOOK_CELL.fullmatch(block.splitlines()[0])]
    assert cells, "the README's own code starts with a notebook cell"
    for block in cells:
        test = NOTEBOOK_CELL.fullmatch(block.splitlines()[0]).group(1)  # type: ignore[union-attr]
        assert "README" in (ROOT / test).read_text(), f"{test} does not run the README's cell"


def test_every_link_to_a_page_of_the_checkout_finds_it() -> None:
    """The README sends readers to docs/: a renamed page must not leave a dead link."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    dead = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            if not (page.parent / target).exists():
                dead.append(f"{page.relative_to(ROOT)}: {target}")
    assert dead == []
    assert re.findall(r"\]\((docs/[^)#]+)", README), "the README links to no docs/ page"
