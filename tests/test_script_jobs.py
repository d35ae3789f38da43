"""`script:` jobs: the corrected seed program (examples/seed_cifar10.py), unchanged, run once per rank
in torchrun's environment by the submitter (local, and 2 nodes of the dev cluster) and under plain
torchrun; on locally made CIFAR-10 files (trainer/recipes/cifar_files.py), never the real download."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import (ROOT, ended_after_one_requeue, killed_at_exit, last_json, preempt, rank_pid, run_submit,
                           run_submits, wait_until)
from tests.test_exact_resume import _popen_submit
from trainer.rank import events
from trainer.recipes.cifar_files import random_cifar10

SEED = ROOT / "examples" / "seed_cifar10.py"


@pytest.fixture(scope="module")
def cifar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cifar")
    random_cifar10(root)
    return root


def job(tmp_path: Path, cifar: Path, extra: str = "") -> str:
    args = ["--data", str(cifar), "--epochs", "1", "--max-steps", "4", "--no-md5"]
    (tmp_path / "seed.yaml").write_text(f"name: seed-script\nscript: {SEED}\nargs: {json.dumps(args)}\n{extra}")
    return str(tmp_path / "seed.yaml")


def test_seed_script_on_two_local_ranks_with_thread_control(tmp_path: Path, cifar: Path) -> None:
    # A ceiling, not a wait: on a loaded 2-core machine one thread a rank took 6 minutes (135 images/s).
    proc = run_submit(["--job", job(tmp_path, cifar), "--set", "profile.cpus_per_task=1", "--json"], cwd=tmp_path,
                      timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = last_json(proc.stdout)
    # The script's own last JSON line is the result; it ran with the profile's one thread per rank.
    assert result["world_size"] == 2 and result["threads"] == 1 and 0 <= result["test_accuracy"] <= 1
    assert result["epochs"] == 1 and result["images_per_second"] > 0


def test_script_relative_to_the_job_file_and_torchrun_environment(tmp_path: Path) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "show.py").write_text(
        "import json, os\nkeys = ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT',"
        " 'TORCHELASTIC_RESTART_COUNT', 'OMP_NUM_THREADS')\n"
        "env = {k: os.environ.get(k) for k in keys}\n"
        "open(os.environ['TRAINER_RUN_DIR'] + f\"/env-{env['RANK']}.json\", 'w').write(json.dumps(env))\n"
        "print(json.dumps({'rank_seen': int(env['RANK'])}))\n")
    (tmp_path / "jobs" / "show.yaml").write_text("script: show.py\n")
    proc = run_submit(["--job", "jobs/show.yaml", "--json"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(last_json(proc.stdout)["run_dir"])
    seen = [json.loads((run_dir / f"env-{r}.json").read_text()) for r in (0, 1)]
    assert [s["RANK"] for s in seen] == ["0", "1"] and {s["WORLD_SIZE"] for s in seen} == {"2"}
    assert [s["LOCAL_RANK"] for s in seen] == ["0", "1"] and {s["LOCAL_WORLD_SIZE"] for s in seen} == {"2"}
    assert len({s["MASTER_PORT"] for s in seen}) == 1 and {s["TORCHELASTIC_RESTART_COUNT"] for s in seen} == {"0"}
    assert {s["OMP_NUM_THREADS"] for s in seen} == {"1"}


def test_failing_script_fails_the_run_naming_the_rank(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("import os, sys\nsys.exit(3 if os.environ['RANK'] == '1' else 0)\n")
    (tmp_path / "bad.yaml").write_text("script: bad.py\n")
    proc = run_submit(["--job", "bad.yaml"], cwd=tmp_path)
    assert proc.returncode == 1 and "exited with status 3 on rank 1" in proc.stderr


def test_seed_script_under_plain_torchrun(tmp_path: Path, cifar: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(SEED), "--data", str(cifar), "--epochs", "1", "--max-steps", "4", "--no-md5"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)})  # (as installed)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 0 <= json.loads(proc.stdout.strip().splitlines()[-1])["test_accuracy"] <= 1


@pytest.mark.slurm
def test_seed_script_on_two_dev_cluster_nodes(slurm_cluster: Path, tmp_path: Path, cifar: Path) -> None:
    proc = run_submit(["--profile", "dev-cluster", "--job", job(tmp_path, cifar), "--set", "profile.nodes=2",
                       "--set", f"profile.runs_dir={tmp_path / 'runs'}", "--wait", "--json"], cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = last_json(proc.stdout)
    assert result["world_size"] == 2 and len(set(result["nodes"])) == 2 and 0 <= result["test_accuracy"] <= 1


# ----- the same LeNet as an entrypoint (examples/lenet_entrypoint.py), with exact resume -------------

def lenet_job(tmp_path: Path, cifar: Path) -> str:
    text = (ROOT / "examples" / "lenet-entrypoint.yaml").read_text()
    text = text.replace("  data: data\n  epochs: 10\n", f"  data: {cifar}\n  epochs: 2\n  steps_per_epoch: 4\n"
                        "  no_md5: true\n")
    (tmp_path / "lenet.yaml").write_text(f"{text}code_dir: {ROOT / 'examples'}\nlog_every_steps: 1000\n")
    return str(tmp_path / "lenet.yaml")


def test_lenet_entrypoint_requeued_mid_epoch_ends_bitwise_identical(tmp_path: Path, cifar: Path) -> None:
    job = lenet_job(tmp_path, cifar)
    reference, stopped = run_submits([["--job", job, "--json"], ["--job", job, "--set", "job.interrupt_at=5", "--json"]],
                                     cwd=tmp_path)
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    ref, run = last_json(reference.stdout), last_json(stopped.stdout)
    assert run["restarts"] == 1 and run["steps"] == ref["steps"] == 8  # stopped mid-epoch 2
    x, y = (torch.load(Path(r["run_dir"]) / "weights.pt") for r in (ref, run))
    assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


# ----- the requeue protocol for scripts (trainer.rank.handoff) -----------------------------------------

USER_SCRIPT = ROOT / "tests" / "userpkg" / "script_job.py"
PLAIN_SCRIPT = ROOT / "tests" / "userpkg" / "plain_script.py"


def weights_equal(a: Path, b: Path) -> bool:
    x, y = torch.load(a / "weights.pt"), torch.load(b / "weights.pt")
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def test_init_script_stopped_mid_run_requeues_and_resumes_bitwise_identical(tmp_path: Path) -> None:
    # tests/userpkg/tiny.py through trainer.api.init(): 16 steps per epoch on 2 ranks, 3 epochs.
    (tmp_path / "user.yaml").write_text(f"name: user-script\nscript: {USER_SCRIPT}\nargs: ['3']\n")
    reference, proc = run_submits([["--job", "user.yaml", "--json"],
                                   ["--job", "user.yaml", "--set", "job.interrupt_at=30", "--json"]], cwd=tmp_path)
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert proc.returncode == 0, proc.stderr[-3000:]
    ref, result = last_json(reference.stdout), last_json(proc.stdout)
    assert result["restarts"] == 1 and result["restart_causes"] == {"preemption": 1}
    assert result["steps"] == ref["steps"] == 48 and result["attempt_restarts"] == 1
    log = events.read(result["run_dir"])
    stopped = [e for e in log if e["event"] == "stopped"]
    assert [e["step"] for e in stopped] == [30] and all(e["requeued"] for e in stopped)  # mid-epoch 2
    assert [e["step"] for e in log if e["event"] == "resumed"] == [30]
    assert not [e for e in log if e["event"] == "restarted_from_scratch"]
    assert weights_equal(Path(ref["run_dir"]), Path(result["run_dir"]))
    assert "Traceback" not in proc.stderr  # a stop is not a crash
    status = run_submit(["status", result["run_dir"], "--json"], cwd=tmp_path)
    assert json.loads(status.stdout.splitlines()[-1])["state"] == "completed"


def test_plain_script_stopped_by_a_signal_to_one_rank_is_requeued_and_restarts_from_scratch(tmp_path: Path) -> None:
    # 160 all-reduces 50 ms apart: ~8 s per attempt. The requeue signal goes to rank 1's task only,
    # as a user's `kill -USR2` would: rank 0's script then dies of the broken connection, and rank 0's
    # task must still read it as a stop (rank 1's note in the run folder), requeue, and both ranks
    # must leave the same way.
    (tmp_path / "plain.yaml").write_text(f"name: plain-script\nscript: {PLAIN_SCRIPT}\nargs: ['160']\n")
    proc = _popen_submit(["--job", "plain.yaml", "--json"], tmp_path)
    with killed_at_exit(proc):
        run_dir = wait_until(lambda: next((tmp_path / "runs").glob("*/plain-0-1.started"), None), 120,
                             "the script's first attempt").parent
        os.kill(wait_until(lambda: rank_pid(run_dir, 1), 30, "rank 1's pid"), signal.SIGUSR2)
        result = ended_after_one_requeue(proc, 240)
    assert result["attempt"] == 1 and result["sum"] == 320.0  # the second attempt ran all of it
    log = events.read(run_dir)
    (stopped,) = [e for e in log if e["event"] == "stopped"]
    assert stopped["requeued"] and stopped["signal"] == "USR2" and stopped["restarts_from_scratch"]
    assert [e["attempt"] for e in log if e["event"] == "restarted_from_scratch"] == [2]
    assert "it restarts from scratch" in (next((run_dir / "logs").glob("*/*_0_log.out"))).read_text()


@pytest.mark.slurm
def test_init_script_on_two_dev_cluster_nodes_preempted_requeues_and_resumes_bitwise_identical(
        slurm_cluster: Path, tmp_path: Path) -> None:
    # 8 epochs x 16 steps, 0.1 s each: ~13 s of training, time to send the preemption warning. A 30-minute
    # limit: submitit reads a signal near the time limit as a time-out, not a preemption.
    (tmp_path / "user.yaml").write_text(f"name: user-script\nscript: {USER_SCRIPT}\nargs: ['8', '0.1']\n")
    reference = run_submit(["--job", "user.yaml", "--json"], cwd=tmp_path)  # uninterrupted, 2 local ranks
    assert reference.returncode == 0, reference.stderr[-3000:]
    proc = _popen_submit(["--profile", "dev-cluster", "--job", str(tmp_path / "user.yaml"), "--set",
                          f"profile.runs_dir={tmp_path / 'slurm'}", "--set", "profile.time=30", "--wait", "--json"], ROOT)
    with killed_at_exit(proc):
        run_dir = wait_until(lambda: next((tmp_path / "slurm").glob("*/run.json"), None), 60, "the run").parent
        wait_until(lambda: (run_dir / "metrics.jsonl").exists(), 180, "the first epoch")
        preempt(run_dir)  # a preemption warning
        result = ended_after_one_requeue(proc, 400)
    assert len(set(result["nodes"])) == 2 and result["steps"] == 128
    log = events.read(run_dir)
    (stopped,) = [e for e in log if e["event"] == "stopped"]
    (resumed,) = [e for e in log if e["event"] == "resumed"]
    assert stopped["requeued"] and stopped["signal"] == "USR2" and resumed["step"] == stopped["step"] > 0
    assert weights_equal(Path(last_json(reference.stdout)["run_dir"]), run_dir)


@pytest.mark.slurm
def test_plain_script_on_two_dev_cluster_nodes_preempted_is_requeued_and_completes(slurm_cluster: Path,
                                                                                  tmp_path: Path) -> None:
    # SLURM signals every process of the step: both scripts die of USR2 at once, both tasks note it,
    # rank 0's task runs `scontrol requeue`, rank 1's waits for that decision in the shared run folder.
    (tmp_path / "plain.yaml").write_text(f"name: plain-script\nscript: {PLAIN_SCRIPT}\nargs: ['200']\n")
    proc = _popen_submit(["--profile", "dev-cluster", "--job", str(tmp_path / "plain.yaml"), "--set",
                          f"profile.runs_dir={tmp_path / 'slurm'}", "--set", "profile.time=30", "--wait", "--json"], ROOT)
    with killed_at_exit(proc):
        run_dir = wait_until(lambda: next((tmp_path / "slurm").glob("*/plain-0-1.started"), None), 180,
                             "the script's first attempt").parent
        preempt(run_dir)
        result = ended_after_one_requeue(proc, 400)
    assert result["attempt"] == 1 and result["sum"] == 400.0 and len(set(result["nodes"])) == 2
    (stopped,) = [e for e in events.read(run_dir) if e["event"] == "stopped"]
    assert stopped["requeued"] and stopped["restarts_from_scratch"]
