"""Running the real command line in a subprocess, as a user would."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SUBMIT = str(ROOT / "submit.py")


def sibling_venv(folder: Path, pip: bool = True) -> Path:
    """A new virtual environment at `folder` that sees the packages of the interpreter running the tests (torch,
    submitit: 2 GB not installed again), whether that interpreter is the machine's own or a virtual environment
    itself. `--system-site-packages` reaches only the base interpreter's packages: from a venv (a user's, or
    Debian's python3 made into one as PEP 668 asks) it would miss everything the suite installed, so this
    interpreter's own site-packages are added by a .pth file. Its Python: `folder/bin/python`."""
    import site
    import sysconfig

    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", *([] if pip else ["--without-pip"]),
                    str(folder)], check=True, timeout=300)
    if sys.prefix != sys.base_prefix:  # this interpreter is a venv's: its packages are not the system's
        purelib = subprocess.run([str(folder / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path("
                                  "'purelib'))"], capture_output=True, text=True, check=True).stdout.strip()
        mine = dict.fromkeys([*site.getsitepackages(), sysconfig.get_path("purelib")])
        Path(purelib, "_outer_venv.pth").write_text("".join(f"{p}\n" for p in mine))
    return folder


def run_submit(args: list[str], cwd: Path, timeout: float = 800, env: dict[str, str] | None = None,
               stdin: str | None = None, unset: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """`python submit.py ARGS` with `cwd` as the working directory (its runs/ is where runs go), this
    process's environment plus `env`, less the variables named in `unset`. `timeout` is a ceiling for a
    hung run, under pytest's own 900 s: the README's default job, 20 s alone, took 288 s beside eight
    other heavy test files on a loaded 2-core machine."""
    full_env = {k: v for k, v in {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}.items() if k not in unset}
    return subprocess.run([sys.executable, SUBMIT, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full_env, input=stdin if stdin is not None else "")


def the_run(runs: Path) -> Path:
    """The one run folder in a runs folder (beside it, the runs folder's own index of signatures, `.signatures`)."""
    (run_dir,) = [p for p in runs.iterdir() if not p.name.startswith(".")]
    return run_dir


def run_submits(arg_lists: list[list[str]], cwd: Path, timeout: float = 800,
                env: dict[str, str] | None = None, rerun: bool = True) -> list[subprocess.CompletedProcess[str]]:
    """run_submit of each ARGS, all at once, in one `cwd` (each run gets its own folder in runs/). A test that
    compares a run with its uninterrupted twin starts both together: a lone 2-rank run leaves a core idle
    for seconds at its start, at each requeue and at its end, which the other run then uses, and the test
    takes the longer of the two runs, not their sum. Twins have one signature (`interrupt_at` is not part of
    it), so each is a new run (`--rerun`) unless `rerun=False`."""
    with ThreadPoolExecutor(len(arg_lists)) as pool:
        return list(pool.map(lambda args: run_submit([*args, *(["--rerun"] if rerun else [])], cwd, timeout, env),
                             arg_lists))


def submit_job(folder: Path, job_yaml: str, timeout: float = 800) -> subprocess.CompletedProcess[str]:
    """`python submit.py --job job.yaml --json` in `folder`, `job_yaml` written there as job.yaml (its runs go
    to folder/runs)."""
    (folder / "job.yaml").write_text(job_yaml)
    return run_submit(["--job", "job.yaml", "--json"], cwd=folder, timeout=timeout)


def last_json(stdout: str) -> dict[str, Any]:
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert lines, "no output"
    return json.loads(lines[-1])


def wait_until(condition: Callable[[], Any], timeout: float, what: str, poll: float = 0.5) -> Any:
    """Poll `condition` until it returns something truthy (returned), or fail the test."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@contextmanager
def killed_at_exit(proc: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """`proc` (a submitter started in the background) killed on the way out, whatever happened inside:
    a test that fails while it waits leaves no submitter behind."""
    try:
        yield proc
    finally:
        proc.kill()


def ended_after_one_requeue(proc: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    """The `--json` result of `proc` once it has ended (within `timeout`), asserted to have completed
    after exactly one requeue, for a preemption."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-3000:] + err[-3000:]
    result = last_json(out)
    assert result["restarts"] == 1 and result["restart_causes"] == {"preemption": 1}, result
    return result


def preempt(run_dir: Path) -> None:
    """Send SLURM's preemption warning (USR2) to every process of the run's job, as a preemption does."""
    from trainer.rank import events

    job_id = next(e["job_id"] for e in events.read(run_dir) if e["event"] == "started")
    subprocess.run(["scancel", "--signal=USR2", job_id], check=True, timeout=30)


def rank_results(run_dir: Path, job_id: str = "*") -> list[Any]:
    """What each rank's task function returned, from submitit's per-task result pickles (rank order)."""
    paths = (run_dir / "logs").glob(f"{job_id}/{job_id}_*_result.pkl")
    results = []
    for path in sorted(paths, key=lambda p: (p.parent.name, int(p.name.split("_")[-2]))):
        with open(path, "rb") as fh:
            status, value = pickle.load(fh)
        assert status == "success", value
        results.append(value)
    return results


def rank_pid(run_dir: Path, rank: int) -> int | None:
    """The pid of `rank`'s current attempt (a task's pid), from the banner it writes at the top of its log."""
    for log in (run_dir / "logs").glob(f"*/*_{rank}_log.out"):
        banners = [line for line in log.read_text().splitlines() if "attempt started" in line]
        if banners:
            return int(banners[-1].split(" pid ")[1].split()[0])
    return None


# What the recipe's trackers get as parameters: its job keys less these (trainer.runners.functions.tracker_info);
# global_batch_size is derived, written to job.yaml for the reader only.
NOT_PARAMS = ("config", "args", "extra", "code_dir", "tracker", "global_batch_size")


def recipe_params(run_dir: Path, profile: str) -> dict[str, str]:
    """The MLflow parameters a built-in job's run should have: its resolved job.yaml's keys, and the profile."""
    import yaml

    job = yaml.safe_load((run_dir / "job.yaml").read_text())
    return {**{k: str(v) for k, v in job.items() if k not in NOT_PARAMS}, "profile": profile}


def mlflow_runs(store: Path, experiment: str) -> tuple[Any, list[Any]]:
    """MLflow's own client on a file store, and the experiment's runs."""
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store.as_uri())
    return client, client.search_runs([client.get_experiment_by_name(experiment).experiment_id])


def assert_one_mlflow_run(run_dir: Path, experiment: str, params: dict[str, str], job_ids: str,
                          attempts: int) -> None:
    """The experiment in the file store beside the run folders holds exactly one run, named after the run
    folder, and it is the run's (assert_mlflow_run)."""
    client, runs = mlflow_runs(run_dir.parent / "mlruns", experiment)
    assert len(runs) == 1, [r.info.run_name for r in runs]
    assert runs[0].info.run_name == run_dir.name
    assert_mlflow_run(client, runs[0], run_dir, params, job_ids, attempts)


def assert_mlflow_run(client: Any, run: Any, run_dir: Path, params: dict[str, str], job_ids: str,
                      attempts: int) -> None:
    """Read back with MLflow's own client: `run` finished; each metric of run_dir's metrics.jsonl is there at
    each of its steps exactly once with the value metrics.jsonl has (no step logged twice by a resumed
    attempt, none lost), nothing else; params = `params`; tags with the job ids and the attempt count."""
    assert run.info.status == "FINISHED"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    expected: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        for key, value in row.items():
            if key not in ("step", "time") and isinstance(value, (int, float)) and not isinstance(value, bool):
                expected.setdefault(key, []).append((row["step"], float(value)))
    assert set(run.data.metrics) == set(expected), (sorted(run.data.metrics), sorted(expected))
    for key, points in expected.items():
        history = client.get_metric_history(run.info.run_id, key)
        assert sorted((m.step, m.value) for m in history) == points, key
    assert run.data.params == params
    assert run.data.tags["ddp_submit.job_ids"] == job_ids and run.data.tags["ddp_submit.attempts"] == str(attempts)
    assert run.data.tags["ddp_submit.run_dir"] == str(run_dir)
