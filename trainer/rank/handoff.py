"""How a `script:` job stops for a requeue: the hand-off between the script and the task that runs it.

A script runs in a child process of each task (trainer.runners.scripts), so the requeue protocol of the
built-in jobs (trainer.rank.stopping: all ranks agree, rank 0 checkpoints, the launcher requeues, every
rank exits the same way) is split between the two processes of each rank:

* A script that calls `trainer.api.init()` stops at `ctx.step_boundary` with the built-in protocol
  among the scripts' own process group. The decision its rank 0 needs is the task's: the script
  writes `request.json` into the rank's node-local *channel* folder (`$TRAINER_SCRIPT_CHANNEL`),
  rank 0's task calls the launcher's requeue hook and answers in `decision.json`. Each script then
  records the stop it raised (`stopped.json`) and exits with STOPPED_EXIT_CODE, which its task
  turns into the same StopRequested a built-in job raises.
* A script that uses none of the API is ended by the forwarded signal (or by its peers' end). Its
  tasks agree through the run folder, shared by every node: a task that got the requeue signal notes
  it (`script-stops/rank-R.json`), rank 0's task decides and publishes `script-stops/decision.json`,
  the other ranks' tasks wait for that decision (which also keeps them alive until rank 0 has
  requeued: srun --kill-on-bad-exit would otherwise end rank 0 first). Such a script restarts from
  scratch.

Files carry the attempt (trainer.rank.events.attempt_number: the run's "started" events, written by
rank 0's task before the script starts), so a previous attempt's leftovers are never read as this one's. No torch here:
the task side imports this without torch.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from trainer.rank.rundir import SCRIPT_STOPS_DIR
from trainer.rank.stopping import StopRequested

# sysexits.h EX_TEMPFAIL, "a temporary failure: try again later": a script that stopped at a step
# boundary and checkpointed (a requeue resumes it). Chosen to differ from 1 (an uncaught exception),
# 128+N (killed by signal N) and 144 (submitit's local requeue).
STOPPED_EXIT_CODE = 75

# What the task tells its script (besides torchrun's variables).
CHANNEL_VARIABLE = "TRAINER_SCRIPT_CHANNEL"  # the rank's node-local folder for the hand-off
STOP_SIGNAL_VARIABLE = "TRAINER_STOP_SIGNAL"  # the profile's requeue signal (init() takes it over)
INTERRUPT_VARIABLE = "TRAINER_INTERRUPT_AT"  # job.interrupt_at, the test aid: steps to stop at


def _write(path: Path, payload: dict[str, Any]) -> None:
    """Atomically: a reader polling for the file sees it whole or not at all."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(payload, default=str), encoding="utf-8")
    os.replace(tmp, path)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _poll(read: Any, timeout: float, interval: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if value is not None or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


# ----- the script's side (trainer.api.init) -----------------------------------------------------

def request_decision(channel: str, signal_name: str, timeout: float = 600.0) -> dict[str, Any]:
    """On the script's rank 0, after its stop checkpoint: ask the task to requeue; its answer.
    Ten minutes at most: `scontrol requeue` on a busy controller can take a while."""
    folder = Path(channel)
    _write(folder / "request.json", {"signal": signal_name})
    answer = _poll(lambda: _read(folder / "decision.json"), timeout, 0.05)
    return answer if answer is not None else {"requeued": False, "reason": "the task did not answer"}


def record_stop(channel: str, step: int, signal_name: str, kind: int, info: dict[str, Any]) -> None:
    """On every rank of the script, as it leaves on StopRequested: what its task re-raises."""
    _write(Path(channel) / "stopped.json", {"step": step, "signal": signal_name, "kind": kind, "info": info})


_STOPPED: list[StopRequested] = []


def exit_as_stopped_on_stop_requested(channel: str) -> None:
    """An uncaught StopRequested is not a crash: one line instead of a traceback, its details for the
    task (`channel`), and exit status STOPPED_EXIT_CODE, which only os._exit can give after an uncaught
    exception; it is taken at exit, after the teardown (registered later, so run earlier)."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], error: BaseException, tb: Any) -> None:
        if not isinstance(error, StopRequested):
            previous(kind, error, tb)
            return
        _STOPPED.append(error)
        if channel:
            record_stop(channel, error.step, error.signal_name, error.kind, error.info)
        print(f"[trainer.api] {error}: checkpointed; exit status {STOPPED_EXIT_CODE} (stopped: "
              f"{'requeued' if error.requeued else 'rerun to resume'})", file=sys.stderr, flush=True)

    def exit_stopped() -> None:
        if _STOPPED:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(STOPPED_EXIT_CODE)

    sys.excepthook = hook
    atexit.register(exit_stopped)


# ----- the task's side, one rank (trainer.runners.scripts) ---------------------------------------------

def pending_request(channel: str) -> str | None:
    """The signal the script's rank 0 asks a decision for, if it asked."""
    request = _read(Path(channel) / "request.json")
    return None if request is None else str(request.get("signal", ""))


def answer(channel: str, info: dict[str, Any]) -> None:
    _write(Path(channel) / "decision.json", info)


def script_stop(channel: str) -> dict[str, Any] | None:
    return _read(Path(channel) / "stopped.json")


# ----- between the tasks of a run (scripts that use none of the API) -------------------------------

def note_signal(run_dir: Path | str, rank: int, number: int, signal_name: str) -> None:
    folder = Path(run_dir) / SCRIPT_STOPS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    _write(folder / f"rank-{rank}.json", {"attempt": number, "signal": signal_name, "time": time.time()})


def signalled(run_dir: Path | str, number: int, timeout: float) -> str | None:
    """The requeue signal a task of this attempt got (waiting up to `timeout` s), or None."""
    folder = Path(run_dir) / SCRIPT_STOPS_DIR

    def read() -> str | None:
        for path in sorted(folder.glob("rank-*.json")) if folder.is_dir() else []:
            note = _read(path)
            if note is not None and note.get("attempt") == number:
                return str(note.get("signal"))
        return None

    return _poll(read, timeout, 0.2)


def publish_decision(run_dir: Path | str, number: int, info: dict[str, Any]) -> None:
    folder = Path(run_dir) / SCRIPT_STOPS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    _write(folder / "decision.json", {**info, "attempt": number})


def decision(run_dir: Path | str, number: int, timeout: float) -> dict[str, Any] | None:
    """Rank 0's decision for this attempt (waiting up to `timeout` s), or None."""
    path = Path(run_dir) / SCRIPT_STOPS_DIR / "decision.json"

    def read() -> dict[str, Any] | None:
        found = _read(path)
        if found is None or found.get("attempt") != number:
            return None
        return {k: v for k, v in found.items() if k != "attempt"}

    return _poll(read, timeout, 0.2)
