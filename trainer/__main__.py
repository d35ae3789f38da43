"""Run the trainer without the submitter, e.g. under torchrun:

    torchrun --nproc_per_node=2 -m trainer --job digits --run-dir runs/torchrun-digits

Every process reads its rank from torchrun's variables (see trainer.distributed.environment) and runs the
job through the same dispatcher as the submitter's tasks (trainer.runners.dispatch).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from trainer.config.job import RunSettings, load_job
from trainer.config.schema import ConfigError
from trainer.rank.stopping import StopRequested
from trainer.rank.stopping import signal_number as stop_signal_number
from trainer.runners import dispatch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--job", default="digits", help="job name (jobs/NAME.yaml) or path")
    parser.add_argument("--run-dir", default="runs/trainer", help="where metrics and checkpoints go")
    parser.add_argument("--data-dir", default="data", help="where datasets are (or are downloaded to)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads per process")
    parser.add_argument("--gpus", action="store_true", help="train on CUDA (NCCL); fails without CUDA")
    args = parser.parse_args(argv)
    try:
        job = load_job(args.job)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    settings = RunSettings(run_dir=args.run_dir, data_dir=args.data_dir, use_gpus=args.gpus, threads=args.threads)
    try:
        result = dispatch.run_job(job, settings)
    except StopRequested as stop:
        # Not an error: every rank checkpointed at the same step. The same command resumes from it.
        if int(os.environ.get("RANK", "0")) == 0:
            print(f"{stop}; checkpoint in {args.run_dir}/checkpoints: run the same command to resume",
                  file=sys.stderr)
        return 128 + (stop_signal_number(stop.signal_name) or 15)
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
