"""tests/schedule.py's order for tests/run_all.sh: it names files and tests that exist (a renamed file or
test would otherwise silently leave its group, and run beside the others it was kept apart from), and it
follows the durations recorded in tests/durations.json, which a run with --record-durations writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests import conftest, schedule

TESTS = Path(__file__).parent


def test_every_named_file_exists_and_sits_in_one_list() -> None:
    lists = (schedule.SLURM_WAITS, schedule.LAST, schedule.BESIDE_OUTAGE)
    named = [name for names in lists for name in names]
    assert len(named) == len(set(named)), "a file in two of SLURM_WAITS, LAST, BESIDE_OUTAGE"
    assert [name for name in named if not (TESTS / name).is_file()] == []


def test_the_recorded_durations_name_only_units_that_exist() -> None:
    """A unit renamed since the recording would be ordered as an unknown one: record again."""
    stale = [name for name in schedule.recorded() if not (TESTS / name.partition("::")[0]).is_file()
             or "::" in name and name not in schedule.SLURM_WAIT_TESTS]
    assert schedule.recorded() and stale == []


def test_the_order_is_the_waits_group_then_the_longest_first_and_a_new_file_in_the_middle() -> None:
    seconds = {"test_a.py": 10.0, "test_b.py": 300.0, "test_c.py": 50.0, schedule.SLURM_WAITS[0]: 5.0,
               schedule.LAST[0]: 900.0}
    units = ["test_a.py", "test_new.py", schedule.LAST[0], "test_b.py", "test_c.py", schedule.SLURM_WAITS[0]]
    assert sorted(units, key=schedule.order_key(seconds)) == [
        schedule.SLURM_WAITS[0], "test_b.py", "test_c.py", "test_new.py", "test_a.py", schedule.LAST[0]]


def test_a_report_is_counted_in_its_work_unit_as_xdist_names_it() -> None:
    single = schedule.SLURM_WAIT_TESTS[0]
    assert schedule.unit_of(f"tests/{single}@{schedule.WAITS_GROUP}") == single
    assert schedule.unit_of(f"tests/{single}") == single
    file = single.partition("::")[0]
    assert schedule.unit_of(f"tests/{file}::test_another[case-1]@{file}") == file
    assert schedule.unit_of("tests/test_pool.py::test_x[a@b]") == "test_pool.py"


def test_a_recording_run_merges_its_seconds_into_the_durations_file(tmp_path: Path) -> None:
    """As `bash tests/run_all.sh --record-durations` records: here one quick file, into a copy."""
    copy = tmp_path / "durations.json"
    copy.write_text(json.dumps({"seconds": {"test_kept.py": 7.0, "test_suite_order.py": 999.0}}))
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--record-durations",
                           "-k", "waits_group_then", str(Path(__file__))], check=False, cwd=TESTS.parent,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "DDP_TEST_DURATIONS": str(copy)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    seconds = json.loads(copy.read_text())["seconds"]
    assert seconds["test_kept.py"] == 7.0 and 0 <= seconds["test_suite_order.py"] < 60, seconds


def test_every_single_test_of_the_waits_group_exists() -> None:
    for entry in schedule.SLURM_WAIT_TESTS:
        file, name = entry.split("::")
        assert file not in schedule.SLURM_WAITS  # the whole file is in the group already
        assert f"\ndef {name}(" in (TESTS / file).read_text(), entry


def test_the_controller_outage_marker_is_only_in_the_files_named_for_it() -> None:
    """run_all.sh's outage pytest imports only schedule.OUTAGE_FILES: a test marked elsewhere would never run."""
    marked = sorted(path.name for path in TESTS.glob("test_*.py")
                    if "pytest.mark.controller_outage" in path.read_text() and path.name != Path(__file__).name)
    assert marked == sorted(schedule.OUTAGE_FILES)


def test_every_test_of_the_slurm_core_exists_and_reaches_slurm() -> None:
    """run_all.sh runs the core (`-m slurm_core`) on the second release: a renamed test would drop out of it."""
    for entry in conftest.SLURM_CORE:
        file, _, name = entry.partition("::")
        text = (TESTS / file).read_text()
        assert (f"\ndef {name}(" in text) if name else True, entry
        assert "slurm" in text, entry  # (a file that never reaches the cluster proves nothing on a second release)
