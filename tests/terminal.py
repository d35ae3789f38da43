"""`submit.py watch` in a real terminal: a detached tmux session, read back with `capture-pane`.

tmux is a terminal a person uses: it interprets every escape sequence the view writes, and keeps what
scrolls off the top in its history, so `history_size == 0` after a whole run says the view redrew in
place instead of printing frame after frame. tests/test_watch.py uses pyte on a pseudo-terminal for the
synthetic local folders (no tmux server needed there); the dev-cluster sweep is followed here (issue 21).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import ROOT, SUBMIT

COLUMNS, ROWS = 200, 40
ORDER = ("pending", "running", "done")  # the states a task of a healthy sweep goes through, in this order


@dataclass
class TmuxWatch:
    """One `submit.py watch RUN` in its own tmux server (-S: a private socket in `folder`, -f /dev/null:
    no user config). The pane's command writes watch's exit status to `rc_file`, then sleeps so that the last
    screen stays to be read."""

    run_dir: Path
    folder: Path
    name: str
    interval: float = 0.5
    socket: str = field(init=False)
    rc_file: Path = field(init=False)

    def __post_init__(self) -> None:
        self.socket = str(self.folder / f"{self.name}.tmux")
        self.rc_file = self.folder / f"{self.name}.rc"
        watch = [sys.executable, SUBMIT, "watch", str(self.run_dir), "--interval", str(self.interval)]
        # COLUMNS/LINES (set in pytest's environment) would override the pane's size for rich.
        command = (f"env -u COLUMNS -u LINES PYTHONPATH={shlex.quote(str(ROOT))} {shlex.join(watch)}; "
                   f"echo $? > {shlex.quote(str(self.rc_file))}; sleep 600")
        self.tmux("new-session", "-d", "-s", self.name, "-c", str(self.folder), "-x", str(COLUMNS), "-y", str(ROWS),
                  command)

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.socket, "-f", "/dev/null", *args], capture_output=True, text=True,
                              check=True, timeout=30).stdout

    def screen(self) -> list[str]:
        """The visible screen, line by line."""
        return [line.rstrip() for line in self.tmux("capture-pane", "-p", "-t", self.name).splitlines()]

    def everything(self) -> list[str]:
        """The history (what scrolled off the top) and the screen."""
        return self.tmux("capture-pane", "-p", "-S", "-", "-E", "-", "-t", self.name).splitlines()

    def history_size(self) -> int:
        return int(self.tmux("display-message", "-p", "-t", self.name, "#{history_size}").strip())

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.name, *keys)

    @property
    def exit_status(self) -> int | None:
        """watch's exit status once it has exited, else None."""
        try:
            return int(self.rc_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True, timeout=30)


def task_states(screen: list[str]) -> dict[int, str]:
    """{task: state} from one screen of the view: the rows under its `task  state` header."""
    header = next((i for i, line in enumerate(screen) if line.split()[:2] == ["task", "state"]), None)
    if header is None:
        return {}
    states = {}
    for line in screen[header + 1:]:
        words = line.split()
        if len(words) < 2 or not words[0].isdigit():
            break
        states[int(words[0])] = words[1]
    return states


def follow(watch: TmuxWatch, until: float, act: Callable[[list[str]], None] = lambda screen: None,
           poll: float = 0.5) -> dict[int, list[str]]:
    """Each task's states as the screen showed them (repeats dropped), until watch exits or `until`
    (time.monotonic()) passes; `act(screen)` is called at each look."""
    seen: dict[int, list[str]] = {}
    while time.monotonic() < until:
        ended = watch.exit_status is not None
        screen = watch.screen()
        act(screen)
        for task, state in task_states(screen).items():
            if not seen.get(task) or seen[task][-1] != state:
                seen.setdefault(task, []).append(state)
        if ended:
            break
        time.sleep(poll)
    return seen
