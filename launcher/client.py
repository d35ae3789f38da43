"""Submitting from Python (a notebook, a script): one call, and a handle on the run.

    from launcher.client import attach, submit

    run = submit(profile="dev-cluster", entrypoint="mymodel:train", config={"lr": 0.1},
                 sets=["profile.nodes=2"])
    run.run_dir          # the run folder (as soon as the submitter has made it)
    run.status()         # one dict per task: state, restarts, job id, error
    run.result()         # waits; the final metrics (as `--json` prints them), RunFailed if it failed
    run.logs(rank=1)     # that rank's log text
    run.cancel()
    attach(run.run_dir)  # the same handle later, from a run folder or a run name

It runs the command line itself (`python -m launcher ... --json`, what `submit.py` and `ddp-submit`
run) in a child process with this interpreter: the very same engine (resolve, checks, preflight, run
folder, sbatch or the local executor) with nothing re-implemented, and the notebook's own process
never imports torch or submitit for it. The child runs in `cwd` (default: this process's current
directory), so a module next to the notebook is found as the command line finds it. A generated
job goes to the child on its standard input (`--job -`): nothing is written to the temp folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

# The folder this package was imported from: the child runs the same code as this process, even from
# a checkout that is neither installed nor on PYTHONPATH (a notebook that put it on sys.path).
_HOME = Path(__file__).resolve().parent.parent
ENDED = ("completed", "failed", "cancelled", "timeout")


class SubmitError(RuntimeError):
    """The submitter refused the request (bad input, nothing queued) or could not run; the message is
    its `error:` line, or its exit status and last lines when it printed none."""


class RunFailed(RuntimeError):
    """The run ran and failed (exit 1); `details` is its --json payload (failed rank, error)."""

    def __init__(self, message: str, details: dict[str, Any]) -> None:
        super().__init__(message)
        self.details = details


def command() -> list[str]:
    """The command line as this process would start it: this interpreter, `-m launcher`."""
    return [sys.executable, "-m", "launcher"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    if _HOME.name not in ("site-packages", "dist-packages"):  # installed: already importable
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_HOME), env.get("PYTHONPATH", "")) if p)
    return env


def submit(profile: str = "local", job: str | None = None, *, entrypoint: str | None = None,
           config: dict[str, Any] | None = None, sets: list[str] | None = None, name: str | None = None,
           cwd: str | Path | None = None) -> Run:
    """Submit `job` (a name or path), or `entrypoint` with `config`, to `profile`; return at once.

    `sets` are `--set` overrides (["job.epochs=3", "profile.nodes=2"]); `cwd` is where the submitter
    runs: runs_dir, names, relative paths and the entrypoint's module are found from there (default:
    this process's current directory)."""
    if (job is None) == (entrypoint is None):
        raise ValueError("give either job= (a job name or file) or entrypoint= (with config=)")
    _expect("profile", profile, (str, os.PathLike), "a profile name or file")
    _expect("job", job, (str, os.PathLike, type(None)), "a job name or file")
    _expect("entrypoint", entrypoint, (str, type(None)), "'package.module:function'")
    _expect("config", config, (dict, type(None)), "a mapping")
    _expect("name", name, (str, type(None)), "a job name")
    _expect("cwd", cwd, (str, os.PathLike, type(None)), "a folder")
    # A string is a sequence too: sets="job.epochs=3" would be read one character at a time.
    if sets is not None and (isinstance(sets, str) or not all(isinstance(item, str) for item in sets)):
        raise TypeError(f"sets={sets!r}: expected a list of 'KEY=VALUE' strings, e.g. ['job.epochs=3']")
    workdir = Path(cwd or os.getcwd()).resolve()
    generated = None
    if entrypoint is not None:
        # The mapping a job file would hold; JSON is YAML, so the submitter reads it as written.
        generated = json.dumps({"name": name or entrypoint.rpartition(":")[2], "entrypoint": entrypoint,
                                "config": config or {}})
        job = "-"
    argv = [*command(), "--profile", profile, "--job", str(job), "--json"]
    for item in sets or []:
        argv += ["--set", item]
    proc = subprocess.Popen(argv, cwd=workdir, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.PIPE if generated else subprocess.DEVNULL, text=True)
    if generated:
        try:
            proc.stdin.write(generated)  # type: ignore[union-attr]
            proc.stdin.close()  # type: ignore[union-attr]
        except BrokenPipeError:  # it ended before reading (e.g. a bad --set): its error line says why
            pass
    return Run(workdir, profile, proc=proc)


