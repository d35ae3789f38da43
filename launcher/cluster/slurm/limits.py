"""Checks against the live SLURM cluster before sbatch: partition, time limit, nodes, CPUs, memory, GPUs.

sbatch accepts many requests that can never start (more nodes or GPUs than the partition has) and
leaves them pending forever with a reason only `squeue` shows. We ask the controller what the
partition offers (`scontrol show partition/node/config -o`, parsed here) and refuse such requests up
front as a ConfigError naming the profile key, so the user gets exit status 2 and nothing is queued.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Protocol
from pathlib import Path

from launcher.cluster.preflights import Answer
from launcher.cluster.slurm import capacity, gres, release
from launcher.cluster.slurm.controller import conclusion
from launcher.cluster.slurm.env import slurm_env
from launcher.cluster.slurm.sbatch import SlurmRequest
from trainer.config.schema import ConfigError
from trainer.distributed import hostlist

# A healthy controller answers in milliseconds; an unreachable one makes scontrol retry for about
# MessageTimeout (10 s by default). Give up before that rather than hang the submitter.
TIMEOUT_S = 8.0


class SlurmUnavailable(ConfigError):
    """The SLURM commands are missing, or the controller cannot be reached or configured."""


@dataclass(frozen=True)
class Node:
    """What one SLURM node offers, as scontrol reports it."""

    name: str
    cpus: int
    memory_mb: int
    gpus: int
    # GPUs by GRES type ("": untyped), e.g. {"a100": 8} for Gres=gpu:a100:8.
    gpu_types: tuple[tuple[str, int], ...] = ()

    def gpus_of(self, gpu_type: str) -> int:
        """The node's GPUs of `gpu_type` ("": of any type)."""
        return sum(n for t, n in self.gpu_types if t == gpu_type) if gpu_type else self.gpus


@dataclass(frozen=True)
class Partition:
    """A SLURM partition's limits and nodes, as scontrol reports them."""

    name: str
    default: bool
    max_time_min: int | None  # None: UNLIMITED
    max_nodes: int | None
    max_cpus_per_node: int | None
    nodes: list[Node]


# ----- asking the controller -----------------------------------------------------------------------

def run_scontrol(args: list[str], env: dict[str, str], source: str) -> str:
    """`scontrol ARGS` (stdout); any failure to get an answer is a SlurmUnavailable error."""
    command = ["scontrol", *args]
    conf = env.get("SLURM_CONF")
    where = f"the controller in {conf}" if conf else "the SLURM controller (no SLURM_CONF set)"
    if conf and not Path(conf).is_file():
        raise SlurmUnavailable(f"{source}: SLURM configuration {conf!r} (profile.slurm_conf / SLURM_CONF) does "
                               f"not exist; is that cluster set up? (the dev cluster writes it on "
                               f"`python -m launcher.devcluster up`)")
    try:
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise SlurmUnavailable(f"{source}: executor 'slurm' needs SLURM's commands, but 'scontrol' is not on "
                               f"PATH; submit from a machine with SLURM (e.g. a login node) or use the local "
                               f"profile") from None
    except subprocess.TimeoutExpired as err:
        said = conclusion(err.stderr)
        raise SlurmUnavailable(f"{source}: {where} did not answer `{' '.join(command)}` within {TIMEOUT_S:g} s"
                               + (f" ({said})" if said else "") + "; is slurmctld running?") from None
    if proc.returncode != 0:
        said = conclusion(proc.stderr) or conclusion(proc.stdout) or f"exit status {proc.returncode}"
        raise SlurmUnavailable(f"{source}: cannot query {where}: `{' '.join(command)}` said: {said}")
    return proc.stdout


# ----- parsing scontrol's one-line records -----------------------------------------------------------

_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def parse_record(line: str) -> dict[str, str]:
    """One `scontrol show ... -o` line as a mapping. Values may contain spaces ("OS=Linux 6.1 #1 SMP")
    and '=' ("TRES=cpu=4,mem=4000M"): a word starts a new key only if it reads KEY=..."""
    record: dict[str, str] = {}
    key = ""
    for word in line.split():
        name, eq, value = word.partition("=")
        if eq and _KEY.match(name):
            key = name
            record[key] = value
        elif key:
            record[key] += " " + word
    return record


def parse_records(text: str) -> list[dict[str, str]]:
    return [parse_record(line) for line in text.splitlines() if "=" in line]


