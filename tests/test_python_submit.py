"""The Python submit API (launcher.client), called as a notebook would: the documented example run as
written from a folder outside the project (docs/your-code.md), a round trip on the local executor and
on the dev cluster, reattaching, nothing left in the temp folder, and bad input or a submitter that
says nothing raising a message before anything is queued.

The child submitter finds this checkout by itself (launcher.client passes on the folder it was
imported from): no test sets PYTHONPATH for it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from launcher.client import SubmitError, attach, submit
from tests.helpers import ROOT

DOC = (ROOT / "docs" / "your-code.md").read_text()


def doc_example() -> tuple[str, str]:
    """The module and the notebook of docs/your-code.md's "From Python" section, as written."""
    section = DOC[DOC.index("### From Python"):]
    blocks = re.findall(r"^```python\n(.*?)^```", section, flags=re.S | re.M)
    (module,) = [b for b in blocks if b.startswith("# mymodel.py\n")]
    (notebook,) = [b for b in blocks if b.startswith("# the notebook, in the same folder\n")]
    assert "entrypoint=\"mymodel:train\"" in notebook
    return module, notebook


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """TMPDIR pointed at a folder of this test's own, so that what is left there can be listed."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    assert tempfile.gettempdir() == str(folder)
    return folder


def left_in(folder: Path) -> list[str]:
    # torch's own compile cache (torchinductor_USER) is made by the ranks' torch, not by the client.
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("torchinductor_"))


def test_the_documented_example_runs_as_written_outside_the_project(tmp_path: Path, private_tmp: Path) -> None:
    module, notebook = doc_example()
    folder = tmp_path / "notebooks"
    folder.mkdir()
    (folder / "mymodel.py").write_text(module)
    # python3 started in the module's folder, as a notebook kernel is; the project is importable as
    # if installed (PYTHONPATH names the checkout only, not the module's folder).
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", notebook], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=400, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    printed = done.stdout.splitlines()
    run_dir = Path(printed[0])
    assert run_dir.parent == folder / "runs"
    slope, world = printed[1].split()
    assert abs(float(slope) - 3.0) < 0.05 and world == "2"
    assert printed[2] == "['completed']"
    assert "attempt started" in done.stdout and "rank 1/2" in done.stdout  # rank 1's log
    assert printed[-1] == slope  # attach(name) reads the same result back
    assert left_in(private_tmp) == []

    # Reattached here by folder, and by name from the notebook's folder: the same handle.
    for again in (attach(run_dir), attach(run_dir.name, cwd=folder)):
        assert again.run_dir == run_dir
        assert again.result(timeout=60)["slope"] == float(slope)
        assert [s["state"] for s in again.status()] == ["completed"]
        assert "rank 1/2" in again.logs(rank=1)
    with pytest.raises(SubmitError, match="run 'no-such-run': not a run folder"):
        attach("no-such-run", cwd=folder)


def test_bad_config_raises_submit_error_and_queues_nothing(tmp_path: Path, private_tmp: Path) -> None:
    with pytest.raises(SubmitError, match="unknown key 'config.lrr'"):  # from submit() itself: nothing was queued
        submit(entrypoint="tests.userpkg.tiny:train", config={"lrr": 0.1}, cwd=tmp_path)
    assert not (tmp_path / "runs").exists()
    assert left_in(private_tmp) == []


@pytest.mark.parametrize("call,message", [
    (lambda cwd: submit(job="digits", sets="job.epochs=1", cwd=cwd), "sets='job.epochs=1': expected a list of"),
    (lambda cwd: submit(job="digits", sets=[3], cwd=cwd), r"sets=\[3\]: expected a list of 'KEY=VALUE' strings"),
    (lambda cwd: submit(profile=5, job="digits", cwd=cwd), "profile=5: expected a profile name or file"),
    (lambda cwd: submit(entrypoint=5, cwd=cwd), "entrypoint=5: expected a function or 'package.module:function'"),
    (lambda cwd: submit(entrypoint="m:f", config=[1], cwd=cwd), r"config=\[1\]: expected a mapping"),
    (lambda cwd: attach(5, cwd=cwd), "run=5: expected a run folder or its name"),
], ids=["sets as one string", "sets of numbers", "profile number", "entrypoint number", "config list", "attach number"])
def test_the_python_api_names_a_wrongly_typed_argument(tmp_path: Path, call: object, message: str) -> None:
    """Found by the hostile-input sweep: a string for sets= was read one character at a time (`--set j`),
    other types failed deep in subprocess or pathlib. Refused before any process starts."""
    with pytest.raises(TypeError, match=message):
        call(tmp_path)  # type: ignore[operator]
    assert not (tmp_path / "runs").exists()


def test_a_submitter_that_says_nothing_still_gives_a_message(tmp_path: Path) -> None:
    # A module that ends the process at import: the check before queueing imports it, and the
    # submitter dies without a word.
    (tmp_path / "quits.py").write_text("import os\nos._exit(3)\ndef main(ctx):\n    pass\n")
    with pytest.raises(SubmitError, match=r"the submitter exited with status 3: \(nothing on standard error\)"):
        submit(entrypoint="quits:main", cwd=tmp_path)


@pytest.mark.slurm
def test_round_trip_on_the_dev_cluster_from_a_notebook_folder(slurm_cluster: Path, tmp_path: Path) -> None:
    """The documented module in a folder outside the project, submitted from there to 2 dev-cluster nodes."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    (folder / "mymodel.py").write_text(doc_example()[0])
    run = submit(entrypoint="mymodel:train", profile="dev-cluster", config={"steps": 20},
                 sets=[f"profile.runs_dir={tmp_path / 'runs'}"], cwd=folder)
    assert run.run_dir.parent == tmp_path / "runs"  # known while the job is queued or running
    result = run.result(timeout=300)
    assert result["world_size"] == 2 and abs(result["slope"] - 3.0) < 0.2
    assert [s["state"] for s in run.status()] == ["completed"]
    assert "attempt started" in run.logs(rank=1)
    again = attach(run.run_dir.name, profile="dev-cluster", runs_dir=tmp_path / "runs")
    assert again.result(timeout=60)["slope"] == result["slope"]
