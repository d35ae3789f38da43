"""submit.py against the real SLURM dev cluster (launcher/devcluster): multi-node DDP, results back
to the submitter, accounting, preflight, submitting from inside a job, the GPU partition.

Every submission runs `python submit.py` as a user would, from a shell without SLURM_CONF: the
dev-cluster profiles supply it. Run folders go to a temporary runs_dir.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import rank_results

ROOT = Path(__file__).resolve().parent.parent
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED")


# ----- helpers ---------------------------------------------------------------------------------------

def user_env(**extra: str) -> dict[str, str]:
    """A new shell's environment: no SLURM_CONF (the profile must bring it)."""
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    env.update(extra)
    return env


def submit(*args: str, env: dict[str, str] | None = None, timeout: float = 240,
           cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "submit.py"), *args], cwd=cwd, env=env or user_env(),
                          capture_output=True, text=True, timeout=timeout, check=False)


def last_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = proc.stdout.strip().splitlines()
    assert lines, f"no output; stderr:\n{proc.stderr}"
    return json.loads(lines[-1])


def slurm(*args: str, timeout: float = 30) -> str:
    """A SLURM client command against the dev cluster (the fixture set SLURM_CONF for this process)."""
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=True).stdout


def sacct_state(job_id: str, timeout: float = 60) -> str:
    """The job's final state from accounting; polls, because slurmdbd records it a moment later."""
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        out = slurm("sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State")
        state = out.strip().splitlines()[0].split()[0] if out.strip() else ""
        if state in TERMINAL:
            return state
        time.sleep(1)
    return state


def jobs_named(name: str) -> str:
    """Everything SLURM knows about jobs called `name`: queued, running, or in accounting."""
    queued = slurm("squeue", "-h", "--name", name, "-o", "%i")
    accounted = slurm("sacct", "-n", "-X", "-S", "now-1days", "--name", name, "-o", "JobID")
    return (queued + accounted).strip()


def check_trained_across(result: dict[str, Any], ranks: list[dict[str, Any]], nodes: int,
                         tasks_per_node: int) -> None:
    world = nodes * tasks_per_node
    assert result["world_size"] == world and len(ranks) == world
    assert [r["rank"] for r in ranks] == list(range(world))
    per_rank_nodes = [r["node"] for r in ranks]
    assert result["nodes"] == per_rank_nodes  # the node names the ranks ran on, returned to us
    distinct = list(dict.fromkeys(per_rank_nodes))
    assert len(distinct) == nodes, per_rank_nodes
    # Ranks fill nodes in order (block distribution), and every rank agrees on the first node.
    assert per_rank_nodes == [n for n in distinct for _ in range(tasks_per_node)]
    assert {r["master_addr"] for r in ranks} == {distinct[0]}
    assert all(n.startswith("cpu") for n in distinct)


# ----- multi-node training ---------------------------------------------------------------------------

def test_digits_on_two_nodes_reaches_local_accuracy(slurm_cluster: Path, tmp_path: Path) -> None:
    started = time.monotonic()
    proc = submit("--profile", "dev-cluster", "--job", "digits", "--set", "profile.nodes=2",
                  "--set", f"profile.runs_dir={tmp_path}", "--wait", "--json")
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    result = last_json(proc)
    for key in ("run_dir", "world_size", "test_accuracy", "test_loss", "epochs", "images_per_second",
                "job_id", "nodes"):
        assert key in result, key
    assert result["test_accuracy"] >= 0.97  # what the 2-process local run reaches
    assert result["epochs"] == 20
    ranks = rank_results(Path(result["run_dir"]), result["job_id"])
    check_trained_across(result, ranks, nodes=2, tasks_per_node=1)
    assert all(r["threads"] == 1 for r in ranks)  # cpus_per_task
    assert sacct_state(result["job_id"]) == "COMPLETED"
    print(f"2-node digits: submit -> result {elapsed:.1f} s")


