"""Benchmark: submitting an identical 100-point sweep again, against its first submission (docs/signatures.md).

    python benchmarks/reuse.py [--points 100] [--repeat 3]

Each round submits a fresh `--points`-point sweep (a grid over `seed`, one SLURM job array) to the dev cluster,
held pending (`--begin` an hour away) so that it costs the cluster nothing, then submits the identical sweep
again: the second is answered with the first (`"reused": true`, the same run folder and jobs: nothing queued). Then it is
cancelled. Columns: the wall seconds of each `python submit.py` process, as a user waits for it, and their
ratio. Goal: the second under 1 s.
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


def submit(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, dict[str, object]]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, common.SUBMIT, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"submit.py {' '.join(argv)}: {done.stderr[-2000:]}")
    return took, json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=common.positive, default=100)
    parser.add_argument("--repeat", type=common.positive, default=3)
    args = parser.parse_args()
    from launcher import devcluster  # (common put the project on sys.path)

    if not devcluster.is_up():
        raise SystemExit("the dev cluster is not up: python -m launcher.devcluster up")
    env = {**os.environ, **devcluster.client_env(), "PYTHONPATH": str(common.ROOT)}
    work = Path(tempfile.mkdtemp(prefix="bench-reuse-"))
    firsts, seconds = [], []
    for round_ in range(args.repeat):
        sweep = work / f"sweep{round_}.yaml"  # a new seed range per round: a sweep no earlier round made
        seeds = ", ".join(str(round_ * args.points + i) for i in range(args.points))
        sweep.write_text(f"extends: digits\nname: reuse{args.points}\nepochs: 1\nsweep:\n  grid:\n    seed: [{seeds}]\n")
        argv = ["--profile", "dev-cluster", "--job", str(sweep), "--set", f"profile.runs_dir={work / 'runs'}",
                "--set", "profile.sbatch_extra.begin=now+1hour", "--json"]
        first_s, first = submit(argv, env, work)
        again_s, again = submit(argv, env, work)
        subprocess.run(["scancel", str(first["job_id"])], env=env, check=False)
        if again.get("reused") is not True or again.get("run_dir") != first["run_dir"] or "reused" in first:
            raise SystemExit(f"the second submission was not answered with the first: {again}")
        firsts.append(first_s)
        seconds.append(again_s)
    first_m, again_m = statistics.median(firsts), statistics.median(seconds)
    print(common.table(["submission", f"median s ({args.repeat} rounds)", "fastest s"],
                       [[f"first: {args.points}-point sweep, one sbatch", first_m, min(firsts)],
                        ["identical again: answered, nothing queued", again_m, min(seconds)]]))
    print(f"\nsecond/first: {again_m / first_m:.2f}; goal: the second under 1 s: "
          f"{'met' if again_m < 1.0 else 'NOT met'} ({again_m:.3f} s)")


if __name__ == "__main__":
    main()
