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
