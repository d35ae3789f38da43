"""The distributed environment is one pure function of an environment mapping: table-driven tests."""

from __future__ import annotations

import pytest

from trainer.distenv import DistEnv, port_for_job, resolve, scrubbed

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
     dict(array_job_id="4240", array_task_id="2")),
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
