"""`script:` ranks as torchrun 2.x workers (issue 19): torchrun's whole worker environment, a failure
told by the script's own exception (torch's @record error file, else its last exception line), no
script outliving its task, and CUDA_VISIBLE_DEVICES as the caller set it (docs/scripts-environment.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT, last_json, run_submit, wait_until
from trainer.distributed import environment
from trainer.runners import childproc

TORCHRUN_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                 "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
                 "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
                 "TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_USE_AGENT_STORE", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                 "CUDA_VISIBLE_DEVICES")

SHOW = ("import json, os\nkeys = %r\nenv = {k: os.environ.get(k) for k in keys}\n"
        "open(os.environ['TRAINER_RUN_DIR'] + f\"/env-{env['RANK']}.json\", 'w').write(json.dumps(env))\n"
        "print(json.dumps({'rank_seen': int(env['RANK'])}))\n") % (TORCHRUN_KEYS,)


def seen_env(tmp_path: Path, env: dict[str, str] | None = None, unset: tuple[str, ...] = ()) -> list[dict]:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "show.py").write_text(SHOW)
    (tmp_path / "show.yaml").write_text("script: show.py\n")
    proc = run_submit(["--job", "show.yaml", "--json"], cwd=tmp_path, env=env, unset=unset)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(last_json(proc.stdout)["run_dir"])
    return [json.loads((run_dir / f"env-{r}.json").read_text()) for r in (0, 1)]


def test_script_ranks_get_torchruns_whole_worker_environment(tmp_path: Path) -> None:
    seen = seen_env(tmp_path, env={"TORCHELASTIC_USE_AGENT_STORE": "True"})
    for rank, s in enumerate(seen):
        assert s["RANK"] == s["ROLE_RANK"] == s["LOCAL_RANK"] == str(rank)
        assert s["WORLD_SIZE"] == s["ROLE_WORLD_SIZE"] == s["LOCAL_WORLD_SIZE"] == "2"
        assert (s["GROUP_RANK"], s["GROUP_WORLD_SIZE"], s["ROLE_NAME"]) == ("0", "1", "default")
        assert s["TORCHELASTIC_RESTART_COUNT"] == "0" and s["TORCHELASTIC_MAX_RESTARTS"] == "3"
        assert s["TORCHELASTIC_USE_AGENT_STORE"] is None and s["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
        assert s["TORCHELASTIC_ERROR_FILE"] and not Path(s["TORCHELASTIC_ERROR_FILE"]).exists()
    assert seen[0]["TORCHELASTIC_ERROR_FILE"] != seen[1]["TORCHELASTIC_ERROR_FILE"]  # one per rank
    assert len({s["TORCHELASTIC_RUN_ID"] for s in seen}) == 1 and seen[0]["TORCHELASTIC_RUN_ID"] != "none"


def test_local_executor_leaves_cuda_visible_devices_as_the_caller_set_it(tmp_path: Path) -> None:
    # submitit's LocalExecutor sets CUDA_VISIBLE_DEVICES to range(gpus_per_node) ("" for a CPU profile).
    assert {s["CUDA_VISIBLE_DEVICES"] for s in seen_env(tmp_path / "a", env={"CUDA_VISIBLE_DEVICES": "3,1"})} \
        == {"3,1"}
    assert {s["CUDA_VISIBLE_DEVICES"] for s in seen_env(tmp_path / "b", unset=("CUDA_VISIBLE_DEVICES",))} == {None}


def test_node_rank_and_count_from_each_launcher() -> None:
    slurm = environment.resolve({"SLURM_STEP_ID": "0", "SLURM_PROCID": "3", "SLURM_NTASKS": "4",
                                 "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_NNODES": "2",
                                 "SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "n[1-2]"})
    assert (slurm.node_rank, slurm.num_nodes) == (1, 2)
    local = environment.resolve({"SUBMITIT_LOCAL_JOB_ID": "9", "SUBMITIT_LOCAL_GLOBALID": "1",
                                 "SUBMITIT_LOCAL_NTASKS": "2", "SUBMITIT_LOCAL_LOCALID": "1"})
    assert (local.node_rank, local.num_nodes) == (0, 1)
    torchrun = environment.resolve({"RANK": "1", "WORLD_SIZE": "2", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2"})
    assert (torchrun.node_rank, torchrun.num_nodes) == (1, 2)


def failing(tmp_path: Path, body: str) -> dict:
    (tmp_path / "x.py").write_text(body)
    (tmp_path / "x.yaml").write_text("script: x.py\n")
    proc = run_submit(["--job", "x.yaml", "--json"], cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    out = last_json(proc.stdout)
    assert "ValueError: boom" in proc.stderr and "rank 1" in out["error"], (proc.stderr[-3000:], out)
    return out


def test_a_failing_script_names_its_exception_and_rank(tmp_path: Path) -> None:
    out = failing(tmp_path, "import os\nif os.environ['RANK'] == '1':\n    raise ValueError('boom')\n")
    assert "ValueError: boom" in out["error"]


def test_records_error_file_reaches_the_failure(tmp_path: Path) -> None:
    # @record writes TORCHELASTIC_ERROR_FILE; its message ("ValueError: boom") is the failure's.
    out = failing(tmp_path, "import os\nfrom torch.distributed.elastic.multiprocessing.errors import record\n"
                  "@record\ndef main():\n    if os.environ['RANK'] == '1':\n        raise ValueError('boom')\n"
                  "main()\n")
    assert "ValueError: boom" in out["error"]


def test_recorded_error_and_last_exception_line(tmp_path: Path) -> None:
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

    path = tmp_path / "error.json"
    os.environ["TORCHELASTIC_ERROR_FILE"] = str(path)
    try:
        try:
            raise ValueError("bad lr")
        except ValueError as err:
            ErrorHandler().record_exception(err)
    finally:
        del os.environ["TORCHELASTIC_ERROR_FILE"]
    assert childproc.recorded_error(str(path)) == "ValueError: bad lr"
    assert childproc.recorded_error(str(tmp_path / "none.json")) == ""
    tail = childproc.StderrTail(iter(["x\n", "Traceback (most recent call last):\n", '  File "a.py", line 1\n',
                                      "    f()\n", "KeyError: 'lr'\n", "more\n"]))
    tail.join()
    assert tail.last_exception() == "KeyError: 'lr'"


def run_processes(marker: str) -> list[int]:
    """Processes whose command line names `marker` (this machine: local and dev-cluster tasks alike)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            pass
    return [p for p in found if p != os.getpid()]


