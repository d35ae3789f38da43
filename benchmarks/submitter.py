"""Benchmark 3: how long the submitter takes: `--dry-run`, and a real 1,000-task job array on the dev cluster.

    python benchmarks/submitter.py [--repeat 5]

Each command runs `--repeat` times as a fresh process (what a user waits for); the table shows the
median and the fastest. The 1,000-task array goes to the shared dev cluster (`python -m
launcher.devcluster status`) and is cancelled with scancel as soon as sbatch returned, so the cluster
is not flooded. Goals: dry run < 0.5 s; 1,000-task submission < dry run + 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
    return time.perf_counter() - t0, proc


def cluster_env() -> dict[str, str] | None:
    proc = subprocess.run([sys.executable, "-m", "launcher.devcluster", "env"], capture_output=True, text=True,
                          cwd=common.ROOT)
    if proc.returncode != 0:
        return None
    env = {}
    for line in proc.stdout.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line[len("export "):].partition("=")
            env[key] = value.strip("'\"")
    up = subprocess.run([sys.executable, "-m", "launcher.devcluster", "status"], capture_output=True, text=True,
                        cwd=common.ROOT)
    return env if up.returncode == 0 and "cluster is UP" in up.stdout else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=1000)
    args = parser.parse_args()
    print(common.load_note())
    work = Path(tempfile.mkdtemp(prefix="bench-submitter-"))
    sweep = work / "array.yaml"
    seeds = ", ".join(str(i) for i in range(args.tasks))
    sweep.write_text(f"extends: digits\nname: array{args.tasks}\nepochs: 1\nsweep:\n  grid:\n    seed: [{seeds}]\n")
    env = {**os.environ, "PYTHONPATH": str(common.ROOT)}
    submit = [sys.executable, common.SUBMIT]
    rows: list[list[object]] = []

    def measure(label: str, cmd: list[str], extra_env: dict[str, str] | None = None) -> float:
        times = []
        for _ in range(args.repeat):
            seconds, proc = timed(cmd, {**env, **(extra_env or {})}, work)
            if proc.returncode != 0:
                raise RuntimeError(f"{label}: {proc.stderr[-2000:]}")
            times.append(seconds)
        rows.append([label, statistics.median(times), min(times)])
        return statistics.median(times)

    measure("python -c pass (interpreter start, for scale)", [sys.executable, "-c", "pass"])
    measure("submit.py --help", [*submit, "--help"])
    dry = measure("submit.py --dry-run (local profile, digits)", [*submit, "--dry-run"])
    slurm = cluster_env()
    submit_s = None
    if slurm is None:
        print("NOTE: the dev cluster is not up (python -m launcher.devcluster status): SLURM rows skipped")
    else:
        measure("submit.py --profile dev-cluster --dry-run", [*submit, "--profile", "dev-cluster", "--dry-run"],
                slurm)
        dry_array = measure(f"submit.py --profile dev-cluster --job <{args.tasks}-task sweep> --dry-run",
                            [*submit, "--profile", "dev-cluster", "--job", str(sweep), "--dry-run"], slurm)
        # The real thing, once: one sbatch for the whole array, cancelled right away.
        seconds, proc = timed([*submit, "--profile", "dev-cluster", "--job", str(sweep), "--json"],
                              {**env, **slurm}, work)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        job_id = json.loads(proc.stdout.strip().splitlines()[-1])["job_id"]
        subprocess.run(["scancel", job_id], env={**env, **slurm}, check=False)
        rows.append([f"submit.py --profile dev-cluster --job <{args.tasks}-task sweep> (sbatch, then scancel)",
                     seconds, seconds])
        submit_s = seconds - dry_array
    print(f"\nWall time of fresh `python submit.py ...` processes ({args.repeat} runs each; seconds):\n")
    print(common.table(["command", "median s", "fastest s"], rows))
    print(f"\ngoal: dry run < 0.5 s -> {dry:.3f} s")
    if submit_s is not None:
        print(f"goal: {args.tasks}-task submission < its dry run + 1 s -> dry run + {submit_s:.3f} s")


if __name__ == "__main__":
    main()