def parse_minutes(text: str) -> int | None:
    """SLURM's time limit format ([days-]hours:minutes:seconds, minutes, UNLIMITED) in whole minutes,
    rounded up; None for no limit."""
    text = text.strip()
    if text.upper() in ("UNLIMITED", "INFINITE", "NONE", ""):
        return None
    days, dash, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if dash:  # days-hours[:minutes[:seconds]]
        parts += [0] * (3 - len(parts))
    elif len(parts) == 1:  # minutes
        parts = [0, parts[0], 0]
    else:  # minutes:seconds or hours:minutes:seconds
        parts = [0] * (3 - len(parts)) + parts
    h, m, s = parts
    seconds = int(days or 0) * 86400 + h * 3600 + m * 60 + s
    return -(-seconds // 60)


def _limit(text: str | None) -> int | None:
    if text is None or not text.strip().isdigit():
        return None  # UNLIMITED
    return int(text)


def parse_nodes(text: str) -> dict[str, tuple[Node, list[str]]]:
    """Node name -> (node, partitions it belongs to)."""
    nodes: dict[str, tuple[Node, list[str]]] = {}
    for rec in parse_records(text):
        if "NodeName" not in rec:
            continue
        cpus = int(rec.get("CPUEfctv") or rec.get("CPUTot") or 0)
        text = rec.get("Gres", "")
        node = Node(rec["NodeName"], cpus, int(rec.get("RealMemory") or 0), gres.gpu_count(text), gres.gpu_types(text))
        nodes[node.name] = (node, [p for p in rec.get("Partitions", "").split(",") if p])
    return nodes


def parse_partitions(partitions_text: str, nodes_text: str) -> dict[str, Partition]:
    nodes = parse_nodes(nodes_text)
    out: dict[str, Partition] = {}
    for rec in parse_records(partitions_text):
        if "PartitionName" not in rec:
            continue
        name = rec["PartitionName"]
        members = [] if rec.get("Nodes", "(null)") == "(null)" else hostlist.expand(rec["Nodes"])
        out[name] = Partition(
            name=name, default=rec.get("Default") == "YES", max_time_min=parse_minutes(rec.get("MaxTime", "")),
            max_nodes=_limit(rec.get("MaxNodes")), max_cpus_per_node=_limit(rec.get("MaxCPUsPerNode")),
            nodes=[nodes[n][0] for n in members if n in nodes],
        )
    return out


def max_array_tasks(config_text: str) -> int | None:
    """How many tasks one job array may have. SLURM's rule: task indices run up to MaxArraySize - 1,
    and our arrays are indexed from 0, so MaxArraySize tasks fit (MaxJobCount caps it too)."""
    values = dict(
        (k.strip(), v.strip()) for k, _, v in (line.partition("=") for line in config_text.splitlines()) if _
    )
    limits = [int(values[k]) for k in ("MaxArraySize", "MaxJobCount") if values.get(k, "").isdigit()]
    return min(limits) if limits else None


# ----- the checks -------------------------------------------------------------------------------------

def check_request(profile: SlurmRequest, partitions: dict[str, Partition], source: str) -> Partition:
    """Raise ConfigError (naming the profile key) for a request the partition can never satisfy."""
    if not partitions:
        raise ConfigError(f"{source}: the SLURM cluster reports no partitions")
    names = ", ".join(sorted(partitions))
    if profile.partition:
        part = partitions.get(profile.partition)
        if part is None:
            raise ConfigError(f"profile.partition: {profile.partition!r} is not a partition of this cluster "
                              f"({source}); partitions: {names}")
    else:
        defaults = [p for p in partitions.values() if p.default]
        if not defaults:
            raise ConfigError(f"profile.partition: empty, and this cluster has no default partition ({source}); "
                              f"set one of: {names}")
        part = defaults[0]
    where = f"partition {part.name}"
    if part.max_time_min is not None and profile.time_min > part.max_time_min:
        raise ConfigError(f"profile.time: {profile.time_min} min exceeds {where}'s MaxTime of "
                          f"{part.max_time_min} min ({source})")
    if not part.nodes:
        raise ConfigError(f"profile.partition: {where} has no nodes ({source})")
    if profile.nodes > len(part.nodes):
        raise ConfigError(f"profile.nodes: {profile.nodes} exceeds the {len(part.nodes)} node(s) of {where} "
                          f"({source})")
    if part.max_nodes is not None and profile.nodes > part.max_nodes:
        raise ConfigError(f"profile.nodes: {profile.nodes} exceeds {where}'s MaxNodes of {part.max_nodes} "
                          f"({source})")
    # GPUs first: with one task per GPU, too many GPUs also means too many CPUs, and the GPU count
    # is the number the user chose.
    if profile.gpus_per_node:
        most_gpus = max(n.gpus for n in part.nodes)
        if not most_gpus:
            raise ConfigError(f"profile.gpus_per_node: {profile.gpus_per_node}, but no node of {where} has "
                              f"GPUs (GRES gpu) ({source}); use a GPU partition or gpus_per_node 0")
        if profile.gpus_per_node > most_gpus:
            raise ConfigError(f"profile.gpus_per_node: {profile.gpus_per_node} exceeds the {most_gpus} GPU(s) "
                              f"(GRES gpu) of {where}'s largest node ({source})")
        gres.check_gpu_type(profile.gpu_type, profile.gpus_per_node, part.name, part.nodes, source)
    cpus = profile.tasks_per_node * profile.cpus_per_task
    most_cpus = max(n.cpus for n in part.nodes)
    if part.max_cpus_per_node is not None:
        most_cpus = min(most_cpus, part.max_cpus_per_node)
    if cpus > most_cpus:
        raise ConfigError(f"profile.tasks_per_node x profile.cpus_per_task: {profile.tasks_per_node} x "
                          f"{profile.cpus_per_task} = {cpus} CPUs per node exceeds the {most_cpus} CPUs of "
                          f"{where}'s largest node ({source})")
    mem_mb = profile.mem_per_node_mb
    most_mem = max(n.memory_mb for n in part.nodes)
    if mem_mb > most_mem:
        raise ConfigError(f"profile.mem_per_task: {mem_mb // profile.tasks_per_node} MB x {profile.tasks_per_node} "
                          f"task(s) = {mem_mb} MB per node exceeds the {most_mem} MB of {where}'s largest node "
                          f"({source})")
    # Each check above passes on some node; the request needs `nodes` nodes that pass all of them.
    fitting = fitting_nodes(profile, part)
    if len(fitting) < profile.nodes:
        raise ConfigError(f"profile.nodes: {profile.nodes} node(s) with {cpus} CPUs, {mem_mb} MB and "
                          f"{profile.gpus_per_node} GPU(s) each, but only {len(fitting)} node(s) of {where} "
                          f"have that much ({source})")
    return part


class NodeShare(Protocol):
    """One node's share of a request: a SlurmRequest, or the retry step's policy (healing.RetryPolicy)."""

    tasks_per_node: int
    cpus_per_task: int
    mem_per_node_mb: int
    gpus_per_node: int
    gpu_type: str


def fitting_nodes(request: NodeShare, part: Partition) -> list[Node]:
    """The nodes of `part` that can hold one node's share of `request` (CPUs, memory, GPUs)."""
    cpus = request.tasks_per_node * request.cpus_per_task
    return [n for n in part.nodes if n.cpus >= cpus and n.memory_mb >= request.mem_per_node_mb
            and n.gpus_of(request.gpu_type) >= request.gpus_per_node]


def check_setup_lines(request: SlurmRequest) -> None:
    """The profile's setup lines, which the batch script runs as written, must parse: `bash -n`
    (parse, run nothing) on each; skipped where the submitting machine has no bash (the nodes'
    shell still reports it)."""
    bash = shutil.which("bash")
    for i, line in enumerate(request.setup if bash is not None else []):
        proc = subprocess.run([bash, "-n", "-c", line], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            said = re.sub(r"^.*?-c: ", "", (proc.stderr.strip().splitlines() or ["syntax error"])[-1])
            raise ConfigError(f"profile.setup[{i}]: {line!r} is not a valid bash line ({said}); setup lines run "
                              f"as written in the batch script")


def check(request: SlurmRequest, max_array_size: int | None, source: str, required: bool = True,
          tasks: int = 1, cluster: str | None = None) -> Answer:
    """Raise ConfigError for requests the cluster (`cluster`; None: the request's; "": the SLURM_CONF's own) can
    never satisfy (and for a SLURM release older than supported: `release.of`); answer the array chunk size (the most tasks one job array
    may hold: the profile's max_array_size, capped by the cluster's) and the release, which decides what depends
    on it. `tasks` jobs must also fit in the queue now (`capacity`), so a sweep is refused whole, not in part.
    (launcher.cluster.slurm.clusters asks each of several clusters.)

    With `required=False` (--dry-run) a cluster that cannot be asked is noted on stderr and skipped,
    so the script can still be shown on a machine without SLURM; violations are still errors."""
    check_setup_lines(request)  # needs no cluster
    env = slurm_env(request.slurm_conf, cluster=request.cluster if cluster is None else cluster)
    try:
        config_text = run_scontrol(["show", "config"], env, source)
        found = release.of(config_text, run_scontrol(["--version"], env, source), source)
        partitions_text = run_scontrol(["show", "partition", "-o"], env, source)
        nodes_text = run_scontrol(["show", "node", "-o"], env, source)
    except SlurmUnavailable as err:
        if required:
            raise
        print(f"note: preflight against the cluster skipped: {err}", file=sys.stderr)
        return Answer(max_array_size)
    check_request(request, parse_partitions(partitions_text, nodes_text), source)
    capacity.check_room(tasks, request.account, config_text, env, source)
    limits = [n for n in (max_array_size, max_array_tasks(config_text)) if n]
    return Answer(min(limits) if limits else None, found)
