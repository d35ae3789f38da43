"""`--in-allocation`'s decisions, called directly (launcher/cluster/slurm/allocation.py): what the allocation
holds as SLURM's variables in the `salloc` shell describe it, which of them the job step keeps, and whether
the profile's request fits, each refusal naming the key to change and the salloc that would fit.
tests/test_in_allocation.py takes the same path inside a real allocation of the dev cluster."""

from __future__ import annotations

import subprocess
import sys

import pytest

from launcher.cluster.slurm import allocation
from launcher.cluster.slurm.allocation import Allocation
from trainer.config.schema import ConfigError

# A shell `salloc -N 2 --ntasks-per-node=2 --cpus-per-task=2` gives, as SLURM writes it (and the step
# variables of an `srun --pty bash` inside it).
SALLOC = {
    "SLURM_JOB_ID": "4711", "SLURM_JOBID": "4711", "SLURM_JOB_NUM_NODES": "2", "SLURM_NNODES": "2",
    "SLURM_JOB_NODELIST": "cpu[1-2]", "SLURM_NODELIST": "cpu[1-2]", "SLURM_JOB_CPUS_PER_NODE": "4(x2)",
    "SLURM_NTASKS": "4", "SLURM_NPROCS": "4", "SLURM_CPUS_PER_TASK": "2", "SLURM_NTASKS_PER_NODE": "2",
    "SLURM_MEM_PER_NODE": "1000", "SLURM_CONF": "/etc/slurm/slurm.conf", "SLURM_CLUSTER_NAME": "dev",
    "SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_PTY_PORT": "3",
    "SLURM_TASK_PID": "99", "SLURM_UMASK": "0022", "SLURM_LAUNCH_NODE_IPADDR": "127.0.0.1",
    "HOME": "/root", "PATH": "/usr/bin",
}


@pytest.mark.parametrize("written, per_node", [("4(x2),2", [4, 4, 2]), ("8", [8]), ("", []), ("2,16(x3)", [2, 16, 16, 16]),
                                               ("4(x1)", [4]), ("4,,2", [4, 2])])
def test_slurms_per_node_counts_are_one_number_per_node(written: str, per_node: list[int]) -> None:
    assert allocation.counts(written) == per_node


def test_the_allocation_is_what_the_salloc_shell_says_and_its_step_keeps_only_what_finds_it() -> None:
    alloc = allocation.current(SALLOC)
    assert alloc is not None
    assert (alloc.job_id, alloc.nodes, alloc.cpus_per_node, alloc.gpus_per_node, alloc.nodelist) == \
        ("4711", 2, [4, 4], None, "cpu[1-2]")
    # The allocation's own description, not the shell's step or the request its srun would otherwise inherit.
    assert alloc.variables == {"SLURM_JOB_ID": "4711", "SLURM_JOBID": "4711", "SLURM_JOB_NUM_NODES": "2",
                               "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "cpu[1-2]", "SLURM_NODELIST": "cpu[1-2]",
                               "SLURM_JOB_CPUS_PER_NODE": "4(x2)", "SLURM_CLUSTER_NAME": "dev"}


def test_outside_an_allocation_there_is_none() -> None:
    assert allocation.current({"HOME": "/root"}) is None and allocation.current({"SLURM_JOB_ID": ""}) is None


@pytest.mark.parametrize("more, nodes, cpus", [
    ({"SLURM_JOB_NUM_NODES": "", "SLURM_NNODES": "3"}, 3, [4, 4]),  # the older name where the newer is empty
    ({"SLURM_JOB_NUM_NODES": "", "SLURM_NNODES": ""}, 1, [4, 4]),
    ({"SLURM_JOB_CPUS_PER_NODE": "2,8"}, 2, [8, 2]),  # largest first
    ({"SLURM_JOB_CPUS_PER_NODE": ""}, 2, [0, 0]),  # not said: none known on either node
])
def test_node_and_cpu_counts_from_either_name_and_largest_first(more: dict[str, str], nodes: int,
                                                                 cpus: list[int]) -> None:
    alloc = allocation.current({**SALLOC, **more})
    assert alloc is not None and (alloc.nodes, alloc.cpus_per_node) == (nodes, cpus)


@pytest.mark.parametrize("more, gpus", [
    ({"SLURM_GPUS_PER_NODE": "2"}, 2),
    ({"SLURM_GPUS_PER_NODE": "a100:4"}, 4),
    ({"SLURM_GPUS_PER_NODE": "gpu:a100:4"}, 4),  # type and count after GRES's name: the count is the last part
    ({"SLURM_GPUS_ON_NODE": "3"}, 3),
    ({"SLURM_GPUS_PER_NODE": "2", "SLURM_GPUS_ON_NODE": "1"}, 2),
    ({"SLURM_JOB_GPUS": "0,1,2"}, 3),
    ({"SLURM_GPUS_PER_NODE": "a100", "SLURM_JOB_GPUS": "5"}, 1),
    ({}, None),
])
def test_gpus_per_node_from_whichever_variable_slurm_set(more: dict[str, str], gpus: int | None) -> None:
    alloc = allocation.current({**SALLOC, **more})
    assert alloc is not None and alloc.gpus_per_node == gpus


@pytest.mark.parametrize("name, value, expected", [
    ("SLURM_JOB_NUM_NODES", "0", "a node count (a whole number from 1)"),
    ("SLURM_JOB_NUM_NODES", str(2**31), "a node count (a whole number from 1)"),
    ("SLURM_JOB_CPUS_PER_NODE", "4(x2", "CPU counts per node as SLURM writes them (e.g. 4(x2),2)"),
    ("SLURM_JOB_ID", "12.0", "a SLURM job id (digits)")])
