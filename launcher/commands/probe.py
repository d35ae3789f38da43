"""`submit.py probe --profile P [--job J]`: one tiny job (no training) with exactly the profile's request
that checks the nodes' interpreter and prints, for every rank, its node, local rank and the GPUs it was given
(`launch: torchrun`: every rank that the node's torchrun starts, not the node's task).

Run it once per environment: a new profile, a new `python`, `container` or `setup`, or a job that
imports packages of its own (`--job`). Each task first looks up what the tool needs on a node
(submitit, torch, yaml, numpy; launcher.node.envcheck) and, with `--job`, the job's own top-level imports
(its entrypoint's module or its script, and the built-in recipe's dataset library), in the profile's
interpreter or container; every package not installed is named in one `error:` line. It also shows
whether the scheduler accepts the request, how ranks are spread over nodes, which MASTER_ADDR they
agree on, and how CUDA_VISIBLE_DEVICES / SLURM_*_GPUS map GPUs to tasks. Exit status as for
submitting: 0 ok, 2 bad input (nothing queued), 1 the probe failed (a package missing on the nodes).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
import json
import shlex
import sys
from pathlib import Path

from launcher.reports.root_cause import last_line
from launcher.cluster.slurm import clusters, sbatch
from launcher.commands.console import EXIT_FAILED, EXIT_OK, ArgumentParser
from launcher.config.resolve import load_profile, parse_overrides, point, resolve
from launcher.request import send
from launcher.request.submission import build, moved
from launcher.rundir import layout
from trainer.config import project
from trainer.config.job import JobConfig
from trainer.config.schema import ConfigError

# The built-in recipe's datasets and the library each needs on the node (trainer/recipes/data.py).
DATASET_MODULES = {"digits": "sklearn", "cifar10": "torchvision"}
OURS = ("trainer", "launcher", "tests", "__future__")


def probe_parser() -> ArgumentParser:
    p = ArgumentParser(prog="submit.py probe", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", required=True, help="cluster profile: NAME in cluster_profiles/ or a path")
    p.add_argument("--job", help="also check this job's own imports on the nodes (NAME or path)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="profile.KEY=VALUE",
                   help="override a profile field, e.g. profile.nodes=1")
    p.add_argument("--json", action="store_true", help="end standard output with one JSON object")
    return p


def probe(args: argparse.Namespace) -> int:
    from launcher.node.placement import GPU_VARIABLES  # imports submitit: only when probing, not for --help
    if any(not s.startswith("profile.") for s in args.sets):
        raise ConfigError("--set: the probe takes only profile.KEY=VALUE overrides")
    profile, source = load_profile(args.profile, parse_overrides(args.sets)["profile"])
    if profile.executor not in ("slurm", "local"):
        raise ConfigError(f"{source}: the probe needs a slurm or local profile, not executor '{profile.executor}' "
                          f"(the debug executor runs in this process: its interpreter is this one)")
    modules = job_modules(args.job) if args.job else []
    run_dir = layout.new_run_dir(Path(profile.runs_dir), "probe", profile.name)
    sub = build(profile, [point(profile, 0, JobConfig(name=f"probe-{profile.name}"))], run_dir, is_sweep=False)
    if sub.request is not None:
        clusters.check(sub.request, profile.max_array_size, source)
    if (claimed := layout.claim(run_dir)) != run_dir:  # another probe took the name meanwhile
        sub, run_dir = moved(sub, claimed), claimed
    if sub.request is not None:  # a probe trains nothing: no retry step around its srun
        request = dataclasses.replace(sub.request, run_dir="")
        sub = dataclasses.replace(sub, request=request, parameters=sbatch.parameters(request))
    reports_dir = run_dir / "environment"
    # The check goes in front of submitit's own start-up, in the same interpreter or container
    # (launcher.node.envcheck): it must run where submitit itself may be missing.
    python = sub.python or shlex.quote(sys.executable)
    checked = f"{python} -m launcher.node.envcheck --report {shlex.quote(str(reports_dir))} " + \
        " ".join(shlex.quote(m) for m in modules) + " --exec"
    sub = dataclasses.replace(sub, python=checked)
    # The one sending path, with the probe in place of training (in the torchrun shape: under torchrun).
    torchrun = profile.launch == "torchrun"
    job = send.send_probe(sub)
    print(f"probe job {job.job_id} on {profile.nodes} node(s) x {profile.tasks_per_node} "
          f"{'rank(s) under one torchrun per node' if torchrun else 'task(s)'}, "
          f"logs in {layout.job_log_dir(run_dir, str(job.job_id))}", flush=True)
    try:
        job.wait()
        # A task that lacks a package writes its report and ends without a result: its report is the
        # answer, without submitit's wait for a result file that will not come (15 s for each result()).
        if any(r.get("missing") for r in read_reports(reports_dir)):
            raise RuntimeError("a task's interpreter lacks packages")
        reports = [job.task(k).result() for k in range(job.num_tasks)]
        if torchrun:  # a list of its ranks' reports per node task
            reports = [r for node in reports for r in node]
    except Exception as err:  # noqa: BLE001 - the job's failure is reported, not raised
        print(f"error: {failure(source, reports_dir, job.job_id, err)}", file=sys.stderr)
        return EXIT_FAILED
    environments = read_reports(reports_dir)
    for env in environments[:1]:
        print(f"environment: {env['python']} (Python {env['version']}) has " +
              ", ".join(f"{n} {v}".rstrip() for n, v in env["versions"].items()), flush=True)
    for r in sorted(reports, key=lambda r: r["rank"]):
        gpus = "  ".join(f"{name}={r[name] if r[name] is not None else '-'}" for name in GPU_VARIABLES)
        print(f"rank {r['rank']}/{r['world_size']}  node {r['node']}  local_rank {r['local_rank']}  "
              f"master {r['master_addr']}:{r['master_port']}  gpu {r.get('gpu') or '-'}  {gpus}", flush=True)
    if args.json:
        print(json.dumps({"job_id": str(job.job_id), "run_dir": str(run_dir), "tasks": reports,
                          "environment": environments}), flush=True)
    return EXIT_OK


def read_reports(folder: Path) -> list[dict]:
    found = []
    for path in sorted(folder.glob("*.json")):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return found


def failure(source: str, reports_dir: Path, job_id: str, err: Exception) -> str:
    """One line: every package some task could not import, where; else the job's own last words."""
    from launcher.node.envcheck import missing_line

    reports = [r for r in read_reports(reports_dir) if r.get("missing")]
    if not reports:
        return f"the probe job {job_id} failed: {last_line(str(err))}"
    missing: dict[str, str] = {}
    for r in reports:
        missing.update(r["missing"])
    pythons = sorted({r["python"] for r in reports})
    nodes = sorted({r["node"] for r in reports})
    return (f"{source}: the tasks' Python {', '.join(pythons)} (on {', '.join(nodes)}) cannot import "
            f"{missing_line(missing)}; install them there, or point the profile's 'python' or 'container' "
            f"at an environment that has them")


