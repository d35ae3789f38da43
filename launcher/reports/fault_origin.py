"""Where a failed attempt's failure came from: the node (leave it out of later attempts) or the code.
(launcher.reports.root_cause shortens a failure and orders the failed ranks; this says whose fault it was.)

Read from how each rank ended (`RankEnd`: its result pickle, this attempt's part of its log, srun's
report line) by `classify`, a pure function:

1. SLURM said NODE_FAIL: the nodes it lost.
2. A failed rank's error or log has a line of a node's hardware or driver error (`NODE_ERRORS`, the
   shipped CUDA/NCCL/ECC/Xid/bus-error patterns, and the profile's `node_error_patterns`): that
   rank's node. Matched only in the ranks that failed, so a healthy peer that printed a warning is
   not blamed.
3. The root cause (launcher.reports.root_cause.root_cause_first: the rank that raised, or the one srun saw
   die first)
   raised a Python exception: the code, with a `signature` (the exception's type and the file:line
   of the innermost frame of the user's code) that tells the same bug on the next attempt.
4. A failed rank was killed by the profile's own stop signal (`stop_signal`, USR2 by default) with no
   Python exception: SLURM sent its warning of a time limit or a preemption before the rank had installed
   its handler (at start-up). Neither the node's fault nor the code's: the attempt is a stop.
5. The root cause was killed by SIGKILL or SIGBUS with no Python exception while every other failed
   rank only shows the symptoms of a dead peer (failures.SYMPTOMS: closed connections, timeouts): its node.
6. Anything else: the code.

No torch and no SLURM call here: the retry step on the cluster (launcher.heal) gathers the facts,
and the unit tests feed them directly.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass

from launcher.reports.root_cause import is_symptom, last_line, root_cause_first, traceback_body

# Lines a node's hardware or driver writes into a rank's log or error (matched case-insensitively).
# Deliberately not NCCL's network errors ("remote process exited"): every peer of a dead rank prints
# those, and they name no node.
NODE_ERRORS = (
    r"uncorrectable ECC error", r"\bECC error", r"ECCUncorrectable", r"\bXid\b", r"fallen off the bus",
    r"GPU is lost", r"no CUDA-capable device is detected", r"CUDA-capable device\(s\) is/are busy or unavailable",
    r"CUDA driver version is insufficient", r"uncorrectable NVLink error", r"NCCL.{0,80}unhandled cuda error",
    r"NCCL WARN.{0,80}Cuda failure", r"CUDA error: unknown error", r"\bBus error\b",
)
# srun's report of a task killed by a signal that points at the node: the kernel's OOM killer or a
# dead machine (Killed), a memory or bus fault (Bus error). A segfault or abort is left to the code.
NODE_SIGNALS = ("Killed", "Bus error")

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)', re.MULTILINE)
_LIBRARY = ("/site-packages/", "/dist-packages/", "<frozen ", "/lib/python3")


@dataclass(frozen=True)
class RankEnd:
    """How one rank of the attempt ended."""

    rank: int
    node: str = ""  # "" where nothing tells
    outcome: str = "none"  # success, error (a result pickle with a traceback), none (no result)
    error: str = ""  # the traceback of an error result
    log: str = ""  # this attempt's part of the rank's log (stderr and stdout)
    srun: str = ""  # srun's line about it ("srun: error: cpu2: task 1: Killed"), "" if none

    @property
    def failed(self) -> bool:
        return self.outcome != "success"


def all_returned(ranks: list[RankEnd]) -> bool:
    """Every rank of the attempt returned its result: the attempt's work is done, whatever ended a rank after."""
    return bool(ranks) and not any(r.failed for r in ranks)


@dataclass(frozen=True)
class Verdict:
    """Where the failure came from. `origin`: node or code; `nodes`: the nodes to leave out."""

    origin: str
    rank: int | None
    error: str  # the line a user reads
    nodes: tuple[str, ...] = ()
    signature: str = ""  # code: "ValueError at /proj/train.py:41"
    evidence: str = ""  # what decided it (the matched log line, srun's line)

    def as_json(self) -> dict[str, object]:
        return {"origin": self.origin, "rank": self.rank, "error": self.error, "nodes": list(self.nodes),
                "signature": self.signature, "evidence": self.evidence}


