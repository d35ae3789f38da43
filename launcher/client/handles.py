"""Handles on runs: a `Run` (one task) and a `Sweep` (one task per point), each asking the same command
line a user would type (`status RUN --json`, `logs`, `cancel`, `--resume`) and reading the run folder's
records as data: a completed task's `result.json`, a failed one's record of what your function raised
(`status --json`'s `failure`: trainer.runners.failures). Nothing here parses words meant for people.

A handle holds only its run folder (and, while it runs, the engine that submitted it): `attach(run)`
in a new kernel gives an equal handle, which works the same.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import time
from pathlib import Path
from typing import Any

from launcher.client.engine import Engine, command, environment
from launcher.remote.ssh_record import RECORD
from launcher.rundir.layout import RESULT_FILE, SUMMARY_CSV, SUMMARY_MD, SUMMARY_PNG

ENDED = ("completed", "failed", "cancelled", "timeout")


class SubmitError(RuntimeError):
    """The submitter refused the request (bad input: nothing queued, no run folder) or could not run; the
    message is its `error:` line (or its exit status and last lines when it printed none)."""

    def _render_traceback_(self) -> list[str]:
        """What a notebook shows: the submitter's error line (and your code's traceback, when importing it
        failed), not the frames of the client that started the submitter."""
        return [f"{type(self).__name__}: {self}", *getattr(self, "__notes__", [])]


class RunFailed(RuntimeError):
    """The run ran and failed. The message names the task (in a sweep), the rank, and the exception type and
    message your function raised; `details` is its traceback through your own code; `state` is what
    `status --json` said of the task (`failure`: the record the rank wrote)."""

    def __init__(self, message: str, details: str = "", state: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.details, self.state = details, dict(state or {})
        failure = self.state.get("failure") or {}
        self.rank: int | None = failure.get("rank", self.state.get("failed_rank"))
        self.error_type: str | None = failure.get("type")
        self.error_message: str | None = failure.get("message")
        if details:
            self.add_note(f"Traceback on rank {self.rank}:\n{details}")  # shown under the error by Python

    def _render_traceback_(self) -> list[str]:
        """What a notebook shows for it (IPython asks exceptions for this): your function's traceback on the
        failing rank, then this error; not the frames of the client that read it."""
        lines = [f"Traceback on rank {self.rank} (your function):", *self.details.splitlines(), ""] \
            if self.details else []
        return [*lines, f"{type(self).__name__}: {self}"]

    @classmethod
    def of(cls, run: str, state: dict[str, Any], point: str = "") -> RunFailed:
        failure = state.get("failure") or {}
        where = f"{run}" + (f" task {state.get('task')} ({point})" if point else "")
        if failure.get("type"):
            said = f": {failure['message']}" if failure.get("message") else ""  # `raise OSError()` says nothing
            return cls(f"{where}: rank {failure.get('rank')} raised {failure['type']}{said}",
                       str(failure.get("traceback") or ""), state)
        rank = f" on rank {state['failed_rank']}" if state.get("failed_rank") is not None else ""
        return cls(f"{where}: {state.get('state')}{rank}: {state.get('error') or 'no error recorded'}", "", state)


class Run:
    """A submitted (or attached) run. Equal handles name the same run folder."""

    def __init__(self, cwd: Path, profile: str, run_dir: Path | None = None, engine: Engine | None = None,
                 runs_dir: str | Path | None = None, reused: bool = False) -> None:
        self._cwd, self._profile, self._runs_dir = cwd, profile, runs_dir
        self._run_dir, self._engine = run_dir, engine
        # Whether submitting found this run already made (the same signature) instead of queueing it.
        self.reused = reused

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self._run_dir)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Run) and other._run_dir == self._run_dir

    def __hash__(self) -> int:
        return hash(self._run_dir)

    @property
    def run_dir(self) -> Path:
        """The run folder (for a run submitted over SSH: its local record)."""
        assert self._run_dir is not None
        return self._run_dir

    @property
    def remote(self) -> bool:
        """Submitted over SSH (a `login:` profile): status and logs are asked over the connection."""
        return (self.run_dir / RECORD).is_file()

    def _cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*command(), *args], cwd=self._cwd, env=environment(), capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False)

    def status(self) -> list[dict[str, Any]]:
        """`status RUN --json`: one dict per task (state, restarts, job id, error, failed_rank, result, failure)."""
        done = self._cli("status", str(self.run_dir), "--json")
        rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not rows:
            errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
            raise SubmitError(errors[0] if errors else f"status exited with {done.returncode}: {done.stderr[-500:]}")
        return rows

    def state(self) -> str:
        """The run's state as `status` gives it (its `run_state`: one rule, launcher.rundir.results.overall_state):
        pending, running, completed, failed or cancelled; `unknown` while the controller does not answer (a
        sweep: running while any point runs)."""
        return str(self.status()[0]["run_state"])

    @property
    def signature(self) -> str:
        """What the run is: a hash of what decides its result (docs/signatures.md), as `status` shows it."""
        return str(self.status()[0]["run_signature"])

    def logs(self, rank: int = 0, task: int = 0, err: bool = False) -> str:
        """That rank's log (standard output; `err=True`: standard error), as `submit.py logs` prints it."""
        args = ["logs", str(self.run_dir), "--task", str(task), "--rank", str(rank)] + (["--err"] if err else [])
        return self._cli(*args).stdout

    def cancel(self) -> None:
        """`submit.py cancel RUN`: its pending and running tasks."""
        self._cli("cancel", str(self.run_dir))

    def wait(self, timeout: float | None = None, poll_s: float = 2.0) -> list[dict[str, Any]]:
        """Until every task has ended; their states (`status --json`)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._engine is not None and self._engine.running():  # a local run: the engine waits for it
            try:
                self._engine.wait(timeout)
            except subprocess.TimeoutExpired:
                raise TimeoutError(f"{self.run_dir} still running after {timeout} s") from None
        while True:
            states = self.status()
            if all(s["state"] in ENDED for s in states):
                return states
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"{self.run_dir} still running after {timeout} s")
            time.sleep(poll_s)

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        """Waits for the end; the final metrics (what `--json` prints). RunFailed if it failed."""
        (state,) = self.wait(timeout)[:1]
        if state["state"] != "completed":
            raise RunFailed.of(self.run_dir.name, state)
        return self._metrics(state, self.run_dir)

    def _metrics(self, state: dict[str, Any], folder: Path) -> dict[str, Any]:
        """A completed task's metrics: its result.json (written by the engine or `status`), or, over SSH,
        what `status` read there."""
        path = folder / RESULT_FILE
        if path.is_file() and not self.remote:
            return dict(json.loads(path.read_text(encoding="utf-8")))
        return dict(state.get("result") or {})


class Sweep(Run):
    """A sweep: one task per point, in the order the points were given (grid points first)."""

    def states(self) -> list[str]:
        """Each point's state, in point order."""
        return [s["state"] for s in self.status()]

    def signatures(self) -> list[str]:
        """Each point's signature, in point order (`signature`: the sweep's, made of these)."""
        return [str(s["signature"]) for s in self.status()]

    def results(self, timeout: float | None = None, failed: str = "raise") -> list[dict[str, Any] | None]:
        """Waits for every point; their metrics in point order. A failed point raises RunFailed (naming it),
        or with `failed="none"` stands as None."""
        if failed not in ("raise", "none"):
            raise ValueError(f"failed={failed!r}: expected 'raise' or 'none'")
        out: list[dict[str, Any] | None] = []
        for state in self.wait(timeout):
            if state["state"] == "completed":
                out.append(self._metrics(state, Path(state["task_dir"])))
            elif failed == "raise":
                point = " ".join(f"{k}={v}" for k, v in (state.get("overrides") or {}).items())
                raise RunFailed.of(self.run_dir.name, state, point)
            else:
                out.append(None)
        return out

    def result(self, timeout: float | None = None) -> list[dict[str, Any] | None]:  # type: ignore[override]
        """The same as results()."""
        return self.results(timeout)

    @property
    def summary_csv(self) -> Path:
        return self.run_dir / SUMMARY_CSV

    @property
    def summary_md(self) -> Path:
        return self.run_dir / SUMMARY_MD

    @property
    def summary_png(self) -> Path:
        """The target metric against the swept keys (the picture `status` draws)."""
        return self.run_dir / SUMMARY_PNG

    def summary(self) -> list[dict[str, str]]:
        """The sweep's table as the command line writes it (summary.csv: best first), rebuilt now."""
        self.status()  # (which rebuilds summary.csv, .md and .png)
        return list(csv.DictReader(io.StringIO(self.summary_csv.read_text(encoding="utf-8"))))

    def rerun_failed(self, sets: list[str] | None = None) -> Sweep:
        """Resubmit only the points that did not complete (`--resume RUN`), from their checkpoints; this
        handle then follows them. `sets`: `--set` for them (e.g. ["profile.time=2:00:00"])."""
        args = ["--resume", str(self.run_dir), *[w for s in sets or [] for w in ("--set", s)]]
        engine = Engine(args, self._cwd)
        said = engine.wait_for("queued", "refused", "failed", "result")
        if said is None or said["event"] in ("refused", "failed"):
            engine.wait()
            raise SubmitError(engine.said())
        self._engine = engine
        return self
