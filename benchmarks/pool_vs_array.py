"""Benchmark: the same sweep as a job array and as a pool (`sweep_runner: pool`), side by side, on the
SLURM dev cluster.

    python benchmarks/pool_vs_array.py [--points 100] [--parallel 8] [--steps 350]

The sweep: `--points` points of `tests.userpkg.pointfn:train` (a small MLP on 2,048 samples, `--steps`
full-batch steps: about a second of training on this machine), one rank each (profile dev-cluster,
`nodes: 1`), at most `--parallel` at once: `array_parallelism` for the array, `pool_workers` for the pool.
Each is submitted with `submit.py --wait` from the repository root, the array first.

Columns: wall time from `submit.py` start until every result is in (`--wait` returned); the function's own
time per point (its `fit_s`: the training loop, measured inside it), and the CPU time its thread spent in it
(`fit_cpu_s`: a function slower in wall time but not in CPU time waited for a CPU: the machine's load, not the
runner), and its ratio to the array's; the overhead per point: what the
`--parallel` slots spent on anything but the function, per point: (wall x parallel - sum of fit_s) / points
(start-up, scheduling, waiting for a slot); and each point's own time less its function time (an array
task's sacct Elapsed; a pool point's time from its claim to its result), the part of the overhead each
point pays itself.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
import yaml  # noqa: E402
from submitter import cluster_env  # noqa: E402


def job(points: int, steps: int) -> Path:
    path = common.CACHE / f"pool-vs-array-{points}-{steps}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({
        "name": "pool-vs-array", "entrypoint": "tests.userpkg.pointfn:train", "target_metric": "loss",
        "target_mode": "min", "config": {"width": 128, "samples": 2048, "steps": steps},
        "sweep": {"tasks": [{"config.lr": round(0.0001 * (i + 1), 5)} for i in range(points)]}}))
    return path


def elapsed(run_dir: Path, env: dict[str, str]) -> list[float]:
    """Each task's own time (sacct Elapsed for the array's tasks, a pool point's claim-to-result time)."""
    done = subprocess.run([sys.executable, common.SUBMIT, "status", str(run_dir), "--json", "--no-collect"],
                          capture_output=True, text=True, cwd=common.ROOT, env=env, timeout=600)
    return [float(json.loads(line)["wall_time_s"] or 0) for line in done.stdout.splitlines() if line.strip()]


def measure(runner: str, path: Path, points: int, parallel: int, env: dict[str, str]) -> dict[str, Any]:
    payload, wall, _ = common.submit(["--profile", "dev-cluster", "--job", str(path), "--set", "profile.nodes=1",
                                      "--set", f"profile.sweep_runner={runner}", "--set", f"profile.pool_workers={parallel}",
                                      "--set", f"profile.array_parallelism={parallel}", "--wait"], timeout=7200)
    run_dir = Path(payload["run_dir"])
    results = [json.loads((run_dir / f"task-{t:04d}" / "result.json").read_text()) for t in range(points)]
    fits, cpus = [r["fit_s"] for r in results], [r["fit_cpu_s"] for r in results]
    own = elapsed(run_dir, env)
    return {"runner": runner, "wall": wall, "fit": sum(fits) / points, "cpu": sum(cpus) / points,
            "overhead": (wall * parallel - sum(fits)) / points,
            "own": sum(o - f for o, f in zip(own, fits)) / points, "run_dir": run_dir}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=common.positive, default=100)
    parser.add_argument("--parallel", type=common.positive, default=8)
    parser.add_argument("--steps", type=common.positive, default=350)
    args = parser.parse_args()
    env = cluster_env()
    if env is None:
        print("the dev cluster is not up (python -m launcher.devcluster status)", file=sys.stderr)
        sys.exit(1)
    env = {**env, "PYTHONPATH": str(common.ROOT)}
    print(common.load_note(), flush=True)
    path = job(args.points, args.steps)
    found = [measure(runner, path, args.points, args.parallel, env) for runner in ("array", "pool")]
    print(common.load_note(), flush=True)
    array, pool = found
    rows = [[f["runner"], f["wall"], f["fit"], f["cpu"], f["fit"] / array["fit"], f["overhead"], f["own"],
             array["wall"] / f["wall"], f["overhead"] / array["overhead"]] for f in found]
    print(f"\n{args.points} points, at most {args.parallel} at once, one rank each (dev cluster)\n")
    print(common.table(["runner", "wall until every result (s)", "function per point (s)", "its CPU time (s)",
                        "function / array's", "overhead per point (s)", "point's own overhead (s)", "array wall / wall",
                        "overhead / array's"], rows))
    print(f"\ngoal: pool overhead <= 1/5 of the array's ({pool['overhead'] / array['overhead']:.3f}); "
          f"pool wall >= 3x shorter ({array['wall'] / pool['wall']:.2f}x); the function's time per point within 5% of "
          f"the array's ({pool['fit'] / array['fit']:.3f}; its CPU time {pool['cpu'] / array['cpu']:.3f})")


if __name__ == "__main__":
    main()
