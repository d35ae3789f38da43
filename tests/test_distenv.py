"""The distributed environment is one pure function of an environment mapping: table-driven tests."""

from __future__ import annotations

import pytest

from trainer.distributed.environment import DistEnv, port_for_job, resolve, scrubbed

SLURM_2x2_RANK3 = {
    "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": "3", "SLURM_NTASKS": "4",
    "SLURM_LOCALID": "1", "SLURM_NTASKS_PER_NODE": "2", "SLURM_JOB_NODELIST": "node-[07-08]",
    "SLURMD_NODENAME": "node-08",
}

CASES = [
    # (name, env, expected fields)
    ("nothing: one process", {}, dict(launcher="single", rank=0, world_size=1, local_rank=0)),
    ("slurm 2 nodes x 2 tasks, rank 3", SLURM_2x2_RANK3,
     dict(launcher="slurm", rank=3, world_size=4, local_rank=1, local_world_size=2, master_addr="node-07",
          node="node-08", job_id="4242")),
    ("slurm master from first host of a multi-group list",
     {**SLURM_2x2_RANK3, "SLURM_JOB_NODELIST": "gpu-a[003-004,010],login1"},
     dict(master_addr="gpu-a003")),
    ("slurm step node list wins over the job's",
     {**SLURM_2x2_RANK3, "SLURM_STEP_NODELIST": "node-[08-09]"}, dict(master_addr="node-08")),
    ("slurm array ids", {**SLURM_2x2_RANK3, "SLURM_ARRAY_JOB_ID": "4240", "SLURM_ARRAY_TASK_ID": "2"},
     dict(array_job_id="4240", array_task_id="2", job_id="4242", scheduler_job_id="4240_2")),
    ("slurm outside an array: the job id is the scheduler's", SLURM_2x2_RANK3, dict(scheduler_job_id="4242")),
    ("a torchrun worker in an array: torchrun's run id", {"RANK": "0", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "4242",
                                                          "SLURM_ARRAY_JOB_ID": "4240", "SLURM_ARRAY_TASK_ID": "2"},
     dict(scheduler_job_id="4242")),
    ("slurm tasks-per-node with repeat count", {**SLURM_2x2_RANK3, "SLURM_NTASKS_PER_NODE": "2(x2)"},
     dict(local_world_size=2)),
    ("MASTER_PORT and MASTER_ADDR already set are kept",
     {**SLURM_2x2_RANK3, "MASTER_PORT": "29500", "MASTER_ADDR": "10.0.0.1"},
     dict(master_port=29500, master_addr="10.0.0.1")),
    ("batch script without srun is one process", {"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4"},
     dict(launcher="single", world_size=1)),
    ("torchrun", {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
                  "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400", "TORCHELASTIC_RUN_ID": "abc"},
     dict(launcher="torchrun", rank=1, world_size=2, local_rank=1, master_port=29400)),
    ("torchrun inside a SLURM allocation: torchrun's variables win",
     {**SLURM_2x2_RANK3, "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "TORCHELASTIC_RUN_ID": "x",
      "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400"},
     dict(launcher="torchrun", rank=0, world_size=2)),
    ("submitit local executor",
     {"SUBMITIT_LOCAL_JOB_ID": "999", "SUBMITIT_LOCAL_GLOBALID": "1", "SUBMITIT_LOCAL_LOCALID": "1",
      "SUBMITIT_LOCAL_NTASKS": "2"},
     dict(launcher="local", rank=1, world_size=2, local_rank=1, master_addr="127.0.0.1", job_id="999")),
    ("submitit local inside a SLURM allocation (no step): local wins",
     {"SLURM_JOB_ID": "5", "SLURM_NTASKS": "8", "SUBMITIT_LOCAL_JOB_ID": "999", "SUBMITIT_LOCAL_GLOBALID": "0",
      "SUBMITIT_LOCAL_LOCALID": "0", "SUBMITIT_LOCAL_NTASKS": "2"},
     dict(launcher="local", world_size=2)),
]


