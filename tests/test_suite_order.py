"""tests/conftest.py's schedule for tests/run_all.sh names files and tests that exist: a renamed file or
test would otherwise silently leave its group (and run beside the others it was kept apart from)."""

from __future__ import annotations

from pathlib import Path

from tests import conftest

TESTS = Path(__file__).parent


def test_every_named_file_exists_and_sits_in_one_list() -> None:
    lists = (conftest.SLURM_WAITS, conftest.HEAVY_FIRST, conftest.BESIDE_OUTAGE)
    named = [name for names in lists for name in names]
    assert len(named) == len(set(named)), "a file in two of SLURM_WAITS, HEAVY_FIRST, BESIDE_OUTAGE"
    assert [name for name in named if not (TESTS / name).is_file()] == []


def test_every_single_test_of_the_waits_group_exists() -> None:
    for entry in conftest.SLURM_WAIT_TESTS:
        file, name = entry.split("::")
        assert file not in conftest.SLURM_WAITS  # the whole file is in the group already
        assert f"\ndef {name}(" in (TESTS / file).read_text(), entry


def test_the_controller_outage_marker_is_only_in_the_files_named_for_it() -> None:
    """run_all.sh's outage pytest imports only conftest.OUTAGE_FILES: a test marked elsewhere would never run."""
    marked = sorted(path.name for path in TESTS.glob("test_*.py")
                    if "pytest.mark.controller_outage" in path.read_text() and path.name != Path(__file__).name)
    assert marked == sorted(conftest.OUTAGE_FILES)


def test_every_test_of_the_slurm_core_exists_and_reaches_slurm() -> None:
    """run_all.sh runs the core (`-m slurm_core`) on the second release: a renamed test would drop out of it."""
    for entry in conftest.SLURM_CORE:
        file, _, name = entry.partition("::")
        text = (TESTS / file).read_text()
        assert (f"\ndef {name}(" in text) if name else True, entry
        assert "slurm" in text, entry  # (a file that never reaches the cluster proves nothing on a second release)
