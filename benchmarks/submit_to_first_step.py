"""Benchmark 4: from `python submit.py` to the first training step on the dev cluster, phase by phase.

    python benchmarks/submit_to_first_step.py [--job digits] [--repeat 3]

Submits the job to the SLURM dev cluster (profile dev-cluster: 2 nodes x 1 rank) and reads the
marks every rank writes to RUN_DIR/startup/rank-N.json (trainer/rank/timing.py): the process's start
(from /proc), run() entered, process group formed, data ready, first step done. Phases:

  submitter     submit.py start -> sbatch returned (the submit.py process's wall time)
  queue+launch  submit.py exited -> the rank's Python process started (scheduling, batch script, srun);
                can be slightly negative: submit.py writes its run record after sbatch returned
  imports       process start -> run() entered: Python, submitit, unpickling the task, torch, the trainer
                (torch's share is measured separately: a fresh `import torch` on this machine)
  init_pg       init_process_group (TCPStore rendezvous + gloo)
  trainer setup deterministic mode and seeding; torch.use_deterministic_algorithms imports torch._dynamo
                (~1.2 s here), which torch.optim would import a moment later anyway
  data          loading and preparing the data (uint8 tensors)
  first step    model, DDP (broadcast of the weights), the first forward/backward/step

Per phase the slowest rank is shown (every rank waits for it at the first collective).
Goal: submit -> first step <= torch import + 3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from submitter import cluster_env  # noqa: E402

PHASES = [("queue+launch", "sbatch_done", "process_start"), ("imports", "process_start", "run"),
          ("init_process_group", "run", "process_group"), ("trainer setup", "process_group", "data_start"),
          ("data", "data_start", "data"), ("first step", "data", "first_step")]


def torch_import_seconds(repeat: int = 3) -> float:
    code = "import time; t = time.perf_counter(); import torch; print(time.perf_counter() - t)"
    times = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
             for _ in range(repeat)]
    return statistics.median(times)


def one_run(job: str, slurm: dict[str, str]) -> dict[str, float]:
    env = {**os.environ, **slurm, "PYTHONPATH": str(common.ROOT)}
    t0 = time.time()
    proc = subprocess.run([sys.executable, common.SUBMIT, "--profile", "dev-cluster", "--job", job,
                           "--set", "job.epochs=1", "--set", f"profile.runs_dir={common.CACHE / 'runs'}", "--json", "--rerun"],
                          capture_output=True, text=True, env=env, cwd=common.ROOT, timeout=300)
    sbatch_done = time.time()
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    payload = json.loads(proc.stdout.strip().splitlines()[-1])
    run_dir, job_id = Path(payload["run_dir"]), payload["job_id"]
    folder = run_dir / "startup"
    deadline = time.time() + 300
    while time.time() < deadline:
        files = sorted(folder.glob("rank-*.json")) if folder.is_dir() else []
        if len(files) >= 2:
            break
        time.sleep(0.2)
    else:
        subprocess.run(["scancel", job_id], env=env, check=False)
        raise RuntimeError(f"no startup marks in {folder} after 300 s")
    ranks = [json.loads(f.read_text()) for f in files]
    # Let the job finish before the next run (the cluster is shared; runs must not overlap).
    while subprocess.run(["squeue", "-h", "-j", job_id], capture_output=True, text=True, env=env).stdout.strip():
        time.sleep(0.5)
    out = {"submitter": sbatch_done - t0, "total": max(r["first_step"] for r in ranks) - t0}
    for name, start, end in PHASES:
        out[name] = max((r[end] - (sbatch_done if start == "sbatch_done" else r[start])) for r in ranks)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--job", default="digits")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(common.load_note())
    slurm = cluster_env()
    if slurm is None:
        print("The dev cluster is not up: start it with `python -m launcher.devcluster up --nodes 4`.")
        sys.exit(1)
    torch_s = torch_import_seconds()
    runs = [one_run(args.job, slurm) for _ in range(args.repeat)]
    names = ["submitter", *[p[0] for p in PHASES], "total"]
    rows = [[name, *[r[name] for r in runs], statistics.median(r[name] for r in runs)] for name in names]
    print(f"\nsubmit.py --profile dev-cluster --job {args.job} -> first training step (seconds; slowest rank):\n")
    print(common.table(["phase", *[f"run {i + 1}" for i in range(len(runs))], "median"], rows))
    total = statistics.median(r["total"] for r in runs)
    print(f"\nfresh `import torch` on this machine: {torch_s:.2f} s (inside 'imports')")
    print(f"goal: total <= torch import + 3 s = {torch_s + 3:.2f} s -> {total:.2f} s "
          f"(torch import + {total - torch_s:.2f} s)")


if __name__ == "__main__":
    main()
