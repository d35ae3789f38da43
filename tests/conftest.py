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
        "markers", "controller_outage: stops the dev cluster's slurmctld; tests/run_all.sh runs these alone, last"
    )


# The files that take longest (CI's --durations, seconds on a quiet 2-core machine: fixtures and calls
# summed), run first. tests/run_all.sh runs two files at a time (--dist loadfile) in this order
# (--no-loadscope-reorder: xdist would otherwise start the files with the most tests first, the quick
# unit tests, and leave these one-to-three-test files of minutes each for the end, one worker idle).
HEAVY_FIRST = (
    "test_torchrun_launch.py",  # 320
    "test_script_jobs.py",  # 300
    "test_failfast.py",  # 330 once (its local sweep: 16 s alone, 240 s beside the torchrun sweep)
    "test_requeue_slurm.py",  # 270
    "test_user_code.py",  # 160
    "test_notebook.py",  # 100-150 (one kernel, its runs side by side)
    "test_notebook_slurm.py",  # 130
    "test_snapshot.py",  # 160
    "test_user_code_slurm.py",  # 150
    "test_exact_resume.py",  # 145
    "test_node_failure.py",  # 115
    "test_sweep.py",  # 110
    "test_user_api.py",  # 90
    "test_thirdparty.py",  # 90
    "test_local_runs.py",  # 80
    "test_private_run_folders.py",  # 60
    "test_launcher_layout.py",  # 50
)
# (test_clean_exit.py, 130 s, is left for later on purpose: its 12 jobs at once start 24 ranks, which
# starved the files beside it at the start, a time-limit test among them.)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """HEAVY_FIRST's files first, the rest as collected (a stable sort keeps each file's own order)."""
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(HEAVY_FIRST)))


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
    """A real sshd on 127.0.0.1 whose unprivileged account alone reaches the dev cluster (tests/sshd.py)."""
    from tests import sshd

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
