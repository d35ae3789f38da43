"""On a terminal, a local run shows rank 0's tqdm bar and log lines live; in batch use, plain lines."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import ROOT, SUBMIT


def test_local_run_on_a_terminal_shows_a_progress_bar(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, SUBMIT, "--set", "job.epochs=2"], cwd=tmp_path, stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=slave, env={**os.environ, "PYTHONPATH": str(ROOT)})
    os.close(slave)
    chunks: list[bytes] = []
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
        elif proc.poll() is not None:
            break
    proc.wait(timeout=60)
    os.close(master)
    screen = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0, screen
    assert "epoch 1:" in screen and "step/s" in screen  # tqdm's bar for rank 0
    assert "[trainer] epoch 2" in screen  # the per-epoch metrics line, relayed live


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