def test_two_nodes_with_two_tasks_each(slurm_cluster: Path, tmp_path: Path) -> None:
    proc = submit("--profile", "dev-cluster", "--job", "digits", "--set", "profile.nodes=2",
                  "--set", "profile.tasks_per_node=2", "--set", f"profile.runs_dir={tmp_path}", "--wait", "--json")
    assert proc.returncode == 0, proc.stderr
    result = last_json(proc)
    assert result["test_accuracy"] >= 0.97
    check_trained_across(result, rank_results(Path(result["run_dir"]), result["job_id"]), nodes=2,
                         tasks_per_node=2)
    assert sacct_state(result["job_id"]) == "COMPLETED"


def test_without_wait_returns_at_once_with_ids_and_logs(slurm_cluster: Path, tmp_path: Path) -> None:
    proc = submit("--profile", "dev-cluster", "--job", "digits", "--set", "job.epochs=3",
                  "--set", f"profile.runs_dir={tmp_path}", "--json")
    assert proc.returncode == 0, proc.stderr
    info = last_json(proc)
    job_id, run_dir = info["job_id"], Path(info["run_dir"])
    # Returned before the job could have finished: no rank has written its result yet.
    assert not list((run_dir / "logs").rglob("*_result.pkl"))
    assert not (run_dir / "result.json").exists()
    human = proc.stdout
    assert f"submitted job {job_id}" in human
    assert run_dir.name in human and "logs:" in human
    assert sacct_state(job_id) == "COMPLETED"
    # The log folder it printed holds one stdout/stderr pair per task (rank).
    logs = run_dir / "logs" / job_id
    for rank in range(2):
        assert (logs / f"{job_id}_{rank}_log.out").is_file()
        assert (logs / f"{job_id}_{rank}_log.err").is_file()
    assert "[trainer]" in (logs / f"{job_id}_0_log.out").read_text()  # rank 0 logs, in its own file


def test_job_environment_on_the_nodes(slurm_cluster: Path, tmp_path: Path) -> None:
    """What the issue promises each task: the preemption signal name exported, threads equal to
    cpus_per_task, requeue on, and srun killing the step when one task fails."""
    proc = submit("--profile", "dev-cluster", "--job", "digits", "--set", "job.epochs=1",
                  "--set", "profile.cpus_per_task=2", "--set", f"profile.runs_dir={tmp_path}", "--wait", "--json")
    assert proc.returncode == 0, proc.stderr
    result = last_json(proc)
    job_id = result["job_id"]
    ranks = rank_results(Path(result["run_dir"]), job_id)
    assert [r["threads"] for r in ranks] == [2, 2]
    script = (Path(result["run_dir"]) / "logs" / job_id / f"{job_id}_submission.sh").read_text()
    assert "export SUBMITIT_PREEMPT_SIGNAL=USR2" in script and "export OMP_NUM_THREADS=2" in script
    assert "--kill-on-bad-exit=1" in script and "#SBATCH --requeue" in script
    assert "#SBATCH --signal=USR2@30" in script
    # The probe sees the same environment inside the tasks.
    probe = subprocess.run([sys.executable, "submit.py", "probe", "--profile", "dev-cluster",
                            "--set", "profile.cpus_per_task=2", "--set", f"profile.runs_dir={tmp_path}", "--json"],
                           cwd=ROOT, env=user_env(), capture_output=True, text=True, timeout=120, check=False)
    assert probe.returncode == 0, probe.stderr
    tasks = last_json(probe)["tasks"]
    assert [t["SUBMITIT_PREEMPT_SIGNAL"] for t in tasks] == ["USR2", "USR2"]
    assert [t["OMP_NUM_THREADS"] for t in tasks] == ["2", "2"]
    assert [t["SLURM_CPUS_PER_TASK"] for t in tasks] == ["2", "2"]
    shown = slurm("scontrol", "show", "job", "-o", last_json(probe)["job_id"])
    assert "Requeue=1" in shown


