"""Benchmark: how much handing the function itself costs. `submit(train)` with a function pickled by value
(defined in this script's `__main__`, as in a notebook cell) against the same submission by name,
`submit(entrypoint="benchfn:train")` (the same function in a module), both measured from the call until
the handle returns (the run is queued), interleaved A B A B in one process. Goal: by value within 0.3 s
of by name.

    python benchmarks/python_api.py [--profile dev-cluster] [--repeat 5]

On a SLURM profile every run is cancelled as soon as its handle is back (the shared cluster is not kept
busy); on `local` each run (1 rank) is waited for, untimed, before the next submission. Everything is written under
~/.cache/ddp-bench/python-api (DDP_BENCH_CACHE), never into the repository.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402 - puts the checkout first on sys.path

from launcher.client import submit  # noqa: E402
from launcher.client.shipping import by_value  # noqa: E402

FUNCTION = '''def train(ctx, config):
    import torch
    torch.manual_seed(config["seed"])
    weights = torch.randn(4, 4)
    return {"norm": float(weights.norm()), "rank": ctx.rank}
'''
exec(FUNCTION)  # `train` in this module's namespace: __main__, pickled by value like a notebook cell's


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="dev-cluster")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    folder = common.CACHE / "python-api"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "benchfn.py").write_text(FUNCTION)
    sets = ["profile.nodes=1", "profile.tasks_per_node=1"]
    print(common.load_note())
    started = time.perf_counter()
    blob = by_value(train, folder, "")  # noqa: F821 - defined by exec above
    print(f"pickled by value: {len(blob)} bytes in {1000 * (time.perf_counter() - started):.1f} ms")
    times: dict[str, list[float]] = {"by name": [], "by value": []}
    for i in range(args.repeat + 1):  # the first round warms the caches (bytecode, the page cache) and is dropped
        for variant in times:
            started = time.perf_counter()
            if variant == "by name":
                run = submit(entrypoint="benchfn:train", profile=args.profile, config={"seed": i}, sets=sets,
                             cwd=folder)
            else:
                run = submit(train, profile=args.profile, config={"seed": i}, sets=sets, cwd=folder)  # noqa: F821
            took = time.perf_counter() - started
            if i:
                times[variant].append(took)
            if args.profile == "local":
                run.result()  # (not timed) the next submission does not compete with this run's ranks
            else:
                run.cancel()
    rows = [(name, statistics.median(t), min(t)) for name, t in times.items()]
    print(f"\n`submit()` until the handle returns, profile {args.profile}, {args.repeat} runs each (A B interleaved)\n")
    print("| variant | median s | fastest s |\n|---|---|---|")
    for name, median, fastest in rows:
        print(f"| {name} | {median:.3f} | {fastest:.3f} |")
    difference = rows[1][1] - rows[0][1]
    print(f"\nby value - by name (medians): {difference:+.3f} s (goal: <= 0.3 s)")


if __name__ == "__main__":
    main()