def classify(ranks: list[RankEnd], patterns: list[str] | tuple[str, ...] = (),
             node_fail: list[str] | tuple[str, ...] = (), tool_code: tuple[str, ...] = (),
             first_dead: int | None = None, stop_signal: str = "") -> Verdict:
    """The verdict on an attempt in which some rank failed. `patterns`: the profile's own node-error
    patterns (beside NODE_ERRORS); `node_fail`: the nodes SLURM reported lost (NODE_FAIL);
    `tool_code`: folders of this tool's code, skipped when looking for the user's frame;
    `first_dead`: the rank srun reported first (default: the first with a report); `stop_signal`: the
    profile's stop signal ("USR2"; "": none)."""
    if node_fail:
        return Verdict("node", None, f"SLURM lost node(s) {', '.join(node_fail)} (NODE_FAIL)", tuple(node_fail),
                       evidence="NODE_FAIL")
    failed = [r for r in ranks if r.failed]
    hardware = [(r, line) for r in failed if (line := _hardware_line(r, patterns))]
    blamed = tuple(dict.fromkeys(r.node for r, _ in hardware if r.node))
    if blamed:
        first, line = hardware[0]
        return Verdict("node", first.rank, line, blamed, evidence=line)
    if not failed:
        return Verdict("code", None, "the job failed, but every rank returned a result")
    stopped = _killed_by(failed, stop_signal)
    if stopped is not None:
        return Verdict("stop", stopped.rank, f"{stopped.srun} (SIG{stop_signal}, the profile's stop signal: SLURM's "
                       "warning of a time limit or a preemption came before the rank could handle it)")
    root = _root_cause(failed, first_dead)
    exception = _exception_text(root)
    if exception:
        error = last_line(_last_traceback(exception), "error")
        return Verdict("code", root.rank, error, signature=signature(exception, tool_code))
    peers_fine = all(_only_symptoms(r) for r in failed if r is not root)
    killed = any(root.srun.endswith(s) for s in NODE_SIGNALS) or (not root.srun and root.outcome == "none")
    what = root.srun or f"rank {root.rank} ended without a result or a Python exception"
    if killed and peers_fine and root.node:
        return Verdict("node", root.rank, what, (root.node,), evidence=what)
    return Verdict("code", root.rank, what, signature=f"no exception: {_srun_what(root.srun)}")


def _killed_by(failed: list[RankEnd], name: str) -> RankEnd | None:
    """The first failed rank that srun saw die of signal SIG`name` with no Python exception (None: none)."""
    number = getattr(signal, f"SIG{name}", None) if name else None
    if number is None:
        return None
    said = signal.strsignal(number) or ""  # srun's words for it: "User defined signal 2"
    return next((r for r in failed if said and r.srun.endswith(said) and not _exception_text(r)), None)


def node_error_line(text: str, patterns: list[str] | tuple[str, ...] = ()) -> str:
    """The first line of `text` that matches a node-error pattern (shipped or the profile's), or ""."""
    joined = "|".join(f"(?:{p})" for p in (*NODE_ERRORS, *patterns))
    found = re.search(joined, text, re.IGNORECASE)
    if found is None:
        return ""
    start = text.rfind("\n", 0, found.start()) + 1
    end = text.find("\n", found.end())
    return text[start:end if end >= 0 else len(text)].strip()[:300]


def _hardware_line(rank: RankEnd, patterns: list[str] | tuple[str, ...]) -> str:
    """The rank's line that blames its node: its exception's, else its log's (the driver's own line),
    else any line of its traceback."""
    exception = last_line(_last_traceback(rank.error)) if rank.error else ""
    return (node_error_line(exception, patterns) or node_error_line(rank.log, patterns)
            or node_error_line(rank.error, patterns))


def signature(traceback_text: str, tool_code: tuple[str, ...] = ()) -> str:
    """'TYPE at FILE:LINE': the exception's type and the innermost frame of the user's code (not the
    standard library, an installed package or this tool), else the innermost frame."""
    text = _last_traceback(traceback_text)
    exception = last_line(text, "error")
    kind = exception.split(":", 1)[0].strip() if ":" in exception else exception.strip()
    frames = [(m.group("file"), m.group("line")) for m in _FRAME.finditer(text)]
    own = [f for f in frames if not any(part in f[0] for part in _LIBRARY)
           and not any(f[0].startswith(folder.rstrip("/") + "/") for folder in tool_code)]
    where = (own or frames or [("?", "?")])[-1]
    return f"{kind} at {where[0]}:{where[1]}"


def _last_traceback(text: str) -> str:
    """The last traceback of `text` (a chained exception's, or submitit's framing around one)."""
    body = traceback_body(text)
    at = body.rfind("Traceback (most recent call last)")
    return body[at:] if at >= 0 else body


def _exception_text(rank: RankEnd) -> str:
    """The rank's Python traceback: its error result, else one in its log; "" if it raised none."""
    if rank.outcome == "error" and "Traceback" in rank.error:
        return rank.error
    at = rank.log.rfind("Traceback (most recent call last)")
    return rank.log[at:] if at >= 0 and rank.outcome != "success" else ""


def _only_symptoms(rank: RankEnd) -> bool:
    """A rank that died of a peer's failure: no error of its own, or one that only says a peer went away."""
    text = _exception_text(rank)
    return not text or is_symptom(last_line(_last_traceback(text)))


def _root_cause(failed: list[RankEnd], first_dead: int | None) -> RankEnd:
    """The rank the others died of (root_cause_first: a real exception before a symptom, srun's first
    report before the rest)."""
    if first_dead is None:
        first_dead = next((r.rank for r in failed if r.srun), None)
    order = root_cause_first([(r.rank, "", _exception_text(r) or r.srun) for r in failed], first_dead)
    by_rank = {r.rank: r for r in failed}
    return by_rank[order[0][0]]


def _srun_what(line: str) -> str:
    return line.rsplit(": ", 1)[-1] if line else "no result"