def test_failing_rank_ends_the_whole_job(slurm_cluster: Path, tmp_path: Path) -> None:
    """Rank 1 dies at step 3: the whole job ends promptly (srun --kill-on-bad-exit=1, and rank 0 does
    not wait out its 10-minute collective timeout), sacct says FAILED, and the submitter reports
    the real cause, not rank 0's symptom, and exits 1."""
    started = time.monotonic()
    proc = submit("--profile", "dev-cluster", "--job", "digits", "--set", "job.epochs=2",
                  "--set", "job.fail_at=3:1", "--set", "profile.collective_timeout_s=600",
                  "--set", "profile.max_failures=0",  # the fail-fast, not the retry (test_self_healing.py)
                  "--set", f"profile.runs_dir={tmp_path}", "--wait", "--json")
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr
    assert "injected failure at step 3 on rank 1" in proc.stderr
    info = last_json(proc)
    assert info["state"] == "FAILED" and info["failed_rank"] == 1
    assert sacct_state(info["job_id"]) == "FAILED"
    assert elapsed < 300  # far below the collective timeout: nobody waited it out


# ----- preflight -------------------------------------------------------------------------------------

PREFLIGHT_CASES = [
    (["profile.partition=nope"], "profile.partition: 'nope' is not a partition of this cluster"),
    (["profile.time=5:00:00"], "profile.time: 300 min exceeds partition cpu's MaxTime of 120 min"),
    (["profile.time_min=500"], "profile.time: 500 min exceeds partition cpu's MaxTime of 120 min"),
    (["profile.nodes=9"], "profile.nodes: 9 exceeds the {cpu_nodes} node(s) of partition cpu"),
    (["profile.tasks_per_node=3", "profile.cpus_per_task=2"],
     "profile.tasks_per_node x profile.cpus_per_task: 3 x 2 = 6 CPUs per node exceeds the 4 CPUs"),
    (["profile.mem_per_task=5G"], "profile.mem_per_task: 5120 MB x 1 task(s) = 5120 MB per node exceeds"),
    (["profile.mem_per_task_gb=5"], "profile.mem_per_task: 5120 MB x 1 task(s) = 5120 MB per node exceeds"),
    (["profile.gpus_per_node=1"], "profile.gpus_per_node: 1, but no node of partition cpu has GPUs"),
]


@pytest.mark.parametrize("sets,message", PREFLIGHT_CASES, ids=[c[1].split(":")[0] + str(i)
                                                               for i, c in enumerate(PREFLIGHT_CASES)])
def test_preflight_refuses_requests_the_partition_cannot_satisfy(slurm_cluster: Path, tmp_path: Path,
                                                                 sets: list[str], message: str) -> None:
    name = f"preflight-{uuid.uuid4().hex[:8]}"
    args = ["--profile", "dev-cluster", "--set", f"job.name={name}", "--set", f"profile.runs_dir={tmp_path}"]
    for item in sets:
        args += ["--set", item]
    proc = submit(*args, "--wait")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # `up --nodes N` decides how many cpu nodes there are.
    cpu_nodes = len(slurm("sinfo", "-h", "-N", "-p", "cpu", "-o", "%N").split())
    assert message.format(cpu_nodes=cpu_nodes) in proc.stderr
    assert proc.stderr.startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # no run folder
    assert jobs_named(name) == ""  # nothing queued


def test_preflight_gpu_count_on_the_gpu_partition(slurm_cluster: Path, tmp_path: Path) -> None:
    proc = submit("--profile", "dev-cluster-gpu", "--set", "profile.gpus_per_node=8",
                  "--set", "profile.tasks_per_node=8", "--set", f"profile.runs_dir={tmp_path}")
    assert proc.returncode == 2
    assert "profile.gpus_per_node: 8 exceeds the 4 GPU(s) (GRES gpu) of partition gpu's largest node" in proc.stderr
    assert not list(tmp_path.iterdir())


