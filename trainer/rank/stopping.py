"""Stop signals: remember that one arrived, and let the training loop stop at a step boundary.

A signal handler must not stop training where it lands: in the middle of a step, or inside a
collective that the other ranks are waiting in, only this rank would leave. So the handler only
records the request; the loop asks all ranks at each step boundary (`StopProtocol.agreed`), and
every rank stops at the same step (`StopProtocol.stop`). Two kinds of request:

* REQUEUE: the profile's signal (USR2 by default), which SLURM sends `signal_delay_s` before the
  time limit and on preemption. Rank 0 checkpoints and the launcher requeues the job.
* TERMINATE: SIGTERM, which SLURM sends when it ends the job itself (`scancel`, `scontrol requeue`,
  node failure, kill-on-bad-exit). Rank 0 checkpoints if there is time; SLURM decides what follows,
  so the job never requeues itself on TERM (a user's `scancel` must stay a cancel).

No torch here: the launcher installs the handlers before it imports torch (seconds), so that a
signal in the meantime is not lost. The collectives reach this module from the trainer, as objects.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:  # annotations only: importing these at run time would import torch
    from trainer.distributed.ranks import Ranks
    from trainer.rank.reporting import Reporter

NONE, REQUEUE, TERMINATE = 0, 1, 2
KIND_NAMES = {REQUEUE: "requeue", TERMINATE: "terminate"}

# Called on rank 0 after the stop checkpoint is on disk, with the signal's name; returns what was
# decided (JSON-able, at least {"requeued": bool}), which every rank then receives in StopRequested.
# The launcher's requeue lives behind it: the trainer never imports submitit.
StopHook = Callable[[str], dict[str, Any]]


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
        self.signalled = False  # a real signal arrived (not only a `request` of this process's own)
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
            # TERMINATE outranks REQUEUE: SLURM is already ending the job. A signal replaces a `request`.
            if kind > self.kind or not self.signalled:
                self.kind, self.name = kind, name
            self.signalled = True
        return handle

    def request(self, name: str) -> None:
        """A stop asked for by this process itself, as SLURM's own ending is (TERMINATE: nothing requeues):
        a pool worker's point that was cancelled, or taken back from it (launcher.node.pool_worker)."""
        if not self.kind:
            self.kind, self.name = TERMINATE, name

    def clear(self) -> bool:
        """Forget a stop this process asked for with `request`; False (kept) where a signal arrived."""
        if self.signalled:
            return False
        self.kind, self.name = NONE, ""
        return True

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


@contextlib.contextmanager
def installed(stops: StopSignals | None, requeue_signal: str) -> Iterator[StopSignals]:
    """`stops` as given (whoever installed it restores it), or handlers installed for this block."""
    if stops is not None:
        yield stops
        return
    own = StopSignals(requeue_signal)
    own.install()
    try:
        yield own
    finally:
        own.restore()


class StopProtocol:
    """How every rank stops together: agree at a step boundary, checkpoint, decide on rank 0, share."""

    def __init__(self, signals: StopSignals, requeue_signal: str, on_stop: StopHook | None, ranks: Ranks,
                 report: Reporter, interrupts: set[int] | frozenset[int] = frozenset()) -> None:
        self.signals, self.requeue_signal, self.on_stop = signals, requeue_signal, on_stop
        self.ranks, self.report, self.interrupts = ranks, report, interrupts
        self.checkpoint_due = False  # rank 0's word at the last step boundary (`agreed`)

    def agreed(self, step: int, start_step: int, due: bool = False) -> int:
        """At a step boundary: the stop every rank agrees on (NONE, REQUEUE or TERMINATE); and, in the same
        collective, whether rank 0 says a checkpoint is due (`due`: `checkpoint_every_steps: auto`, decided by
        rank 0's clock), which every rank then reads in `checkpoint_due`."""
        if self.interrupts and self.ranks.is_main and step in self.interrupts and step != start_step:
            self.signals.raise_requeue_signal()  # the test aid goes through the real signal handler
        # Any rank that saw a signal stops everyone; TERMINATE outranks REQUEUE.
        # (The kind above the bit: the highest kind wins whatever rank 0 says; a stop checkpoints anyway.)
        agreed = self.ranks.max(self.signals.kind * 2 + (1 if due else 0))
        self.checkpoint_due = bool(agreed & 1)
        return agreed >> 1

    def stop(self, kind: int, checkpoint: Callable[[], None], **where: int) -> NoReturn:
        """Checkpoint, let the launcher decide (requeue or not) on rank 0, tell every rank, raise.

        `where` (step, epoch, step_in_epoch) goes into the log line and the "stopped" event.
        """
        name = self.signals.name if self.signals.kind == kind else ""
        name = name or ("TERM" if kind == TERMINATE else self.requeue_signal)
        checkpoint()
        info: dict[str, Any] = {}
        if self.ranks.is_main:
            info = decide(kind, name, self.on_stop)
            self.report.log(f"stopped at step {where['step']} on SIG{name}: "
                            + ", ".join(f"{k} {v}" for k, v in info.items()))
            self.report.event("stopped", **where, signal=name, kind=KIND_NAMES[kind], **info)
        # Also keeps the other ranks alive until rank 0 has requeued: with srun --kill-on-bad-exit
        # a rank that exits early with an error would kill rank 0 before it requeues the job.
        info = self.ranks.broadcast(info)
        raise StopRequested(where["step"], name, kind, info)


def decide(kind: int, name: str, on_stop: StopHook | None) -> dict[str, Any]:
    """Rank 0's requeue decision after a stop on SIG`name` (the built-in protocol's and a script's
    task's alike): SLURM's own TERM is never turned into a requeue; otherwise the launcher's hook
    decides, and a hook that fails is reported, not raised."""
    if kind == TERMINATE:
        # SLURM is ending the job itself (scancel, scontrol requeue, node failure): it decides
        # whether the job comes back; requeueing ourselves would turn a user's cancel into a requeue.
        return {"requeued": False, "reason": "terminated"}
    if on_stop is None:
        return {"requeued": False, "reason": "no requeue hook (not run by the submitter)"}
    try:
        return dict(on_stop(name))
    except Exception as err:  # noqa: BLE001 - reported on every rank through StopRequested
        return {"requeued": False, "reason": "requeue failed", "message": f"{type(err).__name__}: {err}"}
