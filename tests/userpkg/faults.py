"""A node that stays up but makes every rank on it fail like broken hardware, for the self-healing tests
(tests/test_self_healing.py): `tiny.train` calls these when its config names a `bad_node_file`.

The first attempt's last rank writes its node's name into that file (the job's nodes are SLURM's choice);
from `node_fault_at_step` on, every rank on the named node prints the driver's Xid line and raises CUDA's
ECC error, on every attempt that lands there. A retry without that node runs as if nothing happened.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any


def claim(ctx: Any, bad_node_file: str) -> None:
    """The last rank of the first attempt names its node the bad one (once: the file is never rewritten)."""
    if bad_node_file and ctx.rank == ctx.world_size - 1:
        try:
            fd = os.open(bad_node_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return
        with os.fdopen(fd, "w") as fh:
            fh.write(ctx.node)


def at_step(ctx: Any, bad_node_file: str, fault_at_step: int, step: int) -> None:
    """At `fault_at_step`, a rank on the bad node fails the way a GPU with an uncorrectable error does."""
    if not bad_node_file or not fault_at_step or step != fault_at_step:
        return
    if Path(bad_node_file).read_text().strip() == ctx.node:
        print(f"NVRM: Xid (PCI:0000:3b:00): 48, pid={os.getpid()}, An uncorrectable double bit error (DBE) has "
              f"been detected on GPU in the framebuffer at partition 6, subpartition 0.", file=sys.stderr, flush=True)
        raise RuntimeError("CUDA error: uncorrectable ECC error encountered")
