"""When `slurmctld` does not answer: the one place that recognises it and waits it out.

squeue, scontrol and scancel talk to the controller; sacct talks to slurmdbd, which stays up while
slurmctld restarts or fails over. A client whose controller is down tries for a while itself (about 9 s
on the dev cluster) and then prints, e.g.

    slurm_load_jobs error: Unable to contact slurm controller (connect failure)
    scancel: error: Kill job error on job id 981: Unable to contact slurm controller (connect failure)

and exits non-zero: not an answer about the job, so no caller may read it as "the job is gone".
`ask` runs a command once and says which of the three it was (answered, failed, controller unreachable);
`ask_until_answered` asks again with backoff, telling the user once on stderr, until the controller
answers or `PATIENCE_S` passes. Nothing here imports torch.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

# What SLURM's clients print when they could not reach the controller (slurm_strerror of
# SLURMCTLD_COMMUNICATIONS_*, a timed-out socket, and a backup controller not yet in charge).
UNREACHABLE = ("Unable to contact slurm controller", "Socket timed out on send/recv operation",
               "backup controller in standby mode")
# How long a command that must reach the controller (`cancel`: a cancel must not be lost)
# keeps asking: a restart takes seconds, a failover to the backup SlurmctldTimeout (120 s by default), a
# maintenance restart a few minutes. Past this the command fails with the controller's own words.
PATIENCE_S = 900.0
# Between tries: SLURM's client already spends ~9 s on each failed try, so a short pause is enough.
FIRST_DELAY_S, MOST_DELAY_S = 2.0, 30.0


def conclusion(text: str | bytes | None, default: str = "") -> str:
    """What a SLURM command concluded: the last non-blank line it printed ("Unable to contact slurm
    controller", sbatch's refusal). (launcher.reports.root_cause.last_line reads a traceback's the same way;
    the scheduler wing keeps its own so that it reads nothing of what the nodes leave.)"""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return next((line.strip() for line in reversed((text or "").splitlines()) if line.strip()), default)


class Unreachable(Exception):
    """The controller did not answer (the message: the client's own line saying so)."""


def unreachable(text: str) -> str:
    """The line of a SLURM command's output that says the controller could not be reached ("" if none)."""
    for line in text.splitlines():
        if any(mark.lower() in line.lower() for mark in UNREACHABLE):
            return line.strip()
    return ""


@dataclass
class Answer:
    """What one SLURM command gave: its output when it succeeded, else why not."""

    out: str | None  # standard output; None where the command is missing, failed or timed out
    error: str = ""  # its complaint (last line of stderr, or the exit status) when it failed
    unreachable: str = ""  # the line saying it could not reach the controller ("" when it could)

    @property
    def ok(self) -> bool:
        return self.out is not None


def ask(argv: list[str], env: dict[str, str], timeout: float = 60) -> Answer:
    """Run `argv` once (a timeout counts as an unreachable controller: a hung one answers nothing)."""
    if shutil.which(argv[0], path=env.get("PATH")) is None:
        return Answer(None, f"{argv[0]} is not on PATH")
    try:
        done = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return Answer(None, f"no answer within {timeout:g} s", f"{argv[0]}: no answer within {timeout:g} s")
    except OSError as err:
        return Answer(None, str(err))
    if done.returncode == 0:
        return Answer(done.stdout)
    said = done.stderr.strip() or done.stdout.strip()
    return Answer(None, said.splitlines()[-1] if said else f"exit status {done.returncode}", unreachable(said))


def delays(first: float = FIRST_DELAY_S, most: float = MOST_DELAY_S) -> Iterator[float]:
    """Pauses between tries: `first`, growing by half each time, up to `most`."""
    delay = first
    while True:
        yield delay
        delay = min(most, delay * 1.5)


class Outage:
    """Tells the user once when the controller stops answering and once when it answers again, for a
    loop that goes on meanwhile (`--wait` reads the ranks' results from the run folder) or that asks
    again (`ask_until_answered`); `say` defaults to one line on stderr."""

    def __init__(self, doing: str, say: Callable[[str], None] | None = None) -> None:
        self.doing = doing
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.since: float | None = None

    def heard(self, complaint: str) -> None:
        """The last try's complaint ("" when the controller answered)."""
        if complaint and self.since is None:
            self.since = time.monotonic()
            self.say(f"slurmctld is unreachable ({complaint}); {self.doing}, asking again every few seconds "
                     f"until it answers (Ctrl-C to stop)")
        elif not complaint and self.since is not None:
            self.say(f"slurmctld answers again (after {time.monotonic() - self.since:.0f} s)")
            self.since = None


def ask_until_answered(argv: list[str], env: dict[str, str], doing: str, patience_s: float = PATIENCE_S,
                       say: Callable[[str], None] | None = None,
                       pause: Callable[[float], None] = time.sleep) -> Answer:
    """`ask`, again and again while the controller is unreachable, for up to `patience_s`; the user is
    told once (`doing` says what waits) and again when it answers. Past `patience_s` the last answer,
    still unreachable, is returned."""
    outage = Outage(doing, say)
    began = time.monotonic()
    waits = delays()
    while True:
        answer = ask(argv, env)
        if not answer.unreachable:
            outage.heard("")
            return answer
        if time.monotonic() - began >= patience_s:
            return answer
        outage.heard(answer.unreachable)
        pause(next(waits))