def job_modules(job_name: str) -> list[str]:
    """The packages a job imports at the top of its own code (not the standard library, not its own
    folder's modules), and the built-in recipe's dataset library."""
    resolved = resolve("local", job_name, [])
    job = resolved.job
    if not (job.entrypoint or job.script):
        return [DATASET_MODULES[job.dataset]] if job.dataset in DATASET_MODULES else []
    base = Path(job.code_dir or Path.cwd())
    # Found as the check before queueing and the ranks find it (trainer.config.project's rule).
    root = job.project_root or str(project.root_for(None, Path.cwd()))
    if job.script:
        path = project.find_script(job.script, Path.cwd(), job.code_dir, root)
    else:
        folders = project.search_path(Path(root), Path.cwd(), Path(job.code_dir) if job.code_dir else None)
        path = _module_file(job.entrypoint.partition(":")[0], [str(f) for f in folders])
    if path is None or not path.is_file():
        return []  # the check before queueing names a missing entrypoint or script
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return []  # a syntax error is the submitter's own check's to report
    names: list[str] = []
    for node in tree.body:  # top level only: imports inside functions may be optional
        if isinstance(node, ast.Import):
            names += [a.name.split(".")[0] for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module.split(".")[0])
    # The user's own modules beside the file, the job or the current directory travel with the code.
    local = {p.stem for folder in (path.parent, base, Path.cwd()) for p in folder.iterdir()}
    return [n for n in dict.fromkeys(names)
            if n not in sys.stdlib_module_names and n not in OURS and n not in local]


def _module_file(module: str, extra: list[str]) -> Path | None:
    saved = list(sys.path)
    sys.path[:0] = extra  # ahead of installed packages, as the rule puts them
    try:
        spec = importlib.util.find_spec(module.split(".")[0])
        if spec is not None and "." in module:
            spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    finally:
        sys.path[:] = saved
    return Path(spec.origin) if spec is not None and spec.origin else None
