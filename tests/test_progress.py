"""On a terminal, a local run shows rank 0's tqdm bar in place and its log lines live, as a person
sees them (a pseudo-terminal drawn by a terminal emulator); in batch use, plain lines."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from tests.helpers import ROOT, SUBMIT

COLUMNS, ROWS = 160, 48


def run_on_a_terminal(args: list[str], cwd: Path) -> tuple[list[str], int, str]:
    """`submit.py ARGS` on a pseudo-terminal of 160 x 48, drawn by a terminal emulator (pyte) as a
    person would see it. Returns every line that was on the screen at the end or scrolled off it,
    the most bar lines ever visible at once, and the raw output."""
    import pyte  # test dependency (pyproject's test extra)

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    proc = subprocess.Popen([sys.executable, SUBMIT, *args], cwd=cwd, stdin=slave, stdout=slave, stderr=slave,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm"})
    os.close(slave)
    screen = pyte.HistoryScreen(COLUMNS, ROWS, history=100_000)
    stream = pyte.ByteStream(screen)
    chunks: list[bytes] = []
    most_bars = 0
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
            stream.feed(data)
            most_bars = max(most_bars, sum("step/s" in line for line in screen.display))
        elif proc.poll() is not None:
            break
    proc.wait(timeout=60)
    os.close(master)
    scrolled = ["".join(row[c].data for c in range(COLUMNS)) for row in screen.history.top]
    lines = [line.rstrip() for line in scrolled + list(screen.display) if line.strip()]
    raw = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0, raw
    return lines, most_bars, raw


def test_local_run_on_a_terminal_shows_one_bar_in_place_and_one_line_per_epoch(tmp_path: Path) -> None:
    lines, most_bars, raw = run_on_a_terminal(["--set", "job.epochs=3"], tmp_path)
    screen = "\n".join(lines)
    assert "epoch 1:" in raw and "step/s" in raw  # rank 0's tqdm bar was drawn...
    assert most_bars == 1  # ...on one line, redrawn in place
    assert not [line for line in lines if "step/s" in line]  # and gone once the run ended
    epochs = [line for line in lines if line.startswith("[trainer] epoch ")]
    assert [line.split(",")[0] for line in epochs] == ["[trainer] epoch 1", "[trainer] epoch 2", "[trainer] epoch 3"]
    assert all(len(line) <= COLUMNS for line in epochs)  # one screen line each, not wrapped
    assert "test_accuracy" in epochs[-1]
    assert sum("attempt started" in line for line in lines) == 1, screen  # the banner once
    assert "submitit INFO" not in screen  # submitit's internals only with --verbose
    assert lines[-1].startswith("test_accuracy ")  # the result is the last thing on the screen


def test_verbose_shows_submitits_lines(tmp_path: Path) -> None:
    lines, _, _ = run_on_a_terminal(["--set", "job.epochs=1", "--verbose"], tmp_path)
    assert any(line.startswith("submitit INFO") and "Loading pickle" in line for line in lines)


def test_batch_logs_get_plain_lines_every_n_steps(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, SUBMIT, "--set", "job.epochs=1", "--set", "job.log_every_steps=5"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    assert "step/s" not in proc.stdout + proc.stderr  # no bar, and nothing relayed, when not on a terminal
    log = next(tmp_path.glob("runs/*/logs/*/*_0_log.out")).read_text()
    lines = [line for line in log.splitlines() if line.startswith("[trainer] epoch 1 step")]
    assert len(lines) == 22 // 5  # 22 steps per epoch on 2 ranks: a line at steps 5, 10, 15, 20
    assert "step/s" not in next(tmp_path.glob("runs/*/logs/*/*_0_log.err")).read_text()
