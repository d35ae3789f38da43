"""`submit.py watch`: the live view of a run or sweep (issue 21). In-process on synthetic run folders
(the states come from launcher.rundir.states, as for `status`), and once on a pseudo-terminal drawn by
a terminal emulator: the view redraws in place, ends with the run, and `q` leaves the run running."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.status_scale import build
from launcher.commands.watch import Watcher
from tests.helpers import ROOT, SUBMIT

COLUMNS, ROWS = 160, 30


@pytest.fixture(autouse=True)
def no_scheduler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_CONF", raising=False)


def local_sweep(run_dir: Path, tasks: int) -> None:
    """A local sweep's folder (benchmarks/status_scale.build): every task completed, epochs 3."""
    build(run_dir, tasks, curves=True)
    record = json.loads((run_dir / "run.json").read_text())
    record.update(executor="local", profile={"name": "local", "executor": "local"},
                  job={**record["job"], "epochs": 3})
    (run_dir / "run.json").write_text(json.dumps(record))


def make_running(run_dir: Path, task: int) -> subprocess.Popen[bytes]:
    """Task `task` runs: its job id is a live process that looks like a local run's controller
    (launcher.cluster.local.controller_alive), its results are not there yet, one epoch of three done."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "submitit.local._local",
                                str(run_dir)])
    record = json.loads((run_dir / "run.json").read_text())
    old = record["job_ids"][task]
    record["job_ids"][task] = str(sleeper.pid)
    (run_dir / "run.json").write_text(json.dumps(record))
    for pickle in (run_dir / "logs" / old).glob("*_result.pkl"):
        pickle.unlink()
    folder = run_dir / f"task-{task:04d}"
    (folder / "metrics.jsonl").write_text("")
    (folder / "events.jsonl").write_text(json.dumps({"event": "started", "time": time.time()}) + "\n")
    log_epoch(folder, 1, 0.5)
    return sleeper


def log_epoch(folder: Path, epoch: int, accuracy: float) -> None:
    with open(folder / "metrics.jsonl", "a") as fh:
        fh.write(json.dumps({"epoch": epoch, "step": 22 * epoch, "train_loss": 1.0 / epoch, "test_accuracy": accuracy,
                             "images_per_second": 1500.0, "time": time.time()}) + "\n")


def text_of(watcher: Watcher, width: int | None = None, columns: int = COLUMNS) -> list[str]:
    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=columns, color_system=None).print(watcher.frame(width))
    lines = [line.rstrip() for line in out.getvalue().splitlines()]
    table = next(i for i, line in enumerate(lines) if line.startswith("task  state"))
    return [" ".join(lines[:table]), *lines[table:]]  # the head (wrapped on a long path), the header, the rows


@pytest.fixture
def sweep(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    run_dir = tmp_path / "runs" / "sweep"
    local_sweep(run_dir, 3)
    sleeper = make_running(run_dir, 2)
    for pickle in (run_dir / "logs" / json.loads((run_dir / "run.json").read_text())["job_ids"][1]).glob("*.pkl"):
        pickle.unlink()  # task 1: its process ended without a result
    yield run_dir, sleeper
    sleeper.kill()
    sleeper.wait()


def test_a_frame_shows_each_tasks_state_progress_and_curve_best_first(sweep: tuple[Path, subprocess.Popen]) -> None:
    run_dir, sleeper = sweep
    watcher = Watcher(run_dir)
    watcher.refresh()
    lines = text_of(watcher)
    # The head line is `status`'s own (with done for completed).
    assert lines[0].startswith(f"run {run_dir}: scale on local (local), ") and \
        "3 task(s): running — 1 done, 1 failed, 1 running; sorted by test_accuracy (max)" in lines[0], lines[0]
    rows = [line.split() for line in lines[2:]]
    assert len(rows) == 3, lines
    # Task 0 (0.9 from its result) first, then the running task 2 (0.5), then task 1 without a value.
    assert [r[0] for r in rows] == ["0", "2", "1"], lines
    assert rows[0][1] == "done" and rows[1][1] == "running" and rows[2][1] == "failed"
    assert "22/66 (epoch 1/3)" in lines[3] and "1500 img/s" in lines[3] and "lr=0.003" in lines[3]
    assert "ended without a result" in lines[4]
    assert not watcher.ended
    # The effective training time so far: task 2, submitted 20 s ago, has kept 10 s in steps by its checkpoint.
    record = json.loads((run_dir / "run.json").read_text())
    now = time.time()
    (run_dir / "run.json").write_text(json.dumps({**record, "created": now - 20}))
    with open(run_dir / "task-0002" / "events.jsonl", "a") as fh:
        fh.write(json.dumps({"event": "checkpointed", "time": now, "step": 22, "stall_s": 0.5, "productive_s": 10.0})
                 + "\n")
    watcher.refresh()
    header, *rows = text_of(watcher)[1:]
    (running,) = [r for r in rows if r.startswith("2 ")]
    shown = running[header.index("ettr"):].split()[0]  # (the column starts where its header does)
    assert "ettr" in header and shown in {"50%", "49%", "48%", "47%", "46%", "45%"}, (header, running)
    narrow = text_of(watcher, 80, 80)  # an 80-column terminal: the ettr column gives way, the progress stays whole
    assert "ettr" not in narrow[1] and any("22/66 (epoch 1/3)" in line for line in narrow), narrow
    log_epoch(run_dir / "task-0002", 2, 0.6)
    log_epoch(run_dir / "task-0002", 3, 0.95)
    watcher.refresh()
    lines = text_of(watcher)
    assert lines[2].split()[:2] == ["2", "running"] and "66/66 (epoch 3/3)" in lines[2]
    assert "▁▃█" in lines[2] and "0.9500" in lines[2]  # the curve of 0.5, 0.6, 0.95
    sleeper.kill()
    sleeper.wait()
    watcher.refresh()
    assert watcher.ended and watcher.exit_status() == 1  # as --wait: a task failed


def test_a_second_refresh_of_1000_tasks_reads_only_what_was_appended(tmp_path: Path) -> None:
    run_dir = tmp_path / "big"
    local_sweep(run_dir, 1000)
    watcher = Watcher(run_dir)
    watcher.refresh()
    first = watcher.bytes_read
    on_disk = sum((run_dir / f"task-{t:04d}" / name).stat().st_size for t in range(1000)
                  for name in ("metrics.jsonl", "events.jsonl"))
    assert first == on_disk
    before = sum((run_dir / f"task-{t:04d}" / "metrics.jsonl").stat().st_size for t in range(10))
    for task in range(10):
        log_epoch(run_dir / f"task-{task:04d}", 2, 0.99)
    appended = sum((run_dir / f"task-{t:04d}" / "metrics.jsonl").stat().st_size for t in range(10)) - before
    watcher.refresh()
    assert watcher.bytes_read - first == appended
    assert text_of(watcher)[2].split()[0] in {str(t) for t in range(10)}  # 0.99 now leads the sweep


def watch_on_a_terminal(run_dir: Path, act: object, cwd: Path) -> tuple[list[str], list[str], int]:
    """`submit.py watch RUN` on a 160 x 30 pseudo-terminal drawn by pyte; `act(seconds, master)` is
    called while it runs. Returns the lines scrolled off the screen, the screen's lines, the exit status."""
    import pyte

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    proc = subprocess.Popen([sys.executable, SUBMIT, "watch", str(run_dir), "--interval", "0.3"], cwd=cwd,
                            stdin=slave, stdout=slave, stderr=slave,
                            # (COLUMNS/LINES, where pytest's environment has them, would override the pty's size)
                            env={**{k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
                                 "PYTHONPATH": str(ROOT), "TERM": "xterm"})
    os.close(slave)
    screen = pyte.HistoryScreen(COLUMNS, ROWS, history=10_000)
    stream = pyte.ByteStream(screen)
    started = time.monotonic()
    while time.monotonic() - started < 60:
        act(time.monotonic() - started, master)  # type: ignore[operator]
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            stream.feed(data)
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(master)
    scrolled = ["".join(row[c].data for c in range(COLUMNS)).rstrip() for row in screen.history.top]
    return [line for line in scrolled if line], [line.rstrip() for line in screen.display], proc.returncode


def test_on_a_terminal_the_view_redraws_in_place_and_ends_with_the_run(
        sweep: tuple[Path, subprocess.Popen], tmp_path: Path) -> None:
    run_dir, sleeper = sweep
    task = run_dir / "task-0002"
    steps = {2.0: lambda: log_epoch(task, 2, 0.6), 3.5: lambda: log_epoch(task, 3, 0.7), 5.0: sleeper.kill}

    def act(now: float, master: int) -> None:
        for at in sorted(steps):
            if now >= at:
                steps.pop(at)()

    scrolled, display, code = watch_on_a_terminal(run_dir, act, tmp_path)
    assert code == 1  # as --wait: task 1 failed
    assert scrolled == []  # every refresh redrew the same lines: no copies scrolled off
    heads = [line for line in display if "task(s):" in line]
    assert len(heads) == 1 and "1 done, 2 failed" in heads[0], display  # the sleeper left no result: failed
    assert any("66/66 (epoch 3/3)" in line for line in display), display


def test_q_leaves_the_run_running(sweep: tuple[Path, subprocess.Popen], tmp_path: Path) -> None:
    run_dir, sleeper = sweep
    sent = []

    def act(now: float, master: int) -> None:
        if now >= 2.0 and not sent:
            os.write(master, b"q")
            sent.append(now)

    _, display, code = watch_on_a_terminal(run_dir, act, tmp_path)
    assert code == 0 and sleeper.poll() is None
    assert any("the run goes on" in line for line in display), display


def test_once_prints_one_frame_and_exits_as_the_run_stands(sweep: tuple[Path, subprocess.Popen],
                                                           capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.commands.main import main

    run_dir, sleeper = sweep
    monkeypatch.setenv("COLUMNS", str(COLUMNS))
    assert main(["watch", str(run_dir), "--once"]) == 0  # still running: nothing to report yet
    out = capsys.readouterr().out
    assert out.count("task(s):") == 1 and "running" in out and "\x1b[" not in out  # a pipe gets no escapes
    sleeper.kill()
    sleeper.wait()
    assert main(["watch", str(run_dir), "--once"]) == 1  # ended with failed tasks, as --wait says


def test_a_pending_task_says_why_it_waits_and_when_it_should_start() -> None:
    from launcher.commands.watch import _state_text
    from launcher.rundir.states import TaskState

    at = time.mktime((2026, 12, 1, 15, 20, 0, 0, 0, -1))
    assert _state_text(TaskState(0, "7_0", "pending", reason="Resources", expected_start=at), "pending") == \
        "pending (Resources, expected to start 15:20)"
    assert _state_text(TaskState(0, "7_0", "pending", expected_start=at), "pending") == \
        "pending (queued, expected to start 15:20)"  # as `status` says it (operate.waiting_text)
    assert _state_text(TaskState(0, "7_0", "pending"), "pending") == "pending"
    assert _state_text(TaskState(0, "7_0", "running", reason="stale"), "running") == "running"


def test_the_attempt_column_is_the_attempt_that_status_and_the_trainer_count(tmp_path: Path,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A task's second attempt (it stopped and requeued, started again and resumed from its checkpoint)
    is attempt 2 in `watch`, in `status --json` and for the trainer (trainer.rank.events, which the
    trackers are told): `watch` counted the "resumed" event as an attempt too, and showed 3."""
    from tests.test_cli_in_process import call
    from trainer.rank import events

    run_dir = tmp_path / "runs" / "sweep"
    local_sweep(run_dir, 2)
    folder, now = run_dir / "task-0000", time.time()
    log = [{"event": "started", "time": now - 60, "job_id": "9000000_0"},
           {"event": "stopped", "time": now - 50, "step": 22, "requeued": True, "reason": "timeout", "signal": "USR2"},
           {"event": "started", "time": now - 40, "job_id": "9000000_0"},
           {"event": "resumed", "time": now - 39, "step": 22},
           {"event": "finished", "time": now - 1}]
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in log))
    watcher = Watcher(run_dir)
    watcher.refresh()
    rows = {row[0]: row for row in (line.split() for line in text_of(watcher)[2:])}
    assert rows["0"][2] == "2" and rows["1"][2] == "1", rows
    code, out, err = call(["status", str(run_dir), "--json", "--no-collect"], capsys)
    assert code == 0, err
    assert [json.loads(line)["attempts"] for line in out.splitlines()] == [2, 1]
    assert events.attempt_number(folder) == 2 and events.attempt_number(run_dir / "task-0001") == 1
