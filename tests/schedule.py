"""The order tests/run_all.sh's two workers take the suite's work units in, from recorded durations.

A work unit is what one worker takes whole (--dist loadgroup): a test file, whose module fixtures and runs
stay on one worker, or the one group of what mostly waits on SLURM (below). Which units are which is said
here by what they do; how long each takes is never written by hand: tests/durations.json holds what a pass
measured, and `bash tests/run_all.sh --record-durations` measures it again (docs/development.md).
"""

from __future__ import annotations

import fcntl
import json
import os
import statistics
from collections.abc import Callable
from pathlib import Path

# (DDP_TEST_DURATIONS: another file, for tests/test_suite_order.py's recording test.)
DURATIONS = Path(os.environ.get("DDP_TEST_DURATIONS") or Path(__file__).with_name("durations.json"))

# Files whose time is mostly waiting on SLURM (requeue delays, a node declared lost, a controller that does
# not answer, a sweep's tasks in turn): one unit, first. One worker takes them one after another, so that
# two of them never wait side by side while the CPUs idle (a quiet pass at ada4c2f: 14% of the CPU time
# idle, up to 44% in a minute when two of these ran together); the other worker fills their waits with the
# CPU-bound files.
SLURM_WAITS = (
    "test_self_healing.py",
    "test_requeue_slurm.py",
    "test_sweep.py",
    "test_pool.py",
    "test_user_code_slurm.py",
    "test_node_failure.py",
    "test_slurm_submit.py",
    "test_notebook_slurm.py",
    "test_controller_unreachable.py",
)
# And single tests of other files that mostly wait on SLURM (none uses its file's module fixtures, which
# would otherwise be set up on both workers): in the same group.
SLURM_WAIT_TESTS = (
    "test_script_jobs.py::test_init_script_on_two_dev_cluster_nodes_preempted_requeues_and_resumes_bitwise_identical",
    "test_script_jobs.py::test_plain_script_on_two_dev_cluster_nodes_preempted_is_requeued_and_completes",
    "test_snapshot.py::test_dev_cluster_job_edited_while_pending_and_requeued_runs_the_submitted_code",
)
WAITS_GROUP = "slurm-waits"
# Left after the others whatever their length: test_clean_exit.py's 8 jobs at once start 16 ranks, which
# starved the files beside it at the start, a time-limit test among them.
LAST = ("test_clean_exit.py",)
# Files that never reach SLURM, run by tests/run_all.sh beside the controller_outage tests (which stop
# slurmctld for a minute and so run after every other SLURM test) instead of in the main pass: that
# minute is then not a minute of an idle machine.
BESIDE_OUTAGE = (
    "test_broken_run_folders.py",
    "test_progress.py",
    "test_training_semantics.py",
)
# The files whose tests carry the controller_outage marker (tests/test_suite_order.py checks it).
OUTAGE_FILES = ("test_controller_restart.py",)


def unit(file: str, test: str) -> str:
    """The work unit a test belongs to, as tests/durations.json names it."""
    return f"{file}::{test}" if f"{file}::{test}" in SLURM_WAIT_TESTS else file


def unit_of(nodeid: str) -> str:
    """The work unit of a test report's node id (under --dist loadgroup it ends in "@" and the test's
    group: tests/test_x.py::test_y[case]@slurm-waits)."""
    file, _, test = nodeid.partition("::")
    return unit(Path(file).name, test.partition("@")[0].partition("[")[0])


def in_waits_group(name: str) -> bool:
    return name in SLURM_WAITS or name in SLURM_WAIT_TESTS


def recorded() -> dict[str, float]:
    """Seconds per work unit, as the last recording measured them ({}: none yet)."""
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text())["seconds"].items()}
    except FileNotFoundError:
        return {}


def order_key(seconds: dict[str, float]) -> Callable[[str], tuple[int, float, str]]:
    """Sort key of a work unit: the waits group first, then the longest units first (with
    --no-loadscope-reorder: xdist would otherwise start the units with the most tests first, the quick
    unit tests, and leave the few-test files of minutes each for the end, one worker idle), LAST last.
    A unit not recorded yet counts as the median unit, so a new file is neither first nor forgotten."""
    typical = statistics.median(seconds.values()) if seconds else 0.0

    def key(name: str) -> tuple[int, float, str]:
        stage = 0 if in_waits_group(name) else 2 if name in LAST else 1
        return stage, -seconds.get(name, typical), name
    return key


def write(seconds: dict[str, float]) -> None:
    """Merge newly measured units into tests/durations.json (a partial run updates what it ran). Under a
    lock: run_all.sh's outage pytest and the one beside it end at about the same time."""
    with DURATIONS.with_suffix(".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        merged = {**recorded(), **{name: round(value, 1) for name, value in seconds.items()}}
        DURATIONS.write_text(json.dumps({
            "how": "seconds per work unit (setup, call and teardown summed) from `bash tests/run_all.sh "
                   "--record-durations`; tests/schedule.py orders the suite by them",
            "seconds": dict(sorted(merged.items(), key=lambda kv: (-kv[1], kv[0])))}, indent=1) + "\n")
