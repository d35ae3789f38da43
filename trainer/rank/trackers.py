"""MLflow and W&B runs that continue across attempts: one tracker run per training run (per sweep task).

Rank 0 opens them (trainer.rank.reporting), the other ranks never import the libraries. The identity
of each tracker run is kept in RUN/trackers.json (the sweep task's folder): W&B's id is derived from
the run folder's path (a requeue, `--resume` or a new attempt finds the same one even before the file
exists), MLflow's is the id MLflow gave the first attempt. Each later attempt resumes that run.

Steps already logged are not logged again: a resumed attempt replays the steps between its checkpoint
and the stop, and their metrics are the ones already logged (exact resume), so they are *skipped*
(steps <= the last step an earlier attempt logged, recorded in trackers.json). That is the one
strategy both trackers support offline: MLflow keeps every value logged at a step (no rewind), and
W&B's `resume_from` rewind needs its server.

Parameters: the config (the job's fields, or your `config:`), the profile, the swept keys; tags (set
again by every attempt): the job ids so far, the attempt, the code snapshot's commit, the sweep (the
group: an MLflow tag `ddp_submit.sweep`, a W&B group).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRACKERS_FILE = "trackers.json"


@dataclass
class TrackerRun:
    """One tracker's run, for what `ctx.log` does not cover: `run_id`, and `run` (W&B's `wandb.Run`) or
    `client` (MLflow's `MlflowClient`, for `client.log_artifact(run_id, path)` and the like)."""

    name: str
    run_id: str
    run: Any = None
    client: Any = None


@dataclass
class TrackedRun:
    """What the trackers are told about the run (trainer.runners.functions makes it)."""

    name: str  # the job's name: the default MLflow experiment and W&B project
    params: dict[str, Any]
    attempt: int
    job_id: str
    profile: str = ""
    sweep: str = ""
    task: int = 0
    swept: tuple[str, ...] = ()
    commit: str = ""


class Trackers:
    """The configured trackers of one run, on rank 0: `log` feeds them, `close` ends this attempt."""

    def __init__(self, run_dir: Path, config: Any, info: TrackedRun) -> None:
        self.run_dir, self.path = run_dir, run_dir / TRACKERS_FILE
        self.state: dict[str, Any] = _read(self.path)
        self.logged_before = int(self.state.get("last_step", -1))  # by earlier attempts: skipped now
        self.state["job_ids"] = [*[j for j in self.state.get("job_ids", []) if j != info.job_id], info.job_id]
        self.state["attempts"] = info.attempt
        self.runs: dict[str, TrackerRun] = {}
        label = f"{run_dir.parent.name}/{run_dir.name}" if info.sweep else run_dir.name
        tags = {"ddp_submit.run_dir": str(run_dir), "ddp_submit.attempts": str(info.attempt),
                "ddp_submit.job_ids": ",".join(self.state["job_ids"]), "ddp_submit.profile": info.profile,
                "ddp_submit.commit": info.commit, "ddp_submit.sweep": info.sweep,
                "ddp_submit.swept": ",".join(info.swept)}
        params = {**_flat(info.params), "profile": info.profile}
        if config.mlflow:
            self.runs["mlflow"] = self._mlflow(config.mlflow, info, label, tags, params)
        if config.wandb:
            self.runs["wandb"] = self._wandb(config.wandb, info, label, tags, params)
        self._save()

    def _mlflow(self, config: Any, info: TrackedRun, label: str, tags: dict[str, str],
                params: dict[str, Any]) -> TrackerRun:
        # MLflow 3 refuses its file store unless asked: it is what works offline with no server to run.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.entities import Param, RunTag
        from mlflow.tracking import MlflowClient  # only rank 0 of a run with tracker.mlflow

        # The submitter fills the default in; `python -m trainer` leaves it to here: next to the run folder.
        uri = config.uri or (self.run_dir.resolve().parent / "mlruns").as_uri()
        client = MlflowClient(tracking_uri=uri)
        run_id = self.state.get("mlflow", {}).get("run_id")
        if run_id:
            client.update_run(run_id, status="RUNNING")
        else:
            experiment = _experiment(client, config.experiment or info.name)
            run_id = client.create_run(experiment, run_name=label, tags={k: v for k, v in tags.items() if v}).info.run_id
            # Params are written once (MLflow refuses a changed value); MLflow caps each at 6,000 characters.
            client.log_batch(run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()])
            self.state["mlflow"] = {"run_id": run_id, "uri": uri}
        client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items() if v])
        self._mlflow_client = client
        return TrackerRun("mlflow", run_id, client=client)

    def _wandb(self, config: Any, info: TrackedRun, label: str, tags: dict[str, str],
               params: dict[str, Any]) -> TrackerRun:
        import wandb  # only rank 0 of a run with tracker.wandb

        run_id = self.state.get("wandb", {}).get("id") or derived_id(self.run_dir)
        run = wandb.init(id=run_id, resume="allow", project=config.project or info.name, entity=config.entity or None,
                         mode=config.mode, dir=str(self.run_dir), name=label, group=info.sweep or None,
                         config=params, settings=_wandb_settings(wandb))
        run.config.update({k.replace("ddp_submit.", ""): v for k, v in tags.items()}, allow_val_change=True)
        self.state["wandb"] = {"id": run.id, "mode": config.mode}
        return TrackerRun("wandb", run.id, run=run)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        """Numbers at `step` to every tracker; a step an earlier attempt logged is skipped (see above)."""
        if step <= self.logged_before:
            return
        numbers = {k: float(v) for k, v in metrics.items()
                   if k not in ("step", "time") and isinstance(v, (int, float)) and not isinstance(v, bool)}
        if "mlflow" in self.runs:
            from mlflow.entities import Metric

            stamp = int(metrics.get("time", time.time()) * 1000)
            self._mlflow_client.log_batch(self.runs["mlflow"].run_id,
                                          metrics=[Metric(k, v, stamp, step) for k, v in numbers.items()])
        if "wandb" in self.runs:
            self.runs["wandb"].run.log(numbers, step=step)
        self.state["last_step"] = max(step, int(self.state.get("last_step", -1)))
        self._save()

    def close(self, outcome: str) -> None:
        """End this attempt: `finished`, `stopped` (a requeue follows: the run stays open) or `failed`.
        A second call does nothing."""
        if "mlflow" in self.runs:
            status = {"finished": "FINISHED", "failed": "FAILED"}.get(outcome, "KILLED")
            self._mlflow_client.set_terminated(self.runs["mlflow"].run_id, status=status)
        if "wandb" in self.runs:
            run = self.runs["wandb"].run
            if outcome == "stopped":
                run.mark_preempting()
            run.finish(exit_code=0 if outcome != "failed" else 1)
        self.runs.clear()

    def _save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=1) + "\n", encoding="utf-8")
        tmp.replace(self.path)  # atomic: a kill mid-write leaves the previous state


def _wandb_settings(wandb: Any) -> Any:
    """Quiet, and no system probes: the run's log already holds the console, and W&B's machine, git and
    stats probes cost rank 0 seconds per attempt (the other ranks wait at the next collective)."""
    try:
        return wandb.Settings(console="off", silent=True, x_disable_stats=True, x_disable_meta=True,
                              x_disable_machine_info=True, disable_git=True, save_code=False)
    except Exception:  # pydantic's ValidationError: a W&B release without these private settings
        return wandb.Settings(console="off", silent=True)


def derived_id(run_dir: Path) -> str:
    """A W&B run id from the run folder's path: the same on every attempt, different for every run and task."""
    return "ddp-" + hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:16]


def _experiment(client: Any, name: str) -> str:
    """The experiment's id, made if needed (a sweep's tasks may race to make it: the loser finds it)."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name)
    except Exception:  # mlflow.exceptions.MlflowException (RESOURCE_ALREADY_EXISTS): another task's
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _flat(mapping: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}: trackers take flat parameters."""
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
