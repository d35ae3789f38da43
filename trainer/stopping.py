"""Stop signals: remember that one arrived, and let the training loop stop at a step boundary.

A signal handler must not stop training where it lands: in the middle of a step, or inside a
collective that the other ranks are waiting in, only this rank would leave. So the handler only
records the request; the loop asks all ranks at each step boundary (`Trainer.stop_agreed`), and
every rank stops at the same step. Two kinds of request:

* REQUEUE: the profile's signal (USR2 by default), which SLURM sends `signal_delay_s` before the
  time limit and on preemption. Rank 0 checkpoints and the launcher requeues the job.
* TERMINATE: SIGTERM, which SLURM sends when it ends the job itself (`scancel`, `scontrol requeue`,
  node failure, kill-on-bad-exit). Rank 0 checkpoints if there is time; SLURM decides what follows,
  so the job never requeues itself on TERM (a user's `scancel` must stay a cancel).

No torch here.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

NONE, REQUEUE, TERMINATE = 0, 1, 2
KIND_NAMES = {REQUEUE: "requeue", TERMINATE: "terminate"}


class StopRequested(Exception):
    """Every rank stopped at the same step boundary after a stop signal; a checkpoint was written.

    `info` is what the launcher's stop hook decided on rank 0 (the same on every rank), e.g.
    {"requeued": True, "reason": "preemption", "exit_code": 144}.
    """

    def __init__(self, step: int, signal_name: str, kind: int = REQUEUE, info: dict[str, Any] | None = None) -> None:
        super().__init__(f"stopped at step {step} on SIG{signal_name}")
        self.step, self.signal_name, self.kind = step, signal_name, kind
        self.info: dict[str, Any] = dict(info or {})

    @property
    def requeued(self) -> bool:
        return bool(self.info.get("requeued"))


def signal_number(name: str) -> int | None:
    return getattr(signal, f"SIG{name}", None)


class StopSignals:
    """Handlers for the stop signals that record the request; the previous handlers come back on
    `restore()` (the debug executor runs the trainer inside the submitter's own process)."""

    def __init__(self, requeue_signal: str) -> None:
        self.names = {requeue_signal: REQUEUE}
        if requeue_signal != "TERM":
            self.names["TERM"] = TERMINATE
        self.kind = NONE
        self.name = ""
        self._previous: dict[int, Any] = {}

    def install(self) -> bool:
        """Install the handlers; False where that is impossible (not the main thread)."""
        try:
            for name in self.names:
                signum = signal_number(name)
                if signum is not None:
                    self._previous[signum] = signal.signal(signum, self._handler(name))
        except ValueError:  # signal only works in the main thread of the main interpreter
            self.restore()
            return False
        return True

    def _handler(self, name: str) -> Callable[[int, Any], None]:
        def handle(signum: int, frame: Any) -> None:
            # Only record: SLURM may deliver TERM twice (slurmstepd and srun), and whoever sends it
            # follows up with SIGKILL if we are stuck (KillWait, torchrun), while a rank stuck in a
            # collective is ended by the collective timeout.
            kind = self.names[name]
            if kind > self.kind:  # TERMINATE outranks REQUEUE: SLURM is already ending the job
                self.kind, self.name = kind, name
        return handle

    def restore(self) -> None:
        for signum, previous in self._previous.items():
            try:
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
            except (ValueError, TypeError):
                pass
        self._previous.clear()

    def raise_requeue_signal(self) -> None:
        """Send ourselves the requeue signal, through the real handler (the `job.interrupt_at` test aid)."""
        name = next(n for n, k in self.names.items() if k == REQUEUE)
        signum = signal_number(name)
        if signum is not None:
            signal.raise_signal(signum)