@pytest.mark.parametrize("name,env,expected", CASES, ids=[c[0] for c in CASES])
def test_resolve_table(name: str, env: dict[str, str], expected: dict[str, object]) -> None:
    result = resolve(env)
    assert isinstance(result, DistEnv)
    for key, value in expected.items():
        assert getattr(result, key) == value, f"{name}: {key}"


def test_every_rank_of_a_job_derives_the_same_port_and_jobs_differ() -> None:
    ports = {resolve({**SLURM_2x2_RANK3, "SLURM_PROCID": str(r), "SLURM_LOCALID": str(r % 2)}).master_port
             for r in range(4)}
    assert len(ports) == 1
    other = resolve({**SLURM_2x2_RANK3, "SLURM_JOB_ID": "4243"}).master_port
    assert other not in ports
    # Derived ports stay below the kernel's ephemeral range so they don't collide with client ports.
    assert all(12000 <= port_for_job(str(j)) < 32000 for j in range(2000))
    assert len({port_for_job(str(j)) for j in range(200)}) > 190


@pytest.mark.parametrize("env,message", [
    ({**SLURM_2x2_RANK3, "SLURM_PROCID": "4"}, "outside world size"),
    ({"SUBMITIT_LOCAL_JOB_ID": "1", "SUBMITIT_LOCAL_GLOBALID": "0"}, "SUBMITIT_LOCAL_NTASKS is not set"),
])
def test_inconsistent_environments_are_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve(env)


def test_scrubbed_drops_an_enclosing_jobs_variables_but_keeps_slurm_conf() -> None:
    env = {**SLURM_2x2_RANK3, "MASTER_PORT": "1", "RANK": "3", "SLURM_CONF": "/etc/x.conf", "HOME": "/root",
           "SUBMITIT_LOCAL_JOB_ID": "9", "PATH": "/bin"}
    assert scrubbed(env) == {"SLURM_CONF": "/etc/x.conf", "HOME": "/root", "PATH": "/bin"}
    assert resolve(scrubbed(env)).launcher == "single"


# Every field, for each launcher: a variable read from the wrong table or a wrong default is seen.
FULL = [
    ("nothing", {}, DistEnv("single", 0, 1, 0, 1, "127.0.0.1", port_for_job("single"), "", "localhost")),
    ("a batch script without srun", {"SLURM_JOB_ID": "7", "SLURMD_NODENAME": "n1", "SLURM_ARRAY_JOB_ID": "6"},
     DistEnv("single", 0, 1, 0, 1, "127.0.0.1", port_for_job("7"), "7", "n1")),
    ("one process told where its master is", {"MASTER_ADDR": "10.0.0.2", "MASTER_PORT": "2345"},
     DistEnv("single", 0, 1, 0, 1, "10.0.0.2", 2345, "", "localhost")),
    ("torchrun", {"TORCHELASTIC_RUN_ID": "abc", "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
                  "LOCAL_WORLD_SIZE": "2", "HOSTNAME": "h1", "SLURM_ARRAY_JOB_ID": "6", "SLURM_ARRAY_TASK_ID": "1"},
     DistEnv("torchrun", 3, 4, 1, 2, "127.0.0.1", port_for_job("torchrun:abc"), "abc", "h1")),
    ("torchrun without a run id", {"RANK": "1", "WORLD_SIZE": "2", "SLURMD_NODENAME": "n2", "HOSTNAME": "h1"},
     DistEnv("torchrun", 1, 2, 1, 2, "127.0.0.1", port_for_job("torchrun:"), "", "n2")),
    ("submitit local, no local ids", {"SUBMITIT_LOCAL_JOB_ID": "999", "SUBMITIT_LOCAL_GLOBALID": "1",
                                      "SUBMITIT_LOCAL_NTASKS": "2"},
     DistEnv("local", 1, 2, 1, 2, "127.0.0.1", port_for_job("local:999"), "999", "localhost")),
    ("a batch script's own process (SLURM_PROCID, no step)", {"SLURM_JOB_ID": "7", "SLURM_PROCID": "0",
                                                             "SLURM_NTASKS": "2"},
     DistEnv("single", 0, 1, 0, 1, "127.0.0.1", port_for_job("7"), "7", "localhost")),
    ("submitit local told its master", {"SUBMITIT_LOCAL_JOB_ID": "9", "SUBMITIT_LOCAL_GLOBALID": "0",
                                        "SUBMITIT_LOCAL_NTASKS": "1", "MASTER_ADDR": "10.1.1.1"},
     DistEnv("local", 0, 1, 0, 1, "10.1.1.1", port_for_job("local:9"), "9", "localhost")),
    ("a srun step outside an array", {"SLURM_JOB_ID": "5", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0",
                                      "SLURM_NTASKS": "1", "SLURM_JOB_NODELIST": "c7", "SLURMD_NODENAME": "c7"},
     DistEnv("slurm", 0, 1, 0, 1, "c7", port_for_job("slurm:5"), "5", "c7", "", "")),
    ("a srun step", {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": "2", "SLURM_NTASKS": "3",
                     "SLURM_NTASKS_PER_NODE": "2,1", "SLURM_NODELIST": "c[5-6]", "RANK": "0", "WORLD_SIZE": "1",
                     "HOSTNAME": "h1", "SLURM_ARRAY_JOB_ID": "4240", "SLURM_ARRAY_TASK_ID": "2"},
     DistEnv("slurm", 2, 3, 2, 2, "c5", port_for_job("slurm:4242"), "4242", "", "4240", "2")),
]


