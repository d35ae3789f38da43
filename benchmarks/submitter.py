"""Benchmark 3: how long the submitter takes: `--dry-run`, and a real 1,000-task job array on the dev cluster.

    python benchmarks/submitter.py [--repeat 5] [--against REV]

Each command runs `--repeat` times as a fresh process (what a user waits for); the table shows the
median and the fastest. `--against REV` (e.g. a commit before a refactor) also runs every command
from a checkout of REV, interleaved with this tree's runs (A B A B ...), and adds REV's median and
the ratio this/REV: a ratio at or below 1 means no slower. The 1,000-task array goes to the shared dev cluster (`python -m
launcher.devcluster status`) and is cancelled with scancel as soon as sbatch returned, so the cluster
is not flooded. Goals: dry run < 0.5 s; 1,000-task submission < dry run + 1 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Wall seconds, CPU seconds (user + system of the process and the children it waited for) and the result.
    CPU time is the steadier of the two on a shared machine: waiting for a core is not counted."""
    # With cached bytecode, as users run it (pip compiles an installed package; a checkout caches
    # __pycache__ on its first run): a PYTHONDONTWRITEBYTECODE=1 environment would otherwise make every
    # run compile every module it imports, and time the compiler instead of the submitter.
    env = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
    wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), proc


def cluster_env() -> dict[str, str] | None:
    """What SLURM's commands need to reach the dev cluster (SLURM_CONF, and PATH where the release up is not
    this machine's own); None when it is not up."""
    from launcher import devcluster  # (common put the project on sys.path)

    return devcluster.client_env() if devcluster.is_up() else None


