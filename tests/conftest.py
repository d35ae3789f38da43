"""Shared pytest fixtures: access to the SLURM dev cluster (launcher/devcluster)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher import devcluster as dev_cluster


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slurm: needs the SLURM dev cluster (python -m launcher.devcluster up)"
    )
    config.addinivalue_line(
        "markers", "controller_outage: stops the dev cluster's slurmctld; tests/run_all.sh runs these last, serially"
    )
    config.addinivalue_line(
        "markers", "beside_outage: never reaches SLURM; tests/run_all.sh runs these beside the controller_outage tests"
    )
    config.addinivalue_line(
        "markers", "slurm_core: the SLURM-facing core (SLURM_CORE); tests/run_all.sh runs it again on the second release"
    )


# tests/run_all.sh runs two workers (--dist loadgroup): each takes a whole work unit at a time (a file,
# whose module fixtures and runs stay on one worker, or the group below), the next one in this order.
#
# SLURM_WAITS: files whose time is mostly waiting on SLURM (requeue delays, a node declared lost, a
# controller that does not answer, a sweep's tasks in turn), one unit, first. One worker takes them
# one after another, so that two of them never wait side by side while the CPUs idle (a quiet pass
# at ada4c2f: 14% of the CPU time idle, up to 44% in a minute when two of these ran together); the
# other worker fills their waits with the CPU-bound files. Seconds: CI's --durations on a quiet
# 2-core machine, fixtures and calls summed.
SLURM_WAITS = (
    "test_self_healing.py",  # 240
    "test_requeue_slurm.py",  # 185
    "test_sweep.py",  # 155
    "test_pool.py",  # 145
    "test_user_code_slurm.py",  # 135
    "test_node_failure.py",  # 130
    "test_slurm_submit.py",  # 125
    "test_notebook_slurm.py",  # 75
    "test_controller_unreachable.py",  # 45
)
# And single tests of other files that mostly wait on SLURM (none uses its file's module fixtures, which
# would otherwise be set up on both workers): in the same group, after those files.
SLURM_WAIT_TESTS = (
    "test_script_jobs.py::test_init_script_on_two_dev_cluster_nodes_preempted_requeues_and_resumes_bitwise_identical",
    "test_script_jobs.py::test_plain_script_on_two_dev_cluster_nodes_preempted_is_requeued_and_completes",
    "test_snapshot.py::test_dev_cluster_job_edited_while_pending_and_requeued_runs_the_submitted_code",
)
WAITS_GROUP = "slurm-waits"
# Then the files that take longest, the slowest first (--no-loadscope-reorder: xdist would otherwise
# start the units with the most tests first, the quick unit tests, and leave these one-to-three-test
# files of minutes each for the end, one worker idle).
HEAVY_FIRST = (
    "test_torchrun_launch.py",  # 185 (its fixture: 8 SLURM jobs at once, while the cluster is free)
    "test_script_jobs.py",  # 400
    "test_exact_resume.py",  # 135
    "test_notebook.py",  # 130 (one kernel, its runs side by side)
    "test_failfast.py",  # 120 (its local sweep: 16 s alone, 240 s beside the torchrun sweep)
    "test_snapshot.py",  # 120
    "test_user_code.py",  # 115
    "test_local_runs.py",  # 50
    "test_user_api.py",  # 70
    "test_thirdparty.py",  # 60
    "test_launcher_layout.py",  # 45
    "test_private_run_folders.py",  # 40
)
# Files that never reach SLURM, run by tests/run_all.sh beside the controller_outage tests (which stop
# slurmctld for a minute and so run after every other SLURM test) instead of in the main pass: that
# minute is then not a minute of an idle machine. About 90 s and 110 CPU s of local runs (its run takes ~30 CPU s).
BESIDE_OUTAGE = (
    "test_broken_run_folders.py",
    "test_progress.py",
    "test_training_semantics.py",
)
CLUSTER_FIXTURES = ("slurm_cluster", "ssh_login")
# The SLURM-facing core: what tests/run_all.sh runs again on the release the whole suite does not run on (Debian
# 12's 22.05, the oldest supported; the whole suite runs on 24.11). A file, or one test of a file. What each
# covers: the cluster itself and the release's reading (and the differences between releases: node lists,
# the held start), multi-node submit and --wait, the preflight and the array split, requeue with bitwise
# resume, a sweep's split array then a run --after it, the pool, the retry step leaving a bad node out (and
# retrying the code's failure in its allocation: the batch script runs itself again, $0),
# accounting and run cost, --when, --in-allocation, --after a cancelled run, submission over SSH.
SLURM_CORE = (
    "test_slurm_cluster.py",
    "test_slurm_release.py",
    "test_nodelist_scontrol.py",
    "test_held_until_logged.py",
    "test_slurm_submit.py::test_digits_on_two_nodes_reaches_local_accuracy",
    "test_slurm_submit.py::test_without_wait_returns_at_once_with_ids_and_logs",
    "test_slurm_submit.py::test_preflight_refuses_requests_the_partition_cannot_satisfy",
    "test_slurm_submit.py::test_array_chunk_size_follows_the_clusters_max_array_size",
    "test_requeue_slurm.py::test_preemption_signal_then_scontrol_requeue_resume_exactly",
    "test_sweep.py::test_split_array_of_multinode_tasks_then_a_run_after_it",
    "test_pool.py",
    "test_self_healing.py::test_a_node_that_fails_every_rank_on_it_is_left_out_and_the_run_completes_bitwise_equal",
    "test_self_healing.py::test_a_bug_that_raises_on_every_attempt_stops_after_the_second_identical_failure",
    "test_run_cost.py",
    "test_when.py",
    "test_in_allocation.py",
    "test_operations.py::test_an_after_run_slurm_cancelled_before_it_started_says_so_whichever_record_slurm_gives",
    "test_remote.py::test_digits_trains_on_two_nodes_through_the_login",
    "test_remote.py::test_status_logs_and_list_from_the_laptop",
)
# The files whose tests carry the controller_outage marker (tests/test_suite_order.py checks it).
OUTAGE_FILES = ("test_controller_restart.py",)
# (test_clean_exit.py, 80 s, is left for later on purpose: its 8 jobs at once start 16 ranks, which
# starved the files beside it at the start, a time-limit test among them.)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """SLURM_WAITS's files first as one xdist group, then HEAVY_FIRST's, then the rest as collected (a
    stable sort keeps each file's own order); every other file is a group of its own."""
    rank = {name: i for i, name in enumerate(SLURM_WAITS + SLURM_WAIT_TESTS + HEAVY_FIRST)}

    def place(item: pytest.Item) -> int:
        return rank.get(f"{item.path.name}::{item.name}", rank.get(item.path.name, len(rank)))

    items.sort(key=place)
    core = set(SLURM_CORE)
    for item in items:
        if item.path.name in core or f"{item.path.name}::{item.originalname}" in core:
            item.add_marker(pytest.mark.slurm_core)
        waits = place(item) < len(SLURM_WAITS) + len(SLURM_WAIT_TESTS)
        item.add_marker(pytest.mark.xdist_group(WAITS_GROUP if waits else item.path.name))
        if item.path.name in BESIDE_OUTAGE:
            reached = [name for name in CLUSTER_FIXTURES if name in getattr(item, "fixturenames", ())]
            if reached:  # it would meet the stopped controller
                raise pytest.UsageError(f"{item.nodeid} uses {reached[0]}: take its file out of "
                                        "tests/conftest.py's BESIDE_OUTAGE")
            item.add_marker(pytest.mark.beside_outage)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """tests/run_all.sh's two pytests after the main pass select one marker each: they import only the
    files that hold it. (Importing every test file takes each of them seconds of CPU, and those seconds
    come between the main pass and the outage test, while nothing else runs.)"""
    only = {"controller_outage": OUTAGE_FILES, "beside_outage": BESIDE_OUTAGE}.get(config.getoption("markexpr"))
    if only is None or not collection_path.name.startswith("test_") or collection_path.suffix != ".py":
        return None
    return True if collection_path.name not in only else None


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[Path]:
    """Path of the dev cluster's slurm.conf, with SLURM_CONF pointing at it.

    In CI a missing cluster is a setup bug, so it fails loudly instead of
    silently skipping every SLURM test.
    """
    if not dev_cluster.is_up():
        if os.environ.get("CI"):
            pytest.fail("SLURM dev cluster is not running; .ci/run must start it", pytrace=False)
        pytest.skip(
            "SLURM dev cluster not running: start it with "
            "`python -m launcher.devcluster up --nodes 4` (needs root)"
        )
    added = dev_cluster.client_env()
    # Plain assignment (monkeypatch is function-scoped), restored at teardown.
    saved = {key: os.environ.get(key) for key in added}
    os.environ.update(added)
    try:
        yield dev_cluster.slurm_conf_path()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="session")
def ssh_login(slurm_cluster: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real sshd on 127.0.0.1 whose unprivileged account alone reaches the dev cluster (launcher/devcluster/sshd.py)."""
    from launcher.devcluster import sshd

    if not Path(sshd.SSHD).exists() or shutil.which("rsync") is None:
        if os.environ.get("CI"):
            pytest.fail("openssh-server and rsync are missing; tests/run_all.sh installs them", pytrace=False)
        pytest.skip("openssh-server or rsync not installed (tests/run_all.sh installs them)")
    server = sshd.make_server(tmp_path_factory.mktemp("sshd"), slurm_cluster)
    server.start()
    try:
        yield server
    finally:
        server.cut()  # its connections too: no shared ssh connection outlives the tests
