"""Shared pytest fixtures: access to the SLURM dev cluster (launcher/devcluster)."""

from __future__ import annotations

import os
import pwd
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher import devcluster as dev_cluster
from tests import schedule


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


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The work units in tests/schedule.py's order (a stable sort keeps each file's own order); the
    files that mostly wait on SLURM are one xdist group, every other file a group of its own."""
    key = schedule.order_key(schedule.recorded())
    items.sort(key=lambda item: key(schedule.unit(item.path.name, item.originalname)))
    core = set(SLURM_CORE)
    for item in items:
        if item.path.name in core or f"{item.path.name}::{item.originalname}" in core:
            item.add_marker(pytest.mark.slurm_core)
        waits = schedule.in_waits_group(schedule.unit(item.path.name, item.originalname))
        item.add_marker(pytest.mark.xdist_group(schedule.WAITS_GROUP if waits else item.path.name))
        if item.path.name in schedule.BESIDE_OUTAGE:
            reached = [name for name in CLUSTER_FIXTURES if name in getattr(item, "fixturenames", ())]
            if reached:  # it would meet the stopped controller
                raise pytest.UsageError(f"{item.nodeid} uses {reached[0]}: take its file out of "
                                        "tests/schedule.py's BESIDE_OUTAGE")
            item.add_marker(pytest.mark.beside_outage)


# `--record-durations`: seconds per work unit, summed here (in the xdist controller, which sees every
# worker's reports) and merged into tests/durations.json at the end.
_measured: dict[str, float] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--record-durations", action="store_true",
                     help="merge this run's seconds per test file into tests/durations.json (tests/schedule.py)")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    name = schedule.unit_of(report.nodeid)
    _measured[name] = _measured.get(name, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    if session.config.getoption("record_durations") and not hasattr(session.config, "workerinput") and _measured:
        schedule.write(_measured)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """tests/run_all.sh's two pytests after the main pass select one marker each: they import only the
    files that hold it. (Importing every test file takes each of them seconds of CPU, and those seconds
    come between the main pass and the outage test, while nothing else runs.)"""
    only = {"controller_outage": schedule.OUTAGE_FILES,
            "beside_outage": schedule.BESIDE_OUTAGE}.get(config.getoption("markexpr"))
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
    # The cluster side starts empty: the suite's second pass (SLURM 22.05) trains again instead of being
    # answered with the first pass's identical runs there (launcher.commands.reuse). (tests/test_remote.py alone
    # uses this account: one worker.)
    shutil.rmtree(Path(pwd.getpwnam(sshd.USER).pw_dir) / "ddp-submit", ignore_errors=True)
    server.start()
    try:
        yield server
    finally:
        server.cut()  # its connections too: no shared ssh connection outlives the tests