@pytest.mark.parametrize("name,env,expected", FULL, ids=[c[0] for c in FULL])
def test_every_field_of_each_launcher(name: str, env: dict[str, str], expected: DistEnv) -> None:
    assert resolve(env) == expected
    assert (expected.distributed, expected.is_main) == (expected.world_size > 1, expected.rank == 0)


def test_distributed_and_main_rank() -> None:
    two = resolve({"RANK": "1", "WORLD_SIZE": "2"})
    assert (two.distributed, two.is_main) == (True, False)
    assert (resolve({}).distributed, resolve({}).is_main) == (False, True)


@pytest.mark.parametrize("env,message", [
    ({"SLURM_STEP_ID": "0", "SLURM_PROCID": "0"}, "SLURM_NTASKS is not set, but other slurm variables are"),
    ({"TORCHELASTIC_RUN_ID": "x", "WORLD_SIZE": "2"}, "RANK is not set, but other torchrun variables are"),
    ({"RANK": "-1", "WORLD_SIZE": "2"}, "rank -1 is outside world size 2"),
    ({"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}, "empty node list ''"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "rank 2 is outside world size 2"),
])
def test_the_variable_that_is_missing_or_wrong_is_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as raised:
        resolve(env)
    assert str(raised.value) == message


def test_derived_ports_cover_their_whole_range_and_do_not_change() -> None:
    ports = [port_for_job(str(j)) for j in range(20000)]
    assert 12000 <= min(ports) < 12010 and 31990 < max(ports) < 32000
    # Every rank computes the port itself: a change between versions would split a job's ranks.
    assert [port_for_job(j) for j in ("single", "7", "slurm:4242")] == [24153, 13346, 16215]  # zlib.crc32 (trainer.distributed.environment)


def test_scrubbed_drops_every_family_of_job_variables() -> None:
    job = {name: "1" for name in ("SLURM_JOB_ID", "SLURMD_NODENAME", "SRUN_CPUS_PER_TASK", "SBATCH_PARTITION",
                                  "SALLOC_ACCOUNT", "SUBMITIT_EXECUTOR", "TORCHELASTIC_RUN_ID", "RANK", "WORLD_SIZE",
                                  "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")}
    assert scrubbed({**job, "SLURM_CONF": "/x", "RANKING": "a", "MY_SLURM_X": "b"}) == {
        "SLURM_CONF": "/x", "RANKING": "a", "MY_SLURM_X": "b"}
