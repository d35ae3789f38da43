"""Values that enter from the environment and from SLURM's answers (issue 43), parsed where they enter: the
allocation's variables for `--in-allocation`, and what `sbatch --test-only` answers for `--when`. Each one that
is not what SLURM writes is one `error:` line naming it (exit 2, no run folder), or an answer read as no answer;
never a traceback, a run named after it, or a control character on the user's terminal."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.cluster.slurm.start_estimate import parse, usable
from launcher.commands.main import main

GOOD = "sbatch: Job 655 to start at 2026-12-02T06:52:54 using 2 processors on nodes cpu[1-2] in partition cpu"


@pytest.mark.parametrize("name, value, expected", [
    ("SLURM_JOB_ID", "../../etc", "a SLURM job id"),
    ("SLURM_JOB_ID", "12;scancel -u root", "a SLURM job id"),
    ("SLURM_JOB_ID", "12_3", "a SLURM job id"),  # an array task's id names no allocation srun can join
    ("SLURM_JOB_NUM_NODES", "two", "a node count"),
    ("SLURM_JOB_NUM_NODES", "0", "a node count"),
    ("SLURM_JOB_NUM_NODES", "99999999999", "a node count"),
    ("SLURM_JOB_CPUS_PER_NODE", "4(x2);rm", "CPU counts per node"),
    ("SLURM_JOB_CPUS_PER_NODE", "four", "CPU counts per node"),
])
def test_an_allocation_variable_that_is_not_slurms_is_one_line_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, name: str, value: str,
        expected: str) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SLURM_JOB_ID", "4711")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    monkeypatch.setenv("SLURM_JOB_CPUS_PER_NODE", "4(x2)")
    monkeypatch.setenv(name, value)
    try:
        code = main(["--profile", "dev-cluster", "--in-allocation", "--dry-run"])
    except SystemExit as stop:
        code = int(stop.code or 0)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip() and not line.startswith("note: ")]
    assert code == 2 and len(err) == 1 and err[0].startswith("error: --in-allocation"), err
    assert f"{name}={value!r}" in err[0] and expected in err[0], err
    assert not (tmp_path / "runs").exists()


def test_a_start_slurm_knows_is_read() -> None:
    found = parse(GOOD)
    assert (found.nodes, found.partition, found.error) == ("cpu[1-2]", "cpu", "") and found.start


@pytest.mark.parametrize("said, error", [
    (GOOD.replace("2026-12-02T06:52:54", "Unknown"), "SLURM gives no start time (Unknown)"),
    (GOOD.replace("2026-12-02T06:52:54", "2026-13-45T99:00:00"), "SLURM gives no start time"),
    (GOOD.replace("cpu[1-2]", "cpu\x1b[31m"), "not a node list: 'cpu?[31m'"),
    (GOOD.replace("partition cpu", "partition c\x07pu"), "a partition that is not one: 'c?pu'"),
    ("sbatch: error: Batch job submission failed: \x1b]0;title\x07 Requested node configuration is not available",
     "Batch job submission failed: ?]0;title? Requested node configuration"),
])
def test_an_answer_that_is_not_a_start_is_no_start_and_carries_no_control_character(said: str, error: str) -> None:
    found = parse(said, 1)
    assert found.start is None and error in found.error, found
    assert not any(ord(ch) < 32 or 127 <= ord(ch) < 160 for ch in found.error + found.nodes + found.partition)


# `scontrol show partition -o` as SLURM prints it (22.05 and 24.11 alike), one record per line: what `--when` reads.
PARTITIONS = "\n".join([
    "PartitionName=cpu AllowGroups=ALL AllowAccounts=ALL Default=YES Hidden=NO RootOnly=NO State=UP TotalNodes=4",
    "PartitionName=gpu AllowGroups=ml,vision AllowAccounts=ALL Hidden=NO RootOnly=NO State=UP TotalNodes=2",
    "PartitionName=paid AllowGroups=ALL AllowAccounts=lab1,lab2 Hidden=NO RootOnly=NO State=UP TotalNodes=2",
    "PartitionName=admin AllowGroups=ALL AllowAccounts=ALL Hidden=NO RootOnly=YES State=UP TotalNodes=1",
    "PartitionName=secret AllowGroups=ALL AllowAccounts=ALL Hidden=YES RootOnly=NO State=UP TotalNodes=1",
    "PartitionName=old AllowGroups=ALL AllowAccounts=ALL Hidden=NO RootOnly=NO State=DOWN TotalNodes=1",
    "PartitionName=drained AllowGroups=ALL AllowAccounts=ALL Hidden=NO RootOnly=NO State=INACTIVE TotalNodes=1",
])


@pytest.mark.parametrize("groups, account, root, expected", [
    ({"users"}, "", False, ["cpu", "paid"]),  # no account named: the account check is SLURM's at submission
    ({"users", "vision"}, "lab2", False, ["cpu", "gpu", "paid"]),
    ({"users"}, "lab3", False, ["cpu"]),
    ({"users"}, "", True, ["cpu", "paid", "admin"]),
])
def test_when_compares_only_the_partitions_this_user_may_submit_to(groups: set[str], account: str, root: bool,
                                                                   expected: list[str]) -> None:
    assert usable(PARTITIONS, groups, account, root) == expected
