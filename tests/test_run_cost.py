"""What a run cost: sacct's TotalCPU and MaxRSS spellings, the seff arithmetic, and the one line per
profile key a run used under half of. (The dev-cluster check that `status --json` holds what sacct
reports is in tests/test_launcher_layout.py, on the finished run that test already makes.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.cluster.slurm.accounting import table
from launcher.cluster.slurm.usage import cpu_seconds, memory_bytes, usage_from_rows
from launcher.rundir.cost import advice, cost_cell, task_cost


@pytest.mark.parametrize("text, seconds", [
    ("00:07.036", 7.036), ("12:34", 754.0), ("01:02:03", 3723.0), ("1-02:03:04", 93784.0),
    ("2-00:00:01.500", 172801.5), ("", None), ("Unknown", None),
])
def test_total_cpu_in_every_sacct_spelling(text: str, seconds: float | None) -> None:
    assert cpu_seconds(text) == (pytest.approx(seconds) if seconds is not None else None)


@pytest.mark.parametrize("text, size", [
    ("12448K", 12448 * 1024), ("1.5G", 3 * 2**29), ("700M", 700 * 2**20), ("0", 0), ("", None),
])
def test_max_rss_in_every_unit(text: str, size: int | None) -> None:
    assert memory_bytes(text) == size


# What `sacct -D -P --format=JobID,State,ElapsedRaw,TotalCPU,AllocCPUS,NNodes,MaxRSS` printed for a
# 2-node job requeued once (its first life ran 20 s) and an array task, on the dev cluster.
SACCT = """JobID|State|ElapsedRaw|TotalCPU|AllocCPUS|NNodes|MaxRSS
258|REQUEUED|20|00:10.000|2|2|
258.0|CANCELLED|20|00:10.000|2|2|900000K
258|COMPLETED|13|00:15.880|2|2|
258.batch|COMPLETED|13|00:00.018|1|1|12524K
258.0|COMPLETED|13|00:15.861|2|2|701844K
260_1|COMPLETED|100|00:30.000|4|1|
260_1.0|COMPLETED|100|00:30.000|4|1|100M
"""


def test_usage_sums_the_lives_of_a_requeued_job_and_keeps_its_peak() -> None:
    usage = usage_from_rows(table(SACCT))
    job = usage["258"]
    assert job.elapsed_s == 33 and job.total_cpu_s == pytest.approx(25.88) and job.alloc_cpus == 2
    assert job.max_rss_bytes == 900000 * 1024  # the first life's step peaked higher
    assert job.cpu_efficiency == pytest.approx(25.88 / (33 * 2))
    assert job.node_hours == pytest.approx(33 * 2 / 3600)
    assert usage["260_1"].cpu_efficiency == pytest.approx(30 / 400)


def test_a_wasteful_run_is_told_which_profile_keys_to_lower() -> None:
    profile = {"cpus_per_task": 4, "mem_per_task": "4G", "time": "1:00:00"}
    cost = task_cost(usage_from_rows(table(SACCT))["260_1"], profile)
    assert cost["mem_requested_mb"] == 4096 and cost["max_rss_mb"] == 100.0
    assert cost_cell(cost) == "cpu 8%, mem 100/4096 MB, 0.0278 node-h"
    lines = advice({1: cost}, profile)
    assert [line.split(": lower ")[1].split()[0] for line in lines] == ["cpus_per_task", "mem_per_task", "time"]
    assert "8% of its CPUs" in lines[0] and "100 MB of 4096 MB" in lines[1] and "100 s of its 60 min" in lines[2]


def test_in_the_torchrun_shape_a_node_tasks_memory_is_measured_against_the_nodes_request() -> None:
    """One SLURM task per node runs torchrun and its ranks: sacct's MaxRSS is theirs together, so it is
    compared with the node's request (mem_per_task x tasks_per_node), and status says so."""
    # Job 258's step peaked at 900000K (879 MB): over half of one rank's 1G, under half of the node's 2 x 1G.
    tasks = {"cpus_per_task": 1, "mem_per_task": "1G", "time": 2, "tasks_per_node": 2}
    torchrun = {**tasks, "launch": "torchrun"}
    usage = usage_from_rows(table(SACCT))["258"]
    assert task_cost(usage, tasks)["mem_requested_mb"] == 1024 and task_cost(usage, tasks)["mem_per"] == "task"
    cost = task_cost(usage, torchrun)
    assert cost["mem_requested_mb"] == 2048 and cost["mem_per"] == "node"
    assert cost_cell(cost) == "cpu 39%, mem 879/2048 MB per node, 0.0183 node-h"
    assert not any("mem_per_task" in line for line in advice({0: task_cost(usage, tasks)}, tasks))
    lines = [line for line in advice({0: cost}, torchrun) if "mem_per_task" in line]
    assert lines == ["the run's peak memory per node (its torchrun and 2 ranks) was 879 MB of 2048 MB = "
                     "mem_per_task x 2: lower mem_per_task (now 1G)"]