def test_a_count_out_of_range_or_malformed_is_refused_naming_the_variable(name: str, value: str, expected: str) -> None:
    with pytest.raises(ConfigError) as refused:
        allocation.current({**SALLOC, name: value})
    assert str(refused.value) == (f"--in-allocation (profile.in_allocation): {name}={value!r} in this shell's "
                                  f"environment is not {expected}; run it in the shell `salloc` gives you, with "
                                  "SLURM's variables as it set them")


def test_an_allocation_whose_shell_lacks_the_node_list_or_cpu_counts_is_still_read() -> None:
    bare = {"SLURM_JOB_ID": "4711", "SLURM_JOB_NUM_NODES": "2"}
    assert allocation.current(bare) == Allocation("4711", 2, [0, 0], None, "", bare)


def test_the_largest_node_count_slurm_can_write_is_taken() -> None:
    alloc = allocation.current({**SALLOC, "SLURM_JOB_NUM_NODES": str(2**31 - 1)})
    assert alloc is not None and alloc.nodes == 2**31 - 1


@pytest.mark.parametrize("value, shown", [("1" * 59 + "x", "1" * 59 + "x"), ("1" * 60 + "x", "1" * 57 + "..."),
                                          ("1" * 56 + "x" * 10, "1" * 56 + "x...")])
def test_a_value_too_long_to_show_is_cut_past_60_characters(value: str, shown: str) -> None:
    with pytest.raises(ConfigError) as refused:
        allocation.current({**SALLOC, "SLURM_JOB_ID": value})
    assert f"SLURM_JOB_ID={shown!r} in this shell" in str(refused.value)


HELD = Allocation("4711", 2, [8, 4], 2, "cpu[1-2]")


def test_a_request_the_allocation_holds_fits_exactly() -> None:
    allocation.check(HELD, nodes=2, tasks_per_node=2, cpus_per_task=2, gpus_per_node=2)  # 4 CPUs on the smaller
    allocation.check(HELD, nodes=1, tasks_per_node=4, cpus_per_task=2, gpus_per_node=0)  # 8 on the largest one
    assert allocation.held(SALLOC, tasks=1, nodes=2, tasks_per_node=2, cpus_per_task=2, gpus_per_node=0).job_id == "4711"


@pytest.mark.parametrize("ask, said", [
    (dict(nodes=3), "profile.nodes: 3 is more than the allocation 4711 holds 2 node(s) (cpu[1-2]); ask for at most "
                    "2 (--set profile.nodes=2) or salloc -N 3"),
    (dict(tasks_per_node=5, cpus_per_task=1), "profile.tasks_per_node: 5 task(s) x 1 CPU(s) per node need 5 CPUs on "
                                              "each of 2 node(s); the allocation 4711 holds 2 node(s) (cpu[1-2]) with "
                                              "8,4 CPU(s): lower tasks_per_node or cpus_per_task, or salloc "
                                              "--ntasks-per-node=5 --cpus-per-task=1"),
    (dict(nodes=1, tasks_per_node=3, cpus_per_task=3), "need 9 CPUs on each of 1 node(s)"),
    (dict(gpus_per_node=3), "profile.gpus_per_node: 3 GPU(s) per node, but the allocation 4711 holds 2 node(s) "
                            "(cpu[1-2]) with 2 GPU(s) each; salloc --gpus-per-node=3"),
])
def test_a_request_it_does_not_hold_is_one_error_naming_the_key_and_the_salloc(ask: dict[str, int], said: str) -> None:
    request = {"nodes": 2, "tasks_per_node": 1, "cpus_per_task": 1, "gpus_per_node": 0, **ask}
    with pytest.raises(ConfigError) as refused:
        allocation.check(HELD, **request)
    assert said in str(refused.value)


def test_an_allocation_without_gpus_or_a_nodelist_says_so() -> None:
    bare = Allocation("12", 1, [4], None)
    with pytest.raises(ConfigError, match=r"the allocation 12 holds 1 node\(s\) with no GPU\(s\) each;"):
        allocation.check(bare, nodes=1, tasks_per_node=1, cpus_per_task=1, gpus_per_node=1)
    allocation.check(Allocation("12", 1, [], None), nodes=1, tasks_per_node=64, cpus_per_task=1, gpus_per_node=0)


def test_outside_an_allocation_or_for_a_sweep_nothing_is_held() -> None:
    with pytest.raises(ConfigError) as refused:
        allocation.held({}, tasks=1, nodes=1, tasks_per_node=1, cpus_per_task=1, gpus_per_node=0)
    assert str(refused.value) == ("--in-allocation (profile.in_allocation): this shell is not inside a SLURM "
                                  "allocation (SLURM_JOB_ID is not set); run it in the shell `salloc -N NODES` gives "
                                  "you, or drop it to queue a job of its own")
    with pytest.raises(ConfigError, match=r"profile.gpus_per_node: 1 GPU\(s\) per node, but the allocation 4711"):
        allocation.held(SALLOC, tasks=1, nodes=1, tasks_per_node=1, cpus_per_task=1, gpus_per_node=1)
    with pytest.raises(ConfigError, match=r"a sweep's 2 tasks do not run inside an allocation"):
        allocation.held(SALLOC, tasks=2, nodes=1, tasks_per_node=1, cpus_per_task=1, gpus_per_node=0)


def test_the_step_is_named_after_the_run_and_its_bash_stands_for_the_job() -> None:
    assert allocation.step_name("digits-1204") == "ddp-submit:digits-1204"
    running = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    assert allocation.step_state(running) == ""  # type: ignore[arg-type]
    running.communicate(b"")  # it reads its end of input, then returns 0
    assert allocation.step_state(running) == "COMPLETED"  # type: ignore[arg-type]
    failed = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    failed.wait()
    assert allocation.step_state(failed) == "FAILED"  # type: ignore[arg-type]
