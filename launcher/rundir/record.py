"""Run folders: one per submission, holding the resolved config, logs, metrics and checkpoints.

    runs/20261129-184500-digits-local/
        run.json        what was submitted (profile, job, executor parameters, job ids, command)
        profile.yaml    the resolved profile
        job.yaml        the resolved job (batch size per rank and global)
        logs/<job id>/  submitit's logs, one stdout/stderr pair per task (rank)
        metrics.jsonl   one line per epoch, written by rank 0
        checkpoints/    ckpt-<step>.pt, the newest K
        model_final.pt  the final weights (a state_dict)
        result.json     the final metrics, once the run has finished
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

RUN_FILE = "run.json"


def new_run_dir(runs_root: Path, job_name: str, profile_name: str) -> Path:
    """A fresh, not yet existing folder name (created only when the run is submitted)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = runs_root.expanduser().resolve() / f"{stamp}-{_safe(job_name)}-{_safe(profile_name)}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "run"


def create(run_dir: Path, description: dict[str, Any], argv: list[str]) -> None:
    import yaml

    run_dir.mkdir(parents=True, exist_ok=False)
    (run_dir / "profile.yaml").write_text(yaml.safe_dump(description["profile"], sort_keys=False))
    job = dict(description["job"])
    job["global_batch_size"] = description["global_batch_size"]  # shown, not read back
    (run_dir / "job.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    record = {**description, "created": time.time(), "argv": [sys.executable, *argv], "job_ids": []}
    write_record(run_dir, record)


def read_record(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / RUN_FILE).read_text())


def write_record(run_dir: Path, record: dict[str, Any]) -> None:
    tmp = run_dir / f".{RUN_FILE}.tmp"
    tmp.write_text(json.dumps(record, indent=2, default=str))
    tmp.replace(run_dir / RUN_FILE)


def update_record(run_dir: Path, **fields: Any) -> dict[str, Any]:
    record = read_record(run_dir)
    record.update(fields)
    write_record(run_dir, record)
    return record


def write_result(run_dir: Path, result: dict[str, Any]) -> None:
    tmp = run_dir / ".result.json.tmp"
    tmp.write_text(json.dumps(result, indent=2, default=str))
    tmp.replace(run_dir / "result.json")
