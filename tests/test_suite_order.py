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