SURVIVOR = ("import os, sys, time\nif os.environ['RANK'] == '1':\n    time.sleep(2)\n    sys.exit(5)\n"
            "time.sleep(300)\n")


def test_a_script_dies_with_its_task_when_a_peer_fails(tmp_path: Path) -> None:
    script = tmp_path / "survivor.py"
    script.write_text(SURVIVOR)
    (tmp_path / "s.yaml").write_text(f"script: {script}\n")
    started = time.monotonic()
    proc = run_submit(["--job", "s.yaml", "--json"], cwd=tmp_path)
    assert proc.returncode == 1 and "exited with status 5 on rank 1" in proc.stderr, proc.stderr[-3000:]
    assert time.monotonic() - started < 200  # not the 300 s of rank 0's script
    wait_until(lambda: not run_processes(str(script)), 10, "no process of the run left")


@pytest.mark.slurm
def test_a_script_dies_with_its_task_on_two_dev_cluster_nodes(slurm_cluster: Path, tmp_path: Path) -> None:
    # A guard rather than a regression test: the dev cluster's slurmd already ends a step's processes.
    script = tmp_path / "survivor.py"
    script.write_text(SURVIVOR)
    (tmp_path / "s.yaml").write_text(f"script: {script}\n")
    proc = subprocess.run([sys.executable, str(ROOT / "submit.py"), "--profile", "dev-cluster", "--job",
                           str(tmp_path / "s.yaml"), "--set", "profile.nodes=2", "--set",
                           f"profile.runs_dir={tmp_path / 'runs'}", "--wait", "--json"], cwd=ROOT, text=True,
                          capture_output=True, timeout=400, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    wait_until(lambda: not run_processes(str(script)), 10, "no process of the run left")


def test_a_script_rank_gets_no_more_threads_than_its_task_may_use(tmp_path: Path) -> None:
    """The thread cap of a function rank holds for a script rank too (trainer.distributed.threads): a
    profile asking for 64 CPUs per task on this machine gives each script the CPUs its task may run
    on, in OMP_NUM_THREADS, MKL_NUM_THREADS and OPENBLAS_NUM_THREADS, and in the result's `threads`."""
    usable = len(os.sched_getaffinity(0))
    (tmp_path / "threads.py").write_text(
        "import json, os\nprint(json.dumps({k: int(os.environ[k]) for k in "
        "('OMP_NUM_THREADS', 'MKL_NUM_THREADS', 'OPENBLAS_NUM_THREADS')}))\n")
    (tmp_path / "threads.yaml").write_text("script: threads.py\n")
    proc = run_submit(["--job", "threads.yaml", "--set", "profile.cpus_per_task=64", "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = last_json(proc.stdout)
    assert usable < 64
    assert [result["OMP_NUM_THREADS"], result["MKL_NUM_THREADS"], result["OPENBLAS_NUM_THREADS"]] == [usable] * 3
    assert result["threads"] == usable