def test_request_refused_by_sbatch_leaves_nothing_behind(slurm_cluster: Path, tmp_path: Path) -> None:
    """What the preflight cannot see (here an unknown node name) sbatch refuses: exit 2 with
    sbatch's message on one line, and no run folder or job left over."""
    name = f"refused-{uuid.uuid4().hex[:8]}"
    proc = submit("--profile", "dev-cluster", "--set", f"job.name={name}", "--set", "profile.sbatch_extra.exclude=cpu9",
                  "--set", f"profile.runs_dir={tmp_path}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: sbatch refused the job, nothing was queued: sbatch: error: Batch job submission failed: "
        "Invalid node name specified"]
    assert not list(tmp_path.iterdir())
    assert jobs_named(name) == ""


def test_unreachable_controller_is_a_clear_error(slurm_cluster: Path, tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    text = slurm_cluster.read_text()
    port = next(line for line in text.splitlines() if line.startswith("SlurmctldPort="))
    conf.write_text(text.replace(port, "SlurmctldPort=9"))  # nothing listens there
    runs = tmp_path / "runs"
    started = time.monotonic()
    proc = submit("--profile", "dev-cluster", "--set", f"profile.slurm_conf={conf}",
                  "--set", f"profile.runs_dir={runs}")
    assert proc.returncode == 2
    assert f"the controller in {conf}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert time.monotonic() - started < 30
    assert not runs.exists()


def test_missing_slurm_commands_are_a_clear_error(slurm_cluster: Path, tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = submit("--profile", "dev-cluster", "--set", f"profile.runs_dir={tmp_path / 'runs'}",
                  env=user_env(PATH=str(empty)))
    assert proc.returncode == 2
    assert "'scontrol' is not on PATH" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_missing_slurm_conf_is_a_clear_error(slurm_cluster: Path, tmp_path: Path) -> None:
    proc = submit("--profile", "dev-cluster", "--set", f"profile.slurm_conf={tmp_path / 'absent.conf'}",
                  "--set", f"profile.runs_dir={tmp_path / 'runs'}")
    assert proc.returncode == 2
    assert "absent.conf" in proc.stderr and "does not exist" in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_array_chunk_size_follows_the_clusters_max_array_size(slurm_cluster: Path, tmp_path: Path) -> None:
    from launcher.cluster.slurm import limits
    from launcher.config.resolve import resolve
    from launcher.request.submission import slurm_request

    config = slurm("scontrol", "show", "config")
    max_array = int(next(line for line in config.splitlines() if line.startswith("MaxArraySize")).split("=")[1])

    def chunk(*sets: str) -> int | None:
        resolved = resolve("dev-cluster", "digits", list(sets))
        profile = resolved.profile
        return limits.check(slurm_request(profile, "digits"), profile.max_array_size, resolved.profile_source).chunk

    # Array indices run to MaxArraySize - 1 and ours start at 0: MaxArraySize tasks fit in one array.
    assert chunk() == max_array
    assert chunk("profile.max_array_size=7") == 7
    assert chunk(f"profile.max_array_size={max_array * 10}") == max_array


# ----- a job that submits a job ------------------------------------------------------------------------

def test_submitting_from_inside_a_job(slurm_cluster: Path, tmp_path: Path) -> None:
    """The outer job runs submit.py in an srun step whose environment also carries torchrun/submitit
    variables and a bogus MASTER_ADDR; none of it may reach the inner job's ranks."""
    inner = [sys.executable, str(ROOT / "submit.py"), "--profile", "dev-cluster", "--job", "digits",
             "--set", "job.epochs=2", "--set", f"profile.runs_dir={tmp_path / 'runs'}", "--wait", "--json"]
    leaks = "MASTER_ADDR=bogus.invalid MASTER_PORT=1 RANK=3 WORLD_SIZE=7 LOCAL_RANK=3 " \
            "TORCHELASTIC_RUN_ID=outer SUBMITIT_LOCAL_JOB_ID=outer"
    script = f"cd {shlex.quote(str(tmp_path))} && srun --ntasks=1 env -u SLURM_CONF {leaks} {shlex.join(inner)}"
    out = tmp_path / "outer.out"
    outer_id = slurm("sbatch", "--parsable", "--partition=cpu", "--nodes=1", "--ntasks=1", "--time=5",
                     f"--output={out}", "--job-name=outer-submitter", f"--wrap={script}").strip().split(";")[0]
    assert sacct_state(outer_id, timeout=180) == "COMPLETED", out.read_text() if out.exists() else ""
    result = json.loads(out.read_text().strip().splitlines()[-1])
    assert result["job_id"] != outer_id and result["state"] == "COMPLETED"
    ranks = rank_results(Path(result["run_dir"]), result["job_id"])
    check_trained_across(result, ranks, nodes=2, tasks_per_node=1)
    assert sacct_state(result["job_id"]) == "COMPLETED"


# ----- the GPU partition (count-only GRES, no CUDA) ----------------------------------------------------

def test_probe_shows_gpu_mapping_per_task(slurm_cluster: Path, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "submit.py", "probe", "--profile", "dev-cluster-gpu",
                           "--set", f"profile.runs_dir={tmp_path}", "--json"],
                          cwd=ROOT, env=user_env(), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    report = last_json(proc)
    tasks = sorted(report["tasks"], key=lambda t: t["rank"])
    assert [t["rank"] for t in tasks] == [0, 1, 2, 3]
    nodes = [t["node"] for t in tasks]
    assert nodes[0] == nodes[1] != nodes[2] == nodes[3] and all(n.startswith("gpu") for n in nodes)
    assert {t["master_addr"] for t in tasks} == {tasks[0]["node"]}
    for task in tasks:
        assert task["SLURM_GPUS_ON_NODE"] == "2"  # --gpus-per-node=2 was scheduled, one task per GPU
        if task["CUDA_VISIBLE_DEVICES"] is not None:  # set only where gres.conf names device files
            assert len(task["CUDA_VISIBLE_DEVICES"].split(",")) == 2
    # Each line of the human report names the rank, its node and its GPU variables.
    lines = [line for line in proc.stdout.splitlines() if line.startswith("rank ")]
    assert len(lines) == 4 and all("SLURM_GPUS_ON_NODE=2" in line and "node gpu" in line for line in lines)
    assert sacct_state(report["job_id"]) == "COMPLETED"  # waits for accounting to catch up
    tres = slurm("sacct", "-j", report["job_id"], "-X", "-n", "-P", "-o", "AllocTRES")
    assert "gres/gpu=4" in tres  # 2 nodes x 2 GPUs really allocated


@pytest.mark.parametrize("args,message", [
    (["--set", "profile.gpus_per_node=8", "--set", "profile.tasks_per_node=8"],
     "profile.gpus_per_node: 8 exceeds the 4 GPU(s)"),
    (["--set", "profile.sbatch_extra.exclude=gpu9"], "sbatch refused the job, nothing was queued"),
])
def test_probe_refuses_like_submit(slurm_cluster: Path, tmp_path: Path, args: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, "submit.py", "probe", "--profile", "dev-cluster-gpu", *args,
                           "--set", f"profile.runs_dir={tmp_path}"],
                          cwd=ROOT, env=user_env(), capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # no run folder left behind


def test_trainer_on_a_gpu_node_without_cuda_stops_clearly(slurm_cluster: Path, tmp_path: Path) -> None:
    proc = submit("--profile", "dev-cluster-gpu", "--job", "digits", "--set", "job.epochs=1",
                  "--set", f"profile.runs_dir={tmp_path}", "--wait", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    summary = proc.stderr.splitlines()[0]
    assert summary.startswith("error: the run failed on rank")
    assert "GpuUnavailableError: the profile asks for GPUs but CUDA is not available on node gpu" in summary
    info = last_json(proc)
    assert info["state"] == "FAILED" and "CUDA is not available" in info["error"]
