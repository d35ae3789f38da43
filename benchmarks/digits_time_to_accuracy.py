"""Benchmark 5: time to 97 % test accuracy on `digits` with 2 local ranks, from `python submit.py` start.

    python benchmarks/digits_time_to_accuracy.py [--repeat 3]

Two rows: the embedded default as a user runs it (`python submit.py`: 20 epochs, evaluation every 5),
where "reached" is the first evaluation at >= 97 %; and the same job evaluated every epoch and
stopped there (`job.stop_at_accuracy=0.97`). Times are wall-clock from the submit.py process's start
to the epoch-end timestamp in metrics.jsonl (after that epoch's evaluation), and to the process's
exit. Goal: <= 15 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

TARGET = 0.97


def time_to(target: float, args: list[str]) -> tuple[float | None, float, float]:
    result, wall, started = common.submit(args)
    reached = next((m["time"] - started for m in common.metrics(result["run_dir"])
                    if m.get("test_accuracy", 0) >= target), None)
    return reached, wall, result["test_accuracy"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(common.load_note())
    variants = [("python submit.py (the embedded default)", []),
                ("... --set job.stop_at_accuracy=0.97 --set job.eval_every_epochs=1",
                 ["--set", f"job.stop_at_accuracy={TARGET}", "--set", "job.eval_every_epochs=1"])]
    rows = []
    for label, extra in variants:
        runs = [time_to(TARGET, extra) for _ in range(args.repeat)]
        reached = [r[0] for r in runs if r[0] is not None]
        rows.append([label, statistics.median(reached) if reached else "not reached",
                     statistics.median(r[1] for r in runs), statistics.median(r[2] for r in runs),
                     f"{len(reached)}/{len(runs)}"])
    print(f"\ndigits, 2 local ranks (profile local), median of {args.repeat} runs:\n")
    print(common.table(["command", "s to >= 97 %", "s to exit", "final accuracy", "runs reaching 97 %"], rows))
    print("goal: <= 15 s")


if __name__ == "__main__":
    main()
