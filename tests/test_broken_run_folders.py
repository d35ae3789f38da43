"""Run folders whose records are broken: `run.json`, `tasks.json` or a task's `result.json`
truncated, not JSON, empty or of the wrong shape.

Every operating command (`status`, `logs`, `cancel`, `list`, `--resume`) answers without a
traceback: a record it needs and cannot read is one `error:` line naming the file (exit 2, the
folder unchanged, nothing queued); `list` still lists the healthy runs and names the broken one;
a broken `result.json` is named in `status` while the state comes from the scheduler and pickles.
The run is real: a local two-task sweep (one task fails, so `--resume` has work to do).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import run_submit, submit_job, the_run

SWEEP = "extends: digits\nepochs: 1\nsweep:\n  tasks:\n    - {lr: 0.05}\n    - {lr: 0.06, fail_at: '2:0'}\n"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished local sweep: task 0 completed, task 1 failed."""
    where = tmp_path_factory.mktemp("pristine")
    proc = submit_job(where, SWEEP)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # task 1 failed on purpose
    run_dir = the_run(where / "runs")
    assert (run_dir / "task-0000" / "result.json").is_file() and (run_dir / "tasks.json").is_file()
    return run_dir


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


def _wrong_types(path: Path) -> None:
    data = json.loads(path.read_text())
    path.write_text(json.dumps({key: (7 if isinstance(value, str) else "x") for key, value in data.items()}))


CORRUPTIONS: dict[str, Callable[[Path], None]] = {
    "truncated": _truncate,
    "not JSON": lambda p: p.write_bytes(b"\x00\xffnot json at all"),
    "empty": lambda p: p.write_bytes(b""),
    "a list": lambda p: p.write_text("[1, 2, 3]"),
    "wrong types": _wrong_types,
}
RECORDS = {"run.json": "run.json", "tasks.json": "tasks.json", "result.json": "task-0000/result.json"}


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}


def one_error_naming(proc, name: str) -> str:  # type: ignore[no-untyped-def]
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert name in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
@pytest.mark.parametrize("record", list(RECORDS))
def test_every_command_on_a_broken_record(pristine: Path, tmp_path: Path, record: str, corruption: str) -> None:
    runs = tmp_path / "runs"
    broken, healthy = runs / "broken-run", runs / "healthy-run"
    shutil.copytree(pristine, broken)
    shutil.copytree(pristine, healthy)
    CORRUPTIONS[corruption](broken / RECORDS[record])
    needs = {"status": record == "run.json", "logs": record == "run.json", "cancel": record == "run.json",
             "--resume": record in ("run.json", "tasks.json")}
    for command, needs_it in needs.items():
        args = [command, str(broken)]
        if command == "--resume" and not needs_it:
            args.append("--dry-run")  # a valid resume would rerun task 1 here
        before = snapshot(broken)
        proc = run_submit(args, cwd=tmp_path, timeout=120)
        if needs_it:
            one_error_naming(proc, str(broken / RECORDS[record]))
            assert snapshot(broken) == before, f"{command} changed the broken run folder"
            assert not (broken / "logs").exists() or len(list((broken / "logs").iterdir())) == 2, "something ran"
        else:
            assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
            assert proc.returncode in (0, 1), proc.stdout + proc.stderr  # 1: `status` of a failed task
        if command == "status" and record == "result.json":
            assert "unreadable record" in proc.stdout and RECORDS[record] in proc.stdout, proc.stdout
    proc = run_submit(["list", "--runs-dir", str(runs)], cwd=tmp_path, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    rows = {line.split()[0]: line for line in proc.stdout.splitlines()[1:]}
    assert set(rows) == {"broken-run", "healthy-run"}, proc.stdout
    assert "unreadable" not in rows["healthy-run"]
    if record == "run.json":
        assert "unreadable" in rows["broken-run"] and "run.json" in rows["broken-run"], rows["broken-run"]


@pytest.mark.parametrize("entry", [{"task": "0", "job": {}}, {"task": 1, "job": {"lr": "fast"}},
                                   {"task": 1, "job": {"epochs": 1, "lr": 0.1, "unknown_key": 1}}])
def test_resume_names_a_tasks_json_entry_of_the_wrong_shape(pristine: Path, tmp_path: Path,
                                                             entry: dict[str, object]) -> None:
    run_dir = tmp_path / "runs" / "run"
    shutil.copytree(pristine, run_dir)
    (run_dir / "tasks.json").write_text(json.dumps({"tasks": [entry]}))
    proc = run_submit(["--resume", str(run_dir)], cwd=tmp_path, timeout=120)
    one_error_naming(proc, "tasks.json")
