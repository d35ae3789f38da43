"""The judging half of `benchmarks/chaos.py`: each run's outcome against its unfaulted twin, and the checks that
follow every run (no process left, every checkpoint loads, no promised file lost), and the table."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import chaos_faults as cf
from trainer.rank import checkpoint
from trainer.rank.checkpoint import same_weights

ROOT = Path(__file__).resolve().parent.parent
SWEEP_TASKS = 3
Run = Any  # chaos.Run (imported the other way round)
WEIGHTS = {"builtin": "model_final.pt"}  # the others save weights.pt (tests/userpkg/tiny.py)
CAUSE_WORDS = {  # what FAILED must name for each injected fault
    "kill-9": ("SIGKILL", "killed", "signal 9"), "node-lost": ("NODE_FAIL", "node-failure", "lost"),
    "bad-node": ("ECC", "node-failure"), "requeue": ("slurm-requeue", "requeue"), "preempt": ("preemption",),
    "time-limit": ("timed-out", "timeout", "time limit"), "ctld-restart": ("slurmctld",),
    "truncated-ckpt": ("checksum", "truncated"),
}

def result_of(run: Run, base: Path) -> dict:
    lines = [l for l in (base / run.name / "stdout").read_text().splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def status_rows(run_dir: str) -> list[dict]:
    proc = subprocess.run([sys.executable, str(ROOT / "submit.py"), "status", run_dir, "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    return [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]


def task_dirs(run: Run) -> list[Path]:
    top = Path(run.run_dir)
    return [top / f"task-{i:04d}" for i in range(SWEEP_TASKS)] if run.kind == "sweep" else [top]


def effective(run: Run) -> float | None:
    """The run's effective training time ratio as `status --json` gives it per task (a sweep: their mean)."""
    ratios = [r["ettr"]["ratio"] for r in status_rows(run.run_dir) if isinstance(r.get("ettr"), dict)] \
        if run.run_dir else []
    return statistics.mean(ratios) if ratios else None


def judge(run: Run, twin: Run, base: Path) -> None:
    """Outcome: ok (COMPLETED, bitwise equal), ok-failed (FAILED naming an injected cause) or BAD."""
    result = result_of(run, base)
    run.state = result.get("state", "")
    run.ettr = effective(run)
    if run.why:
        run.outcome = "BAD"
        return
    if run.state == "COMPLETED":
        weights = WEIGHTS.get(run.kind, "weights.pt")
        differ = [str(t) for t, r in zip(task_dirs(run), task_dirs(twin))
                  if not (t / weights).exists() or not same_weights(t / weights, r / weights)]
        run.outcome, run.why = ("BAD", f"weights differ from the twin's: {differ}") if differ else ("ok", "")
        return
    if run.state == "FAILED":
        rows = status_rows(run.run_dir)
        said = json.dumps([result.get("error"), result.get("restart_causes")] +
                          [[r.get("error"), r.get("failure"), r.get("restart_causes")] for r in rows])
        named = [f["fault"] for f in run.faults if any(w.lower() in said.lower() for w in CAUSE_WORDS[f["fault"]])]
        run.outcome, run.why = ("ok-failed", f"cause named: {named[0]}") if named else \
            ("BAD", f"FAILED without an injected cause: {said[:300]}")
        return
    run.outcome, run.why = "BAD", f"ended {run.state or 'without a result'} (exit {run.rc})"


def leftovers(base: Path) -> list[str]:
    """Processes whose command line or environment mentions a run folder of this soak."""
    mark = str(base).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if mark in (entry / "cmdline").read_bytes() or mark in (entry / "environ").read_bytes():
                    found.append(f"{entry.name}: {(entry / 'cmdline').read_bytes()[:120]!r}")
            except OSError:
                pass
    return found


def bad_checkpoints(base: Path) -> list[str]:
    bad = [f"{p}: a temporary file left" for p in base.rglob(".ckpt-*.tmp-*")]
    for path in base.rglob("checkpoints/ckpt-*.pt"):
        try:
            checkpoint.read(path)
        except Exception as e:  # noqa: BLE001 - any unreadable checkpoint is a finding
            bad.append(f"{path}: {e}")
    return bad


def promised(run: Run) -> set[str]:
    """What a run folder holds (its top and its tasks' entries), less the names that carry a job id."""
    names = set()
    for folder in [Path(run.run_dir), *([p for p in task_dirs(run)] if run.kind == "sweep" else [])]:
        if folder.is_dir():
            names |= {str(p.relative_to(run.run_dir)) for p in folder.iterdir()}
    return {n for n in names if not n.endswith(".bad-node")}


def lost_files(run: Run, twin: Run) -> list[str]:
    if run.state != "COMPLETED":  # a failed run promises its record, not the results it never made
        must = {"run.json", "job.yaml", "profile.yaml", "logs", "code"} | (
            {"events.jsonl"} if run.kind != "sweep" else set())
        return sorted(must - promised(run))
    return sorted(promised(twin) - promised(run))


def _ratio(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    return f"{statistics.median(known):.0%}" if known else "-"


def table(runs: list[Run], twins: dict[str, Run]) -> str:
    """One row per fault kind; ETTR: the runs' effective training time ratio (median) beside their twins'."""
    rows = ["| fault | count | outcome(s) | extra wall time vs twin, median / max (s) | ETTR, median (twins) |",
            "|---|---|---|---|---|"]
    for fault in cf.FAULTS:
        hit = [r for r in runs if any(f["fault"] == fault and not f.get("missed") for f in r.faults)]
        missed = sum(f["fault"] == fault and bool(f.get("missed")) for r in runs for f in r.faults)
        note = f" ({missed} more drawn, not injected: the run ended first)" if missed else ""
        if not hit:
            rows.append(f"| {fault} | 0{note} | - | - | - |")
            continue
        outcomes = {o: sum(r.outcome == o for r in hit) for o in ("ok", "ok-failed", "BAD")}
        extra = [r.wall_s - twins[r.twin].wall_s for r in hit]
        rows.append(f"| {fault} | {len(hit)}{note} | {', '.join(f'{n} {o}' for o, n in outcomes.items() if n)} | "
                    f"{statistics.median(extra):.0f} / {max(extra):.0f} | "
                    f"{_ratio([r.ettr for r in hit])} ({_ratio([twins[r.twin].ettr for r in hit])}) |")
    return "\n".join(rows)


def judge_twin(twin: Run, base: Path) -> None:
    result = result_of(twin, base)
    twin.state = result.get("state", "")
    twin.ettr = effective(twin)
    twin.outcome = "ok" if twin.state == "COMPLETED" and not twin.why else "BAD"
    twin.why = twin.why or ("" if twin.outcome == "ok" else f"the unfaulted twin ended {twin.state or 'without a result'}")