def attach(run: str | Path, profile: str = "local", runs_dir: str | Path | None = None,
           cwd: str | Path | None = None) -> Run:
    """A handle on an existing run: its folder, or its name in the runs_dir of `profile` (or `runs_dir`),
    as `submit.py status RUN` finds it. SubmitError (the command line's message) if there is none."""
    _expect("run", run, (str, os.PathLike), "a run folder or its name")
    _expect("profile", profile, (str, os.PathLike), "a profile name or file")
    _expect("runs_dir", runs_dir, (str, os.PathLike, type(None)), "a folder")
    _expect("cwd", cwd, (str, os.PathLike, type(None)), "a folder")
    workdir = Path(cwd or os.getcwd()).resolve()
    handle = Run(workdir, profile, runs_dir=runs_dir)
    folder = workdir / run
    if (folder / "run.json").is_file() or (folder / "remote.json").is_file():  # (remote.json: submitted over SSH)
        handle._run_dir = folder.resolve()
        return handle
    done = handle._cli("list", "-n", "1000000", "--json", *handle._where())
    if done.returncode == 0:
        for line in done.stdout.splitlines():
            row = json.loads(line) if line.startswith("{") else {}
            if str(run) in (row.get("run"), row.get("run_dir")):
                handle._run_dir = Path(row["run_dir"])
                return handle
    # Not found: the command line says so in its own words (and where it looked).
    raise SubmitError(_said(handle._cli("status", str(run), "--json", "--no-collect", *handle._where()))
                      if done.returncode == 0 else _said(done))


def _expect(name: str, value: Any, types: tuple[type, ...], what: str) -> None:
    """The API's arguments checked where they enter: a TypeError naming the parameter, not one from
    deep inside subprocess or pathlib."""
    if not isinstance(value, types):
        raise TypeError(f"{name}={value!r}: expected {what} ({' or '.join(t.__name__ for t in types)})")