def test_a_run_that_used_what_it_asked_for_gets_no_advice() -> None:
    profile = {"cpus_per_task": 1, "mem_per_task": "1G", "time": 2}
    usage = usage_from_rows(table("JobID|State|ElapsedRaw|TotalCPU|AllocCPUS|NNodes|MaxRSS\n"
                                  "9|COMPLETED|100|01:30.000|1|1|\n9.0|COMPLETED|100|01:30.000|1|1|800M\n"))
    assert advice({0: task_cost(usage["9"], profile)}, profile) == []
    # One task that used its CPUs well is enough: the request is right for that point of a sweep.
    idle = task_cost(usage_from_rows(table(SACCT))["260_1"], profile)
    assert not any("cpus_per_task" in line for line in advice({0: idle, 1: task_cost(usage["9"], profile)}, profile))
    # Nor is one CPU per task, however idle, something to lower.
    assert not any("cpus_per_task" in line for line in advice({0: idle}, {**profile, "cpus_per_task": 1}))


def test_a_sweeps_summary_carries_what_each_task_cost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from launcher.rundir import results
    from tests.test_record_properties import make_run

    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(results.plots, "write_sweep_plot", lambda *a: None)  # the picture is not the point here
    run = tmp_path / "20261201-100000-sweep"
    make_run(run)
    cost = task_cost(usage_from_rows(table(SACCT))["260_1"], {"mem_per_task": "4G"})
    results.collect(run, costs={0: cost}, max_curves=0)
    header, *rows = (run / "summary.csv").read_text().splitlines()
    assert header.endswith(",elapsed_s,cpu_efficiency,max_rss_mb,mem_requested_mb,node_hours")
    task0 = next(r for r in rows if r.startswith("0,"))
    assert task0.endswith(",100.0,0.075,100.0,4096,0.027778"), task0
    assert "| cpu_efficiency |" in (run / "summary.md").read_text()


def test_accounting_fields_still_empty_show_as_unknown_never_a_crash() -> None:
    """A job of a few seconds: sacct may not have (or never get) its steps' MaxRSS, nor a TotalCPU; the
    cost shows "-" for them and gives no advice it cannot back, instead of failing."""
    profile = {"cpus_per_task": 2, "mem_per_task": "768M", "time": 10}
    usage = usage_from_rows(table("JobID|State|ElapsedRaw|TotalCPU|AllocCPUS|NNodes|MaxRSS\n"
                                  "9|COMPLETED|5||2|1|\n9.batch|COMPLETED|5||1|1|\n9.0|COMPLETED|4||2|1|\n"))
    cost = task_cost(usage["9"], profile)
    assert cost["max_rss_mb"] is None and cost["elapsed_s"] == 5 and cost["cpu_efficiency"] is None
    assert cost_cell(cost) == "cpu -, mem -/768 MB, 0.0014 node-h"
    assert [line.split(": lower ")[1].split()[0] for line in advice({0: cost}, profile)] == ["time"]
    nothing = task_cost(usage_from_rows(table("JobID|State|ElapsedRaw|TotalCPU|AllocCPUS|NNodes|MaxRSS\n"
                                              "9|PENDING|||||\n"))["9"], profile)
    assert cost_cell(nothing) == "cpu -, mem -/768 MB, 0.0000 node-h" and advice({0: nothing}, profile) == []
