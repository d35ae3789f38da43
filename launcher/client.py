"""Submitting from Python (a notebook, a script): one call, and a handle on the run.

    from launcher.client import submit

    run = submit(profile="dev-cluster", entrypoint="mypkg.train:main", config={"lr": 0.1},
                 sets=["profile.nodes=2"])
    run.run_dir          # the run folder (as soon as the submitter has made it)
    run.status()         # one dict per task: state, restarts, job id, error
    run.result()         # waits; the final metrics (as `--json` prints them), RunFailed if it failed
    run.logs(rank=1)     # that rank's log text
    run.cancel()

It runs `python submit.py ... --json` itself, in a child process: the very same engine (resolve,
checks, preflight, run folder, sbatch or the local executor) with nothing re-implemented, and the
notebook's own process never imports torch or submitit for it. A bad profile, job or config raises
SubmitError with the submitter's one-line error, before anything is queued.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SUBMIT = str(Path(__file__).resolve().parent.parent / "submit.py")
ENDED = ("completed", "failed", "cancelled", "timeout")


class SubmitError(RuntimeError):
    """The submitter refused the request (exit 2: bad input, nothing queued); the message is its error line."""


class RunFailed(RuntimeError):
    """The run ran and failed (exit 1); `details` is its --json payload (failed rank, error)."""

    def __init__(self, message: str, details: dict[str, Any]) -> None:
        super().__init__(message)
        self.details = details


def submit(profile: str = "local", job: str | None = None, *, entrypoint: str | None = None,
           config: dict[str, Any] | None = None, sets: list[str] | None = None, name: str | None = None,
           cwd: str | Path | None = None) -> Run:
    """Submit `job` (a name or path), or `entrypoint` with `config`, to `profile`; return at once.

    `sets` are `--set` overrides (["job.epochs=3", "profile.nodes=2"]); `cwd` is where the submitter
    runs (its runs_dir and the entrypoint lookup are relative to it; default: this process's).
    """
    if (job is None) == (entrypoint is None):
        raise ValueError("give either job= (a job name or file) or entrypoint= (with config=)")
    workdir = Path(cwd or os.getcwd()).resolve()
    scratch = Path(tempfile.mkdtemp(prefix="submit-"))
    if entrypoint is not None:
        # The mapping a job file would hold; JSON is YAML, so the submitter reads it as written.
        job_file = scratch / f"{name or entrypoint.rpartition(':')[2]}.yaml"
        job_file.write_text(json.dumps({"name": name or job_file.stem, "entrypoint": entrypoint,
                                        "config": config or {}}))
        job = str(job_file)
    argv = [sys.executable, SUBMIT, "--profile", profile, "--job", str(job), "--json"]
    for item in sets or []:
        argv += ["--set", item]
    out = open(scratch / "stdout", "w+", encoding="utf-8")  # noqa: SIM115 - owned by the Run
    proc = subprocess.Popen(argv, cwd=workdir, stdout=out, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    return Run(proc, scratch / "stdout", workdir, profile)


class Run:
    """A submitted run. Every method asks the same command line a user would (`submit.py status`, ...)."""

    def __init__(self, proc: subprocess.Popen[str], stdout: Path, cwd: Path, profile: str) -> None:
        self._proc, self._stdout, self._cwd, self._profile = proc, stdout, cwd, profile
        self._stderr = ""
        self._run_dir: Path | None = None

    def _lines(self) -> list[str]:
        return [line for line in self._stdout.read_text(encoding="utf-8").splitlines() if line.strip()]

    def _submitter_done(self, timeout: float | None = None) -> int:
        """Wait for the submitting process; SubmitError if it refused the request."""
        if self._proc.returncode is None:
            _, err = self._proc.communicate(timeout=timeout)
            self._stderr = err or ""
        if self._proc.returncode == 2:
            errors = [line for line in self._stderr.splitlines() if line.startswith("error:")]
            raise SubmitError(errors[0] if errors else self._stderr.strip()[-500:])
        return int(self._proc.returncode or 0)

    @property
    def run_dir(self) -> Path:
        """The run folder; waits (at most a minute) until the submitter has created it."""
        deadline = time.monotonic() + 60
        while self._run_dir is None:
            for line in self._lines():
                found = _run_folder(line)
                if found:
                    self._run_dir = (self._cwd / found).resolve()
                    break
            else:
                if self._proc.poll() is not None:
                    self._submitter_done()
                    raise RuntimeError(f"the submitter ended without a run folder: {self._stderr[-500:]}")
                if time.monotonic() > deadline:
                    raise TimeoutError("no run folder after 60 s")
                time.sleep(0.2)
        return self._run_dir

    def _cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, SUBMIT, *args], cwd=self._cwd, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, check=False)

    def status(self) -> list[dict[str, Any]]:
        """Each task's state (pending/running/completed/failed/requeued/cancelled/timeout) and restarts."""
        done = self._cli("status", str(self.run_dir), "--json")
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]

    def logs(self, rank: int = 0, task: int = 0, err: bool = False) -> str:
        args = ["logs", str(self.run_dir), "--task", str(task), "--rank", str(rank)] + (["--err"] if err else [])
        return self._cli(*args).stdout

    def cancel(self) -> None:
        self._cli("cancel", str(self.run_dir))

    def result(self, timeout: float | None = None, poll_s: float = 2.0) -> dict[str, Any]:
        """Wait for the run to end; its final metrics (what `--json` prints). RunFailed if it failed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        code = self._submitter_done(timeout)
        payload = json.loads(self._lines()[-1])
        if "state" not in payload:  # queued without waiting (SLURM): follow it through `status`
            while not all(s["state"] in ENDED for s in self.status()):
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"{self.run_dir} still running after {timeout} s")
                time.sleep(poll_s)
            states = self.status()
            result_file = self.run_dir / "result.json"
            if any(s["state"] != "completed" for s in states):
                bad = next(s for s in states if s["state"] != "completed")
                raise RunFailed(f"{self.run_dir}: task {bad['task']} {bad['state']}: {bad.get('error') or ''}",
                                {"tasks": states})
            return json.loads(result_file.read_text()) if result_file.exists() else {"tasks": states}
        if code != 0 or payload.get("state") not in ("COMPLETED", None):
            raise RunFailed(f"{payload.get('run_dir')}: {payload.get('state')} on rank {payload.get('failed_rank')}: "
                            f"{payload.get('error')}", payload)
        return payload


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
