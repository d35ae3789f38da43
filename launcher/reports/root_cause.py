"""What failed, as a user reads it: a SLURM command's or a rank's message shortened to one line, and
which of a job's failed ranks is the cause.

sbatch's refusal, scontrol's complaint and a rank's traceback are reported by every wing above this
one; they all shorten them the same way, here. A rank that dies takes its peers with it (closed
connections, collective timeouts, srun's kill-on-bad-exit); the node's torchrun task, `status` and
`--wait` all show the cause first, by this one rule.
"""

from __future__ import annotations

import math

# What a rank that died of a peer's failure reports ("exit code 143": srun's words for a task that ended on
# the SIGTERM its --kill-on-bad-exit sends the peers of a dead rank; launcher.node.task.TERMINATED_EXIT_CODE).
SYMPTOMS = ("timed out", "Timeout", "Connection closed", "Connection reset", "Broken pipe",
            "killed", "SIGTERM", "has not completed", "UncompletedJobError", "ended without a result",
            "exit code 143")

Failure = tuple[int, str, str]  # (rank, one-line error, full text)


def last_line(text: str | bytes | None, default: str = "") -> str:
    """The last non-blank line: a traceback's exception, a command's conclusion."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else default


def joined_lines(text: str | None, default: str = "") -> str:
    """All non-blank lines joined by spaces (sbatch's multi-line refusals quoted in one error line)."""
    return " ".join(line.strip() for line in (text or "").splitlines() if line.strip()) or default


def traceback_body(text: str) -> str:
    """A rank's failure as submitit reports it, without its framing: the traceback between "-----" rules,
    then a list of log paths ("You can check full logs ..."), which go."""
    body = str(text).split("\nYou can check full logs")[0]
    return "\n".join(line for line in body.splitlines() if not line.strip().startswith("-----"))


def is_symptom(text: str) -> bool:
    """Whether a rank's error is what a peer's death causes (a timeout, a closed connection)."""
    return any(s in text for s in SYMPTOMS)


def root_cause_first(failures: list[Failure], first_dead: int | None = None,
                     times: dict[int, float] | None = None) -> list[Failure]:
    """Ranks that died of a peer's failure report timeouts or closed connections; show the cause first
    (the one ordering of failures: `--wait`, `status` and a torchrun node task naming its rank use it).

    `first_dead` is the rank srun reported first (it outranks symptoms: a rank killed by a signal
    leaves no traceback of its own); `times`, when each rank failed (torchrun's notes,
    launcher.reports.rank_notes; the ranks' own records, launcher.rundir.outcomes.raised_by_ranks): among causes
    alike, the first to fail comes first (one whose time is unknown after those known), then the lowest rank."""
    def key(f: Failure) -> tuple[int, float, int]:
        symptom = is_symptom(f[2])
        rank = (1 if symptom else 0) if f[0] == first_dead else (2 if symptom else 0)
        return (rank, (times or {}).get(f[0], math.inf), f[0])

    return sorted(failures, key=key)
