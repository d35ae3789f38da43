"""Your function from a real Jupyter kernel, on the SLURM dev cluster (issue 30): a cell's function on 2
nodes; a cell's sweep of 3 points as one job array with its results in point order, its summary and
picture, and of 4 points as a pool of 2 workers; the shipped three-step pipeline (examples/pipeline.py, `%run` in the kernel) in order; and
`after=` with `notok`: a step that runs only when its parent failed, cancelled by SLURM when it
succeeded. Everything is submitted at once (one cell), then each test waits for its own; the kernel
imports no torch for any of it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from launcher.cluster.jobids import distinct_bases
from tests.helpers import ROOT
from tests.notebook import Kernel

pytestmark = pytest.mark.slurm

CELLS = ['''
from launcher.client import RunFailed, submit, sweep

def where(ctx, config):
    import socket
    return {"world": ctx.world_size, "host": socket.gethostname(), "scale": config["scale"] * 2}

def score(ctx, config):
    return {"score": config["lr"] * 10}

def fails(ctx):
    raise RuntimeError("the parent fails on purpose")

def cleanup(ctx, config):
    return {"cleaned_after": config["parent"]}
''', f'''
one = submit(where, profile="dev-cluster", config={{"scale": 21}})
points = sweep(score, profile="dev-cluster", grid={{"lr": [0.3, 0.1, 0.2]}}, sets=["profile.nodes=1",
               "job.target_metric=score"])
pooled = sweep(score, profile="dev-cluster", grid={{"lr": [0.3, 0.1, 0.2, 0.4]}}, sets=["profile.nodes=1",
               "job.target_metric=score", "profile.sweep_runner=pool", "profile.pool_workers=2"])
bad = submit(fails, profile="dev-cluster", sets=["profile.nodes=1"])
good = submit(score, profile="dev-cluster", config={{"lr": 0.5}}, sets=["profile.nodes=1"])
after_bad = submit(cleanup, profile="dev-cluster", config={{"parent": "bad"}}, after=[bad], when="notok",
                   sets=["profile.nodes=1"])
after_good = submit(cleanup, profile="dev-cluster", config={{"parent": "good"}}, after=[(good, "notok")],
                    sets=["profile.nodes=1"])
%run {ROOT / "examples" / "pipeline.py"} --profile dev-cluster
''']


@pytest.fixture(scope="module")
def kernel(slurm_cluster: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    kernel = Kernel(tmp_path_factory.mktemp("notebook"))
    try:
        for cell in CELLS:
            shown = kernel.run(cell)
            assert shown.error is None, shown.text
        yield kernel
    finally:
        kernel.run("for handle in (one, points, pooled, bad, good, after_bad, after_good): handle.cancel()")
        kernel.stop()


def events(run_dir: Path) -> dict[str, float]:
    """When each event first happened in a run (events.jsonl: started, finished, ...)."""
    found: dict[str, float] = {}
    for line in (run_dir / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        found.setdefault(event["event"], event["time"])
    return found


def test_a_cell_function_trains_on_two_dev_cluster_nodes(kernel: Kernel) -> None:
    result = kernel.value("one.result(timeout=900)")
    assert result["world"] == 2 and result["scale"] == 42
    # Each rank's log starts with where it ran (the attempt banner): two nodes.
    logs = kernel.value("[one.logs(rank=0), one.logs(rank=1)]")
    hosts = [re.search(r"rank (\d)/2 on (\S+),", log).groups() for log in logs]  # type: ignore[union-attr]
    assert hosts[0][0] == "0" and hosts[1][0] == "1" and hosts[0][1] != hosts[1][1], hosts


def test_a_cell_sweep_of_three_points_is_one_job_array_with_results_in_point_order(kernel: Kernel) -> None:
    results = kernel.value("[r['score'] for r in points.results(timeout=900)]")
    assert results == [3.0, 1.0, 2.0]  # the grid's order, not the score's
    run_dir = Path(kernel.value("str(points.run_dir)"))
    job_ids = json.loads((run_dir / "run.json").read_text())["job_ids"]
    assert len(job_ids) == 3 and len(distinct_bases(job_ids)) == 1, job_ids  # one sbatch: one array
    rows = kernel.value("[(row['task'], row['config.lr'], row['state']) for row in points.summary()]")
    assert rows == [("0", "0.3", "completed"), ("2", "0.2", "completed"), ("1", "0.1", "completed")]  # best first
    assert kernel.value("points.summary_png.stat().st_size > 1000 and points.states()") == ["completed"] * 3


def test_a_cell_sweep_run_as_a_pool_has_the_arrays_results_from_two_workers(kernel: Kernel) -> None:
    """A function defined in a cell (pickled by value) swept as a pool (`sweep_runner: pool`): two
    workers take the four points in turn; results, summary and states read as an array's do."""
    results = kernel.value("[r['score'] for r in pooled.results(timeout=900)]")
    assert results == [3.0, 1.0, 2.0, 4.0]  # the grid's order, as the array's
    run_dir = Path(kernel.value("str(pooled.run_dir)"))
    record = json.loads((run_dir / "run.json").read_text())
    assert record["runner"] == "pool" and len(record["job_ids"]) == 2, record  # two workers, not four tasks
    rows = kernel.value("[(row['task'], row['state']) for row in pooled.summary()]")
    assert rows == [("3", "completed"), ("0", "completed"), ("2", "completed"), ("1", "completed")]  # best first
    assert kernel.value("pooled.states()") == ["completed"] * 4


def test_the_shipped_three_step_pipeline_runs_in_order(kernel: Kernel) -> None:
    """examples/pipeline.py, `%run` in the kernel: prepare -> train (2 nodes) -> evaluate, which read the
    model the train step left in its run folder."""
    result = kernel.value("evaluated.result(timeout=900)")
    assert abs(result["slope"] - 3.0) < 0.1 and abs(result["intercept"] - 1.0) < 0.1
    folders = [Path(p) for p in kernel.value("[str(h.run_dir) for h in (prepared, trained, evaluated)]")]
    times = [events(folder) for folder in folders]
    assert times[0]["finished"] <= times[1]["started"] and times[1]["finished"] <= times[2]["started"]
    assert kernel.value("trained.result()['world_size']") == 2


def test_a_notok_step_runs_only_when_its_parent_failed(kernel: Kernel) -> None:
    shown = kernel.run("bad.result(timeout=900)")
    assert shown.error is not None and "rank 0 raised RuntimeError: the parent fails on purpose" in shown.error[1]
    assert kernel.value("after_bad.result(timeout=900)['cleaned_after']") == "bad"
    assert kernel.value("good.result(timeout=900)['score']") == 5.0
    # After a parent that succeeded, afternotok can never hold: SLURM cancels the step; it never started.
    said: Any = kernel.value('''
try:
    after_good.result(timeout=900)
    said = "ran"
except RunFailed as err:
    said = [str(err), after_good.status()[0]["start"]]
said''')
    assert said[0].endswith("cancelled: cancelled before it started, while waiting for the runs it depends on "
                            "(--after)") and said[1] is None, said
    assert not (Path(kernel.value("str(after_good.run_dir)")) / "events.jsonl").exists()
    assert kernel.value("import sys; sorted(m for m in ('torch', 'submitit') if m in sys.modules)") == []
