"""An unchanged re-snapshot links the previous run's copies, and never at the cost of what a run imports
(launcher/rundir/snapshot_links.py): in-process, on a git repository made in a temp folder, through the same
`survey` + `ensure` the submitter calls (tests/test_your_project.py runs them end to end).

What a user would notice: the code each run holds is the code as it was when that run was submitted,
whatever was edited before or after, and however quickly; an unchanged file costs a link, not a copy.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from launcher import filestamp
from launcher.rundir import snapshot

OLD = "X = 'old'\n"


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("linked") / "repo"
    for i in range(6):
        (root / "pkg").mkdir(parents=True, exist_ok=True)
        (root / "pkg" / f"m{i}.py").write_text(OLD)
    (root / ".gitignore").write_text("runs/\n")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    time.sleep(filestamp.RACY_S + 0.1)  # older than the racy window: the files may be linked
    return root


def take(repo: Path, runs: Path, name: str) -> Path:
    """A submission's snapshot of `repo` into runs/NAME: its copy of the project."""
    listing = snapshot.survey(repo, [], 10, "profile.yaml", skip=[runs])
    snapshot.ensure(runs / name, listing, repo)
    return runs / name / "project"


def note(copy: Path) -> dict[str, int]:
    return json.loads((copy.parent / "code" / "SNAPSHOT.json").read_text())["project"]


def same_file(a: Path, b: Path) -> bool:
    return os.lstat(a).st_ino == os.lstat(b).st_ino


def test_an_edit_after_a_run_reaches_the_next_run_only_and_the_rest_is_linked_read_only(
        repo: Path, tmp_path: Path) -> None:
    first = take(repo, tmp_path / "runs", "r1")
    assert note(first)["linked"] == 0
    (repo / "pkg" / "m0.py").write_text("X = 'new, and longer'\n")
    second = take(repo, tmp_path / "runs", "r2")
    assert (first / "pkg" / "m0.py").read_text() == OLD  # run 1 keeps what it was submitted with
    assert (second / "pkg" / "m0.py").read_text() == "X = 'new, and longer'\n"
    assert not same_file(first / "pkg" / "m0.py", second / "pkg" / "m0.py")
    assert same_file(first / "pkg" / "m1.py", second / "pkg" / "m1.py")  # unchanged: one file, two runs
    assert note(second)["linked"] == note(second)["files"] - 1 == 6  # m1..m5 and .gitignore
    assert not os.lstat(second / "pkg" / "m1.py").st_mode & 0o222  # nothing may write it in place
    assert not os.lstat(second / "pkg" / "m0.py").st_mode & 0o222
    # The tool's own packages are linked too; with run 2 deleted since, run 3 links to run 1's copies.
    assert json.loads((second.parent / "code" / "SNAPSHOT.json").read_text())["linked"] > 0
    shutil.rmtree(tmp_path / "runs" / "r2")
    third = take(repo, tmp_path / "runs", "r3")
    assert (third / "pkg" / "m0.py").read_text() == "X = 'new, and longer'\n" and note(third)["linked"] == 6
    assert same_file(first / "pkg" / "m1.py", third / "pkg" / "m1.py")


def test_an_edit_in_the_same_second_or_keeping_the_mtime_is_not_missed(repo: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    (repo / "pkg" / "m2.py").write_text("X = 'fresh'\n")  # just before the snapshot: inside the racy window
    first = take(repo, runs, "r1")
    second = take(repo, runs, "r2")  # m2 is unchanged, but too recent to trust its stat: copied again
    assert not same_file(first / "pkg" / "m2.py", second / "pkg" / "m2.py")
    assert same_file(first / "pkg" / "m3.py", second / "pkg" / "m3.py")
    # Same size, mtime put back (a file system that keeps whole seconds): run 3 has the edit.
    mtime = os.lstat(repo / "pkg" / "m3.py").st_mtime_ns
    (repo / "pkg" / "m3.py").write_text(OLD.replace("old", "new"))
    os.utime(repo / "pkg" / "m3.py", ns=(mtime, mtime))
    # Size changed, mtime put back.
    mtime = os.lstat(repo / "pkg" / "m4.py").st_mtime_ns
    (repo / "pkg" / "m4.py").write_text("X = 'a longer edit'\n")
    os.utime(repo / "pkg" / "m4.py", ns=(mtime, mtime))
    third = take(repo, runs, "r3")
    assert (third / "pkg" / "m3.py").read_text() == "X = 'new'\n" and (second / "pkg" / "m3.py").read_text() == OLD
    assert (third / "pkg" / "m4.py").read_text() == "X = 'a longer edit'\n"
    assert (second / "pkg" / "m4.py").read_text() == OLD


def test_a_previous_copy_written_to_or_on_another_file_system_is_copied_afresh(repo: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    first = take(repo, runs, "r1")
    # Written in place anyway (root ignores the read-only mode): the next run must not share it.
    victim = first / "pkg" / "m5.py"
    os.chmod(victim, stat.S_IRUSR | stat.S_IWUSR)
    with open(victim, "a") as f:
        f.write("CORRUPTED = True\n")
    second = take(repo, runs, "r2")
    assert (second / "pkg" / "m5.py").read_text() == OLD and not same_file(victim, second / "pkg" / "m5.py")
    assert same_file(first / "pkg" / "m1.py", second / "pkg" / "m1.py")
    # The newest snapshot on another file system (no hard links from there): everything copied.
    elsewhere = Path(shutil.copytree(runs / "r2", Path("/dev/shm") / f"links-{os.getpid()}" / "r2"))
    try:
        (runs / "r9").symlink_to(elsewhere)
        third = take(repo, runs, "r3")
        assert note(third)["linked"] == 0 and (third / "pkg" / "m5.py").read_text() == OLD
    finally:
        shutil.rmtree(elsewhere.parent)
