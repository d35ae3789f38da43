"""Probe a cluster profile: submit a tiny function (no torch) with exactly the profile's SLURM request
and print, for every task, its rank, node and the GPUs SLURM gave it.

    python -m launcher.probe --profile dev-cluster-gpu [--set profile.nodes=1] [--json]

Use it to see what a training job would get before spending a GPU allocation on it: whether the
scheduler accepts the request, how ranks are spread over nodes, which MASTER_ADDR the ranks agree on,
and how CUDA_VISIBLE_DEVICES / SLURM_*_GPUS map GPUs to tasks. Exit status as submit.py: 0 ok, 2 bad
input (nothing queued), 1 the probe job failed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import socket
import sys
from typing import Any

from launcher.cli import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, ArgumentParser
from trainer.schema import ConfigError

# What SLURM tells a task about its GPUs (which variables are set depends on the cluster's gres.conf:
# a count-only GRES sets SLURM_GPUS_ON_NODE but no device list).
GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "SLURM_GPUS_ON_NODE")
# Shown too: what the submitter promised the job's environment.
OTHER_VARIABLES = ("SLURM_JOB_ID", "SLURM_CPUS_PER_TASK", "SUBMITIT_PREEMPT_SIGNAL", "OMP_NUM_THREADS")


def probe_task() -> dict[str, Any]:
    """Runs once per task on the node: where am I, and what did SLURM give me? (torch-free)"""
    from trainer import distenv

    where = distenv.resolve(os.environ)
    report: dict[str, Any] = {
        "rank": where.rank, "world_size": where.world_size, "local_rank": where.local_rank,
        "node": os.environ.get("SLURMD_NODENAME", socket.gethostname()),
        "master_addr": where.master_addr, "master_port": where.master_port,
        "cpus_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
    }
    for name in GPU_VARIABLES + OTHER_VARIABLES:
        report[name] = os.environ.get(name)
    return report


def parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m launcher.probe", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", required=True, help="cluster profile: NAME in cluster_profiles/ or a path")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="profile.KEY=VALUE",
                   help="override a profile field, e.g. profile.nodes=1")
    p.add_argument("--json", action="store_true", help="end standard output with one JSON object")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return run(args)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from launcher import runs, send, slurm_preflight, submission
    from launcher.resolve import resolve

    if any(not s.startswith("profile.") for s in args.sets):
        raise ConfigError("--set: the probe takes only profile.KEY=VALUE overrides")
    resolved = resolve(args.profile, "digits", args.sets)
    profile = resolved.profile
    if profile.executor != "slurm":
        raise ConfigError(f"{resolved.profile_source}: the probe needs a slurm profile, not executor "
                          f"'{profile.executor}'")
    run_dir = runs.new_run_dir(Path(profile.runs_dir), "probe", profile.name)
    sub = submission.build(profile, [(resolved.job, {})], run_dir)
    sub.parameters["job_name"] = f"probe-{profile.name}"
    slurm_preflight.check(sub, resolved.profile_source)
    executor = send.make_executor(sub)
    os.environ.update(sub.client_env)  # for submitit's sacct calls while waiting
    # By its module name, not __main__'s: the node unpickles it from launcher.probe.
    from submitit.core.utils import FailedJobError

    from launcher.probe import probe_task as task

    try:
        with send.submission_environment(sub.client_env), contextlib.redirect_stderr(io.StringIO()):
            job = executor.submit(task)
    except FailedJobError as err:
        said = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
        shutil.rmtree(run_dir, ignore_errors=True)
        raise ConfigError(f"sbatch refused the probe, nothing was queued: {said}") from None
    print(f"probe job {job.job_id} on {profile.nodes} node(s) x {profile.tasks_per_node} task(s), "
          f"logs in {sub.log_dir / str(job.job_id)}", flush=True)
    try:
        reports = [job.task(k).result() for k in range(job.num_tasks)]
    except Exception as err:  # noqa: BLE001 - the job's failure is reported, not raised
        print(f"error: the probe job {job.job_id} failed: {str(err).strip().splitlines()[-1]}", file=sys.stderr)
        return EXIT_FAILED
    for r in sorted(reports, key=lambda r: r["rank"]):
        gpus = "  ".join(f"{name}={r[name] if r[name] is not None else '-'}" for name in GPU_VARIABLES)
        print(f"rank {r['rank']}/{r['world_size']}  node {r['node']}  local_rank {r['local_rank']}  "
              f"master {r['master_addr']}:{r['master_port']}  {gpus}", flush=True)
    if args.json:
        print(json.dumps({"job_id": str(job.job_id), "run_dir": str(run_dir), "tasks": reports}), flush=True)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