@contextlib.contextmanager
def checkout(rev: str | None) -> Iterator[Path | None]:
    """A detached worktree of `rev` sharing this tree's dev cluster state, removed afterwards."""
    if rev is None:
        yield None
        return
    folder = Path(tempfile.mkdtemp(prefix="bench-against-")) / "tree"
    subprocess.run(["git", "-C", str(common.ROOT), "worktree", "add", "--detach", "-q", str(folder), rev], check=True)
    (folder / ".dev-cluster").symlink_to(common.ROOT / ".dev-cluster")
    try:
        yield folder
    finally:
        subprocess.run(["git", "-C", str(common.ROOT), "worktree", "remove", "--force", str(folder)], check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--against", metavar="REV", help="also time a checkout of REV, interleaved (ratio this/REV)")
    args = parser.parse_args()
    print(common.load_note())
    with checkout(args.against) as other:
        run(args, [("this", common.ROOT)] + ([(args.against, other)] if other else []))


def rerun_words(root: Path) -> list[str]:
    """Each submission a new run: an identical one is otherwise answered with the first (docs/signatures.md); a
    tree from before that has no --rerun and needs none."""
    return ["--rerun"] if "--rerun" in (root / "launcher/commands/main.py").read_text() else []


def run(args: argparse.Namespace, trees: list[tuple[str, Path]]) -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-submitter-"))
    sweep = work / "array.yaml"
    seeds = ", ".join(str(i) for i in range(args.tasks))
    sweep.write_text(f"extends: digits\nname: array{args.tasks}\nepochs: 1\nsweep:\n  grid:\n    seed: [{seeds}]\n")
    rows: list[list[object]] = []

    def command(root: Path, argv: list[str]) -> tuple[list[str], dict[str, str]]:
        return [sys.executable, str(root / "submit.py"), *argv], {**os.environ, "PYTHONPATH": str(root)}

    def measure(label: str, argv: list[str] | None, extra_env: dict[str, str] | None = None) -> float:
        """Median seconds of this tree's runs; `argv` None: `python -c pass`, for scale."""
        times: dict[str, list[float]] = {name: [] for name, _ in trees}
        cpu: dict[str, list[float]] = {name: [] for name, _ in trees}
        for name, root in trees:  # untimed: writes each tree's bytecode cache (see timed)
            cmd, env = command(root, argv) if argv is not None else ([sys.executable, "-c", "pass"], dict(os.environ))
            timed(cmd, {**env, **(extra_env or {})}, work)
        for _ in range(args.repeat):
            for name, root in trees:  # interleaved, so drift in the machine's speed hits both alike
                cmd, env = command(root, argv) if argv is not None else ([sys.executable, "-c", "pass"], dict(os.environ))
                seconds, cpu_s, proc = timed(cmd, {**env, **(extra_env or {})}, work)
                if proc.returncode != 0:
                    raise RuntimeError(f"{label} ({name}): {proc.stderr[-2000:]}")
                times[name].append(seconds)
                cpu[name].append(cpu_s)
        rows.append(row_of(label, times, cpu))
        return statistics.median(times["this"])

    def row_of(label: str, times: dict[str, list[float]], cpu: dict[str, list[float]]) -> list[object]:
        mine, mine_cpu = statistics.median(times["this"]), statistics.median(cpu["this"])
        row: list[object] = [label, mine, min(times["this"])]
        if len(trees) > 1:
            other = trees[1][0]
            row += [statistics.median(times[other]), mine / statistics.median(times[other])]
        row.append(mine_cpu)
        if len(trees) > 1:
            row.append(mine_cpu / statistics.median(cpu[trees[1][0]]))
        return row

    measure("python -c pass (interpreter start, for scale)", None)
    measure("submit.py --help", ["--help"])
    dry = measure("submit.py --dry-run (local profile, digits)", ["--dry-run"])
    slurm = cluster_env()
    submit_s = None
    if slurm is None:
        print("NOTE: the dev cluster is not up (python -m launcher.devcluster status): SLURM rows skipped")
    else:
        measure("submit.py --profile dev-cluster --dry-run", ["--profile", "dev-cluster", "--dry-run"], slurm)
        dry_array = measure(f"submit.py --profile dev-cluster --job <{args.tasks}-task sweep> --dry-run",
                            ["--profile", "dev-cluster", "--job", str(sweep), "--dry-run"], slurm)
        # The real thing, 3 times per tree, interleaved: one sbatch for the whole array, cancelled
        # right away (a single run swings by a third with the controller's and the machine's load).
        real: dict[str, list[float]] = {name: [] for name, _ in trees}
        real_cpu: dict[str, list[float]] = {name: [] for name, _ in trees}
        rerun = {name: rerun_words(root) for name, root in trees}
        for _ in range(3):
            for name, root in trees:
                cmd, env = command(root, ["--profile", "dev-cluster", "--job", str(sweep), "--json", *rerun[name]])
                seconds, cpu_s, proc = timed(cmd, {**env, **slurm}, work)
                if proc.returncode != 0:
                    raise RuntimeError(f"{name}: {proc.stderr[-2000:]}")
                real_cpu[name].append(cpu_s)
                job_id = json.loads(proc.stdout.strip().splitlines()[-1])["job_id"]
                subprocess.run(["scancel", job_id], env={**env, **slurm}, check=False)
                real[name].append(seconds)
        rows.append(row_of(f"submit.py --profile dev-cluster --job <{args.tasks}-task sweep> (sbatch, then scancel)",
                           real, real_cpu))
        submit_s = statistics.median(real["this"]) - dry_array
    headers = ["command", "median s", "fastest s"]
    if len(trees) > 1:
        headers += [f"{trees[1][0]} median s", f"this/{trees[1][0]}"]
    headers.append("CPU median s")
    if len(trees) > 1:
        headers.append(f"CPU this/{trees[1][0]}")
    print(f"\nWall and CPU time of fresh `python submit.py ...` processes ({args.repeat} runs each; seconds):\n")
    print(common.table(headers, rows))
    print(f"\ngoal: dry run < 0.5 s -> {dry:.3f} s")
    if submit_s is not None:
        print(f"goal: {args.tasks}-task submission < its dry run + 1 s -> dry run + {submit_s:.3f} s")


if __name__ == "__main__":
    main()
