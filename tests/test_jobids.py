"""Job ids as run folders record them (launcher/cluster/jobids.py): which records are read back as job
ids, which of them SLURM can be asked about, and how an array's ids are split, expanded and summed up
in what `submit`, `status` and `cancel` print."""

from __future__ import annotations

import pytest

from launcher.cluster import jobids

# The longest of each part a record may hold: a 20-digit job id, a 10-digit array index.
JOB, INDEX = "9" * 20, "9" * 10


@pytest.mark.parametrize("job_id", ["", "7", "4711", JOB, "4711_0", f"{JOB}_{INDEX}", "DEBUG_7", f"DEBUG_{JOB}"])
def test_ids_a_run_folder_may_record(job_id: str) -> None:
    assert jobids.recorded(job_id)


@pytest.mark.parametrize("job_id", ["4711?afterany:1", "4711,1", " 4711", "4711_", "_3", "4711_3_1", "DEBUG_",
                                    "debug_7", "DEBUG_7_1", "9" * 21, f"4711_{'9' * 11}", f"DEBUG_{'9' * 21}",
                                    "12_[3-5]", "-1"])
def test_an_edited_record_is_not_a_job_id(job_id: str) -> None:
    """What a dependency or scancel would be built from: nothing SLURM would read as more than one id."""
    assert not jobids.recorded(job_id)


@pytest.mark.parametrize("job_id, slurm", [("4711", True), (4711, True), ("4711_3", True), (f"{JOB}_{INDEX}", True),
                                           ("", False), ("DEBUG_7", False), ("12_[3-5]", False),
                                           ("9" * 21, False), (f"7_{'9' * 11}", False), ("7_", False)])
def test_only_a_slurm_job_or_array_task_is_one_slurm_can_be_asked_about(job_id: str | int, slurm: bool) -> None:
    assert jobids.is_slurm(job_id) is slurm  # type: ignore[arg-type]


def test_an_array_task_belongs_to_its_array_and_each_array_is_named_once_in_order() -> None:
    assert jobids.base_id("4711_3") == "4711" and jobids.base_id("4711") == "4711"
    assert jobids.base_id(4711) == "4711"  # type: ignore[arg-type]
    assert jobids.distinct_bases(["13_1", "12_0", "13_0", "12_1", "14"]) == ["13", "12", "14"]
    assert jobids.distinct_bases([]) == []


@pytest.mark.parametrize("listed, expanded", [
    ("12_[3-5,7%2]", ["12_3", "12_4", "12_5", "12_7"]),
    ("12_[0]", ["12_0"]),
    ("12_[9-10]", ["12_9", "12_10"]),
    ("12_[1,3-4]", ["12_1", "12_3", "12_4"]),
    ("12_[2-2%1]", ["12_2"]),
    ("12_4", ["12_4"]),  # one task already started: as it is
    ("12", ["12"]),
    ("12_[3-5", ["12_[3-5"]),  # not SLURM's form: as it is, never a guess
])
def test_an_arrays_pending_tasks_as_squeue_lists_them_are_each_task(listed: str, expanded: list[str]) -> None:
    assert jobids.expand_array_id(listed) == expanded


def test_the_summary_names_one_job_or_the_arrays_and_their_task_count() -> None:
    assert jobids.summary(["4711"]) == "4711"
    assert jobids.summary(["4711_0", "4711_1", "4711_2"]) == "array 4711 (3 tasks)"
    assert jobids.summary(["12_0", "13_0"]) == "array 12, 13 (2 tasks)"
