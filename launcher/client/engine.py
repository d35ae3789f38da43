"""Running the engine for the API: the command line itself (`python -m launcher`, what `submit.py` and
`ddp-submit` run), and what it tells back as data.

A child process with this interpreter, in `cwd`, given: a generated job on standard input (`--job -`:
nothing is written to the temp folder), a pipe for its events (`--events FD`: JSON lines, launcher.
request.channel: run_dir, queued, refused, result), and for a function pickled by value a pipe it reads
the pickle from (`--function /dev/fd/N`). So the very same engine resolves, checks, makes the run folder
and queues, with nothing re-implemented, and this process imports neither torch nor submitit.

A `debug` profile's engine runs in this process instead (the command line's `main`, called): the point
of that profile is that `breakpoint()` in your function stops where you are, in the notebook or in the
script's terminal. It then runs the whole run before returning, as `submit.py --profile debug` does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from trainer.config.lookup import CODE_ROOT

# The folder this package was imported from: the child runs the same code as this process, even from
# a checkout that is neither installed nor on PYTHONPATH (a notebook that put it on sys.path).
HOME = CODE_ROOT


def command() -> list[str]:
    """The command line as this process starts it: this interpreter, `-m launcher`."""
    return [sys.executable, "-m", "launcher"]


def environment() -> dict[str, str]:
    """This process's environment, with this checkout first on PYTHONPATH (unless it is installed)."""
    env = dict(os.environ)
    if HOME.name not in ("site-packages", "dist-packages"):  # installed: already importable
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(HOME), env.get("PYTHONPATH", "")) if p)
    return env


class Engine:
    """One run of the command line: its events as they come, its output, and how it ended."""

    def __init__(self, args: list[str], cwd: Path, job: str | None = None, function: bytes | None = None,
                 here: bool = False) -> None:
        self.cwd, self.events, self.out, self.err = cwd, [], [], []  # type: ignore[var-annotated]
        self.code: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        read_events, self._events_fd = os.pipe()
        fds = [self._events_fd]
        args = [*args, "--events", str(self._events_fd)]
        pipe = None
        if function is not None:
            pipe = os.pipe()
            fds.append(pipe[0])
            args += ["--function", f"/dev/fd/{pipe[0]}"]
        self._threads = [_thread(_read_events, os.fdopen(read_events, "rb"), self.events)]
        if pipe is not None:
            self._threads.append(_thread(_write, os.fdopen(pipe[1], "wb"), function))
        if here:
            self._run_here(args, job)  # (the whole run: debug)
            if pipe is not None:
                os.close(pipe[0])  # a writer still blocked on it (the engine refused first) gets its error
        else:
            self._proc = subprocess.Popen([*command(), *args], cwd=cwd, env=environment(), pass_fds=fds,
                                          stdin=subprocess.PIPE if job is not None else subprocess.DEVNULL,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            self._threads += [_thread(_drain, self._proc.stdout, self.out),
                              _thread(_drain, self._proc.stderr, self.err)]
            if job is not None:
                self._threads.append(_thread(_write, self._proc.stdin, job.encode()))
            for fd in fds:  # the child's ends: the events pipe then ends when the child is done with it
                os.close(fd)

    def _run_here(self, args: list[str], job: str | None) -> None:
        """The command line's `main(ARGS)` in this process (the debug executor: pdb in your function works).
        Nothing of this process is swapped for it: `sys.argv` and `sys.stdin` stay yours (pdb and input() read
        your terminal; the job is handed to `main` as bytes), and the working directory is already `cwd`
        (launcher.client.verbs runs a debug profile here only then)."""
        from launcher.commands.main import main

        saved_mask = os.umask(0o077)
        os.umask(saved_mask)
        pipe_ino = os.fstat(self._events_fd).st_ino
        try:
            self.code = main(args, job=None if job is None else job.encode())
        except SystemExit as done:  # (argparse's own exit, on arguments it refuses)
            self.code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        finally:
            os.umask(saved_mask)  # the engine makes its files private (077); this process keeps its own
            # The engine closes it at its end, unless it ended before opening it: then it is closed here.
            _close_if(self._events_fd, pipe_ino)

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def wait(self, timeout: float | None = None) -> int:
        """Until the engine has ended (and everything it said is read); its exit status."""
        if self._proc is not None:
            self._proc.wait(timeout=timeout)
            self.code = self._proc.returncode
        for thread in self._threads:
            thread.join(timeout=30)
        return int(self.code if self.code is not None else 1)

    def wait_for(self, *names: str, timeout: float | None = None) -> dict[str, Any] | None:
        """The first event named one of `names`; None if the engine ended without one."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            found = next((e for e in list(self.events) if e.get("event") in names), None)
            if found is not None:
                return found
            if not self.running():
                self.wait()
                return next((e for e in list(self.events) if e.get("event") in names), None)
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"the submitter said nothing of {', '.join(names)} within {timeout} s")
            time.sleep(0.02)

    def said(self) -> str:
        """Why it refused: its `refused` event's error line, else its exit status and last lines of stderr."""
        refused = next((e for e in self.events if e.get("event") in ("refused", "failed")), None)
        if refused is not None:
            return f"error: {refused.get('error')}"
        errors = [line for line in self.err if line.startswith("error:")]  # argparse's, before any event
        return errors[0] if errors else f"the submitter exited with status {self.code}: {tail(self.err)}"

    def details(self) -> str:
        refused = next((e for e in self.events if e.get("event") == "refused"), None)
        return str((refused or {}).get("details") or "")


def tail(lines: list[str], count: int = 5) -> str:
    return " | ".join(line for line in lines[-count:] if line.strip()) or "(nothing on standard error)"


def _thread(target: Any, *args: Any) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def _read_events(stream: IO[bytes], events: list[dict[str, Any]]) -> None:
    with stream:
        for line in stream:
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                events.append(value)


def _write(stream: IO[bytes], data: bytes) -> None:
    try:
        with stream:
            stream.write(data)
    except (BrokenPipeError, OSError):  # it ended before reading it all (a bad --set): its error says why
        pass


def _drain(stream: IO[bytes], lines: list[str]) -> None:
    with stream:
        for line in stream:
            lines.append(line.decode(errors="replace").rstrip("\n"))


def _close_if(fd: int, inode: int | None) -> None:
    """Close `fd` if it is still the pipe it was (`inode`): the number may name another file by now."""
    try:
        if inode is not None and os.fstat(fd).st_ino == inode:
            os.close(fd)
    except OSError:
        pass
