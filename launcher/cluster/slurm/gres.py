"""A node's GPUs as its GRES reports them (`scontrol show node`'s Gres field), by type, and the
preflight's check of a typed request against them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from trainer.config.schema import ConfigError


def gpu_types(gres: str) -> tuple[tuple[str, int], ...]:
    """GPUs by type in a node's Gres field: "gpu:4" -> (("", 4),), "gpu:a100:8(S:0-1),gpu:v100:2"
    -> (("a100", 8), ("v100", 2)); other GRES ("shard:8") are not GPUs."""
    out = []
    for item in re.split(r",(?![^(]*\))", gres or ""):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) >= 2 and parts[-1].isdigit():
            out.append((parts[1] if len(parts) >= 3 else "", int(parts[-1])))
    return tuple(out)


def gpu_count(gres: str) -> int:
    """GPUs in a node's Gres field: "gpu:4", "gpu:a100:8(S:0-1)", "gpu:2,shard:8" -> 4, 8, 2."""
    return sum(n for _, n in gpu_types(gres))



def check_gpu_type(gpu_type: str, gpus_per_node: int, partition: str, nodes: Sequence[Any], source: str) -> None:
    """A typed request (profile.gpu_type) that no node of the partition can satisfy: SLURM would
    accept it and leave it pending forever (or refuse it with a bare "Invalid generic resource").
    `nodes`: the partition's `limits.Node`s."""
    if not gpu_type:
        return
    present = sorted({t or "(untyped)" for n in nodes for t, _ in n.gpu_types})
    most = max(n.gpus_of(gpu_type) for n in nodes)
    if not most:
        raise ConfigError(f"profile.gpu_type: {gpu_type!r} is not a GPU type of partition {partition} "
                          f"({source}); its nodes have: {', '.join(present) or 'no GPUs'}")
    if gpus_per_node > most:
        raise ConfigError(f"profile.gpus_per_node: {gpus_per_node} GPU(s) of type {gpu_type!r} exceed the "
                          f"{most} of partition {partition}'s largest node ({source})")
