"""The run's exclusion list: the nodes a failure was blamed on (launcher.reports.fault_origin), kept in the
run folder (`excluded-nodes.json`, at a sweep's top, shared by its tasks) and left out of every later
attempt of the run: its own retries and SLURM's requeues (the pending job's ExcNodeList), `--resume`
and the sweep siblings' retries (sbatch --exclude).

Bounded: a node is not left out when the job names it (`sbatch_extra.nodelist`), or when leaving it
out would leave fewer usable nodes in the partition than the run needs; the entry then says why
(`excluded: false`), and `status` shows it. Sweep tasks may fail at once: the file is changed under
an exclusive lock and written whole (a temporary file renamed).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from launcher.cluster.slurm.healing import RetryPolicy
from launcher.rundir.layout import EXCLUDED_FILE


def read(run_root: Path | str) -> list[dict[str, Any]]:
    """Every entry, oldest first; [] when there is none or the file is unreadable (never fatal:
    `status` of a run whose list was damaged still answers)."""
    try:
        data = json.loads((Path(run_root) / EXCLUDED_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return []
    entries = data.get("nodes") if isinstance(data, dict) else None
    return [e for e in entries or [] if isinstance(e, dict) and isinstance(e.get("node"), str)]


def excluded(run_root: Path | str) -> list[str]:
    """The nodes the run leaves out, in the order they were added."""
    return list(dict.fromkeys(e["node"] for e in read(run_root) if e.get("excluded")))


@contextmanager
def _locked(run_root: Path) -> Iterator[None]:
    with open(run_root / f".{EXCLUDED_FILE}.lock", "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def add(run_root: Path | str, node: str, reason: str, *, task: int = 0, job_id: str = "",
        pinned: tuple[str, ...] = (), fitting: list[str] | None = None, needed: int = 1,
        partition: str = "") -> dict[str, Any]:
    """Leave `node` out of the run's later attempts, unless that cannot be done (the entry says why).

    `fitting`: the partition's nodes that can hold one node's share of the request (None: unknown,
    not bounded); `needed`: the nodes the run asks for. Returns the node's entry."""
    root = Path(run_root)
    with _locked(root):
        entries = read(root)
        left_out = {e["node"] for e in entries if e.get("excluded")}
        if node in left_out:
            return next(e for e in entries if e["node"] == node and e.get("excluded"))
        why_not = ""
        if node in pinned:
            why_not = "the job asks for it by name (sbatch_extra.nodelist)"
        elif fitting is not None:
            remaining = [n for n in fitting if n not in left_out and n != node]
            if len(remaining) < needed:
                why_not = (f"leaving it out would leave {len(remaining)} usable node(s) of the {len(fitting)} in "
                           f"partition {partition or '?'} for a run of {needed}")
        said = next((e for e in entries if e["node"] == node and e.get("why_not") == why_not), None)
        if said is not None:  # not left out, for the same reason as before: said once is enough
            return said
        entry = {"node": node, "excluded": not why_not, "reason": reason[:300], "task": task, "job_id": job_id,
                 "time": time.time(), **({"why_not": why_not} if why_not else {})}
        entries.append(entry)
        tmp = root / f".{EXCLUDED_FILE}.tmp"
        tmp.write_text(json.dumps({"nodes": entries}, indent=1))
        os.replace(tmp, root / EXCLUDED_FILE)
        return entry


def add_bounded(run_root: Path | str, nodes: list[str] | tuple[str, ...], reason: str, policy: RetryPolicy,
                env: dict[str, str], *, task: int = 0, job_id: str = "") -> list[dict[str, Any]]:
    """`add` each of `nodes`, bounded as the run's retry step `policy` (sbatch.heal_policy) says: the
    nodes the job names, and the partition's usable nodes as the controller reports them now."""
    from launcher.cluster.slurm import requeue  # (the controller: only where a node is left out)

    fitting, needed, part = requeue.bounds(policy, env)
    return [add(run_root, node, reason, task=task, job_id=job_id, pinned=policy.pinned_nodes(), fitting=fitting,
                needed=needed, partition=part) for node in nodes]


def lines(run_root: Path | str) -> list[str]:
    """What `status` and `watch` show: each node left out (or not) and why."""
    out = []
    for e in read(run_root):
        where = f"task {e.get('task', 0)}, job {e.get('job_id') or '?'}"
        if e.get("excluded"):
            out.append(f"left out: node {e['node']} ({where}: {e.get('reason', '')})")
        else:
            out.append(f"not left out: node {e['node']} ({where}: {e.get('reason', '')}): {e.get('why_not', '')}")
    return out
