"""`tracker:` (MLflow file store, W&B offline): one tracker run per training run across attempts, steps
logged once, the run's params and tags, a sweep as one group; bad tracker input refused before queueing.

The end-to-end requeue (a user entrypoint stopped twice on local ranks, read back with MLflow's own client)
shares its run with tests/test_user_code.py's exact-resume test; here: the pieces, in-process and fast.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from launcher.config.profile import Profile
from launcher.config.resolve import point
from launcher.request.submission import build
from tests.helpers import run_submit
from trainer.config.job import JobConfig
from trainer.config.schema import build as build_config
from trainer.config.tracker_key import MlflowConfig, TrackerConfig, WandbConfig
from trainer.rank.trackers import TrackedRun, Trackers, derived_id

os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
os.environ.setdefault("WANDB_SILENT", "true")


def mlflow_runs(uri: str, experiment: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    return client, client.search_runs([client.get_experiment_by_name(experiment).experiment_id])


def attempt(run_dir: Path, config: TrackerConfig, number: int, steps: range, outcome: str, **info) -> dict:
    trackers = Trackers(run_dir, config, TrackedRun("tracked", {"lr": 0.1, "model": {"width": 8}}, number,
                                                 f"job{number}", "local", commit="abc123", **info))
    ids = {name: run.run_id for name, run in trackers.runs.items()}
    for step in steps:
        trackers.log({"step": step, "loss": 1.0 / step, "note": "text is not a metric", "time": 1.0}, step)
    trackers.close(outcome)
    return ids


def test_two_attempts_are_one_mlflow_run_and_one_wandb_id_with_each_step_once(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "20261201-000000-tracked-local"
    run_dir.mkdir(parents=True)
    uri = (tmp_path / "runs" / "mlruns").as_uri()
    config = TrackerConfig(mlflow=MlflowConfig(uri=uri), wandb=WandbConfig(project="tracked", mode="offline"))
    # The second attempt resumes from step 3's checkpoint and replays 4-5, which the first one logged.
    first = attempt(run_dir, config, 1, range(1, 6), "stopped")
    second = attempt(run_dir, config, 2, range(4, 9), "finished")
    assert first == second and second["wandb"] == derived_id(run_dir)
    client, runs = mlflow_runs(uri, "tracked")
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED" and run.info.run_name == run_dir.name
    history = client.get_metric_history(run.info.run_id, "loss")
    assert sorted(m.step for m in history) == list(range(1, 9))
    assert {m.step: m.value for m in history}[4] == pytest.approx(0.25)
    assert run.data.params == {"lr": "0.1", "model.width": "8", "profile": "local"}
    tags = run.data.tags
    assert tags["ddp_submit.job_ids"] == "job1,job2" and tags["ddp_submit.attempts"] == "2"
    assert tags["ddp_submit.commit"] == "abc123"
    # W&B offline: every attempt's files carry the same run id; nothing else was made. The run id is read from
    # each attempt's log file, not the folder's name: two attempts in the same second get a "-1" suffix there.
    offline = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 2, offline
    assert all([f.name for f in d.glob("run-*.wandb")] == [f"run-{derived_id(run_dir)}.wandb"] for d in offline), [
        sorted(f.name for f in d.iterdir()) for d in offline]


def test_a_sweep_is_one_group_with_the_swept_key_as_a_parameter(tmp_path: Path) -> None:
    """The submission names the sweep and each task's swept keys; the trackers group on them."""
    tracker = build_config(TrackerConfig, {"mlflow": {}}, "job.yaml")
    sweep_dir = tmp_path / "runs" / "20261201-000000-swept-local"
    profile = Profile(name="local", runs_dir=str(sweep_dir.parent))
    points = [point(profile, i, JobConfig(name="swept", lr=lr, tracker=tracker), {"lr": lr})
              for i, lr in enumerate((0.1, 0.2, 0.4))]
    sub = build(profile, points, sweep_dir, is_sweep=True)
    uri = sub.tasks[0].settings.tracker.mlflow.uri
    assert uri == (tmp_path / "runs" / "mlruns").as_uri()  # the default: next to the run folders
    for task in sub.tasks:
        s = task.settings
        Path(s.run_dir).mkdir(parents=True)
        Trackers(Path(s.run_dir), s.tracker, TrackedRun("swept", {"lr": task.job.lr}, 1, "7_" + str(s.task), s.profile,
                                                      s.sweep, s.task, tuple(s.swept))).close("finished")
    _, runs = mlflow_runs(uri, "swept")
    assert len(runs) == 3
    assert {r.data.tags["ddp_submit.sweep"] for r in runs} == {sweep_dir.name}
    assert {r.data.tags["ddp_submit.swept"] for r in runs} == {"lr"}
    assert sorted(r.data.params["lr"] for r in runs) == ["0.1", "0.2", "0.4"]
    assert sorted(r.info.run_name for r in runs) == [f"{sweep_dir.name}/task-000{i}" for i in range(3)]


HIDE = "import sys\nsys.modules['wandb'] = None  # as if not installed: importlib finds no spec\n"


@pytest.mark.parametrize("job,expected", [
    ("tracker: {comet: {}}\n", ["j.yaml", "unknown key 'tracker.comet'", "mlflow", "wandb"]),
    ("tracker: {mlflow: {uri: 'mlruns'}}\n", ["j.yaml", "'tracker.mlflow.uri'", "'mlruns'", "an absolute path"]),
    ("tracker: {wandb: {mode: offline}}\n", ["j.yaml", "'tracker.wandb'", "pip install 'ddp-submit[wandb]'"]),
    # A name the tracker puts in its files and URLs: one line, checked where the job is loaded.
    ('tracker: {mlflow: {experiment: "digits\\nrm -rf"}}\n', ["j.yaml", "'tracker.mlflow.experiment'",
                                                            "without control characters", "\\n"]),
    ('tracker: {wandb: {project: "a\\x1b[2Jb", mode: offline}}\n', ["j.yaml", "'tracker.wandb.project'",
                                                                  "without control characters"]),
], ids=["unknown tracker", "bad uri", "missing library", "newline in an experiment", "escape in a project"])
def test_bad_tracker_input_is_one_error_line_and_nothing_queued(tmp_path: Path, job: str, expected: list[str]) -> None:
    (tmp_path / "j.yaml").write_text("extends: digits\n" + job)
    (tmp_path / "hide" / "sitecustomize.py").parent.mkdir()
    (tmp_path / "hide" / "sitecustomize.py").write_text(HIDE)
    root = Path(__file__).resolve().parents[1]
    proc = run_submit(["--job", str(tmp_path / "j.yaml")], cwd=tmp_path, timeout=120,
                      env={"PYTHONPATH": f"{root}{os.pathsep}{tmp_path / 'hide'}"})
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    assert not (tmp_path / "runs").exists()
