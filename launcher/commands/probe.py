"""`submit.py probe --profile P`: submit a tiny function (no torch) with exactly the profile's SLURM
request and print, for every task, its rank, node and the GPUs SLURM gave it.

Use it to see what a training job would get before spending a GPU allocation on it: whether the
scheduler accepts the request, how ranks are spread over nodes, which MASTER_ADDR the ranks agree on,
and how CUDA_VISIBLE_DEVICES / SLURM_*_GPUS map GPUs to tasks. Exit status as for submitting: 0 ok,
2 bad input (nothing queued), 1 the probe job failed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from launcher.cluster.said import last_line
from launcher.cluster.slurm import limits
from launcher.commands.console import EXIT_FAILED, EXIT_OK, ArgumentParser
from launcher.config.resolve import load_profile, parse_overrides
from launcher.request import send
from launcher.request.submission import Point, build
from launcher.rundir import layout
from trainer.config.job import JobConfig
from trainer.config.schema import ConfigError


def parser() -> ArgumentParser:
    p = ArgumentParser(prog="submit.py probe", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", required=True, help="cluster profile: NAME in cluster_profiles/ or a path")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="profile.KEY=VALUE",
                   help="override a profile field, e.g. profile.nodes=1")
    p.add_argument("--json", action="store_true", help="end standard output with one JSON object")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    from launcher.node import GPU_VARIABLES, probe_task  # imports submitit: only when probing, not for --help
    if any(not s.startswith("profile.") for s in args.sets):
        raise ConfigError("--set: the probe takes only profile.KEY=VALUE overrides")
    profile, source = load_profile(args.profile, parse_overrides(args.sets)["profile"])
    if profile.executor != "slurm":
        raise ConfigError(f"{source}: the probe needs a slurm profile, not executor '{profile.executor}'")
    run_dir = layout.new_run_dir(Path(profile.runs_dir), "probe", profile.name)
    sub = build(profile, [Point(0, JobConfig(name=f"probe-{profile.name}"))], run_dir, is_sweep=False)
    limits.check(sub.request, profile.max_array_size, source)
    # The one sending path, with the probe in place of training (the node unpickles it from launcher.node).
    job = send.send_function(sub, probe_task)
    print(f"probe job {job.job_id} on {profile.nodes} node(s) x {profile.tasks_per_node} task(s), "
          f"logs in {layout.job_log_dir(run_dir, str(job.job_id))}", flush=True)
    try:
        reports = [job.task(k).result() for k in range(job.num_tasks)]
    except Exception as err:  # noqa: BLE001 - the job's failure is reported, not raised
        print(f"error: the probe job {job.job_id} failed: {last_line(str(err))}", file=sys.stderr)
        return EXIT_FAILED
    for r in sorted(reports, key=lambda r: r["rank"]):
        gpus = "  ".join(f"{name}={r[name] if r[name] is not None else '-'}" for name in GPU_VARIABLES)
        print(f"rank {r['rank']}/{r['world_size']}  node {r['node']}  local_rank {r['local_rank']}  "
              f"master {r['master_addr']}:{r['master_port']}  gpu {r.get('gpu') or '-'}  {gpus}", flush=True)
    if args.json:
        print(json.dumps({"job_id": str(job.job_id), "run_dir": str(run_dir), "tasks": reports}), flush=True)
    return EXIT_OK