class Run:
    """A submitted (or attached) run. Every method asks the same command line a user would
    (`submit.py status RUN`, `logs`, `cancel`)."""

    def __init__(self, cwd: Path, profile: str, proc: subprocess.Popen[str] | None = None,
                 runs_dir: str | Path | None = None) -> None:
        self._cwd, self._profile, self._proc, self._runs_dir = cwd, profile, proc, runs_dir
        self._run_dir: Path | None = None
        self._out: list[str] = []
        self._err: list[str] = []
        # Pipes, read as the child writes: a full pipe would stall it, and no file is needed for them.
        self._readers = [] if proc is None else [
            threading.Thread(target=_drain, args=(stream, lines), daemon=True)
            for stream, lines in ((proc.stdout, self._out), (proc.stderr, self._err))]
        for reader in self._readers:
            reader.start()

    def _where(self) -> list[str]:
        return ["--profile", self._profile, *(["--runs-dir", str(self._runs_dir)] if self._runs_dir else [])]

    def _submitter_done(self, timeout: float | None = None) -> int:
        """Wait for the submitting process; SubmitError if it refused the request or printed no result."""
        if self._proc is None:
            return 0
        self._proc.wait(timeout=timeout)
        for reader in self._readers:
            reader.join()
        code = self._proc.returncode
        if code == 2 or not any(line.startswith("{") for line in self._out):
            raise SubmitError(_said(code, "\n".join(self._err)))
        return code

    @property
    def run_dir(self) -> Path:
        """The run folder; waits (at most a minute) until the submitter has created it."""
        deadline = time.monotonic() + 60
        while self._run_dir is None:
            found = next(filter(None, map(_run_folder, list(self._out))), None)
            if found:
                self._run_dir = (self._cwd / found).resolve()
            elif self._proc is None or self._proc.poll() is not None:
                self._submitter_done()
                raise SubmitError(f"the submitter ended without a run folder: {_tail(self._err)}")
            elif time.monotonic() > deadline:
                raise TimeoutError("no run folder after 60 s")
            else:
                time.sleep(0.1)
        return self._run_dir

    def _cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*command(), *args], cwd=self._cwd, env=_env(), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, check=False)

    def status(self) -> list[dict[str, Any]]:
        """Each task's state (pending/running/completed/failed/requeued/cancelled/timeout) and restarts."""
        done = self._cli("status", str(self.run_dir), "--json")
        if done.returncode != 0:
            raise SubmitError(_said(done))
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]

    def logs(self, rank: int = 0, task: int = 0, err: bool = False) -> str:
        """That rank's log (standard output; `err=True`: standard error), as `submit.py logs` prints it."""
        args = ["logs", str(self.run_dir), "--task", str(task), "--rank", str(rank)] + (["--err"] if err else [])
        return self._cli(*args).stdout

    def cancel(self) -> None:
        self._cli("cancel", str(self.run_dir))

    def result(self, timeout: float | None = None, poll_s: float = 2.0) -> dict[str, Any]:
        """Wait for the run to end; its final metrics (what `--json` prints). RunFailed if it failed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        code = self._submitter_done(timeout)
        payload = json.loads([line for line in self._out if line.startswith("{")][-1]) if self._proc else {}
        if "state" not in payload:  # queued without waiting (SLURM), or attached: follow it through `status`
            while not all(s["state"] in ENDED for s in self.status()):
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"{self.run_dir} still running after {timeout} s")
                time.sleep(poll_s)
            states = self.status()
            result_file = self.run_dir / "result.json"
            text = result_file.read_text() if result_file.exists() else None
            if (self.run_dir / "remote.json").is_file() and len(states) == 1:  # over SSH: as `status` read it there
                text = json.dumps(states[0].get("result")) if states[0].get("result") else None
            if any(s["state"] != "completed" for s in states):
                bad = next(s for s in states if s["state"] != "completed")
                rank = f" on rank {bad['failed_rank']}" if bad.get("failed_rank") is not None else ""
                raise RunFailed(f"{self.run_dir}: task {bad['task']} {bad['state']}{rank}: {bad.get('error') or ''}",
                                {"tasks": states})
            return json.loads(text) if text else {"tasks": states}
        if code != 0 or payload.get("state") not in ("COMPLETED", None):
            raise RunFailed(f"{payload.get('run_dir')}: {payload.get('state')} on rank {payload.get('failed_rank')}: "
                            f"{payload.get('error')}", payload)
        return payload


def _drain(stream: Any, lines: list[str]) -> None:
    for line in stream:
        lines.append(line.rstrip("\n"))
    stream.close()


def _tail(lines: list[str], count: int = 5) -> str:
    return " | ".join(line for line in lines[-count:] if line.strip()) or "(nothing on standard error)"


def _said(done: subprocess.CompletedProcess[str] | int | None, stderr: str = "") -> str:
    """The command line's `error:` line; else its exit status and the last lines of its standard error."""
    if isinstance(done, subprocess.CompletedProcess):
        done, stderr = done.returncode, done.stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    return errors[0] if errors else f"the submitter exited with status {done}: {_tail(stderr.splitlines())}"


def _run_folder(line: str) -> str | None:
    """The run folder from the submitter's output: its first line or its --json payload."""
    if line.startswith("{"):
        try:
            return str(json.loads(line).get("run_dir") or "") or None
        except ValueError:
            return None
    marker = "run folder"
    if marker in line:
        return line.split(marker, 1)[1].lstrip(": ").split()[0].rstrip(",")
    return None
