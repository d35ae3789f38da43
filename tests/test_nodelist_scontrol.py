"""The Python node-list parser (trainer/distributed/hostlist.py) agrees with SLURM's own `scontrol show hostnames`.

Ranks derive MASTER_ADDR from SLURM_JOB_NODELIST with trainer.distributed.hostlist instead of forking scontrol,
so the two must expand every form SLURM writes the same way. SLURM is the reference here: each
pattern is expanded by the dev cluster's scontrol at test time, not by a hand-written answer.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from trainer.distributed.hostlist import expand

PATTERNS = [
    "cpu1",
    "cpu[1-4]",
    "n[01-03]",                   # zero padding
    "n[08-10]",                   # padding kept across a digit-count change
    "n[098-101]",                 # padded range growing a digit
    "n[98-101]",                  # unpadded range growing a digit
    "n[009-011]",
    "node-[0001-0003]",
    "n[1,3,5-6]",                 # list inside brackets
    "gpu-[01-03,7],login2",       # list and range, then a plain host
    "n[1-3],m[4-5]",              # several top-level items
    "rack[1-2]-node[01-02]",      # several bracket groups (cartesian, first group outermost)
    "n[1-2]x[3-4]",
    "n[1-2][3-4]",                # adjacent bracket groups
    "a-1-[1-3]",                  # prefix with dashes and digits
    "a1b2-[7-8]",
    "x-y-z-9[0-2]",               # digits right before the bracket
    "n1[0-2]",
    "n[0-0]",
    "n[00-00]",
    "n[1-1,1]",                   # duplicates are kept, as SLURM keeps them
    "n[1-2],n[2-3]",
    "n1,,n2",                     # empty items are skipped
    " n1, n2",                    # whitespace separates hosts too
    "n1 n2",
    "[1-2]",                      # no prefix at all
]
# Not compared: a suffix after the last bracket group ("n[1-2]-ib") is not SLURM syntax (scontrol
# says "Invalid hostlist"), while our parser expands it; slurmctld never writes such a list.

# Malformed lists that scontrol rejects ("Invalid hostlist" / "Invalid range"); ours raises. (An
# unclosed "n[1-3" is not here: scontrol 22.05 prints a garbled "n]" for it; ours raises too.)
MALFORMED = ["n[3-1]", "n[a-b]", "n[]", "n[1-2,]", "n[,1]", "n[-1]", "n[1,2 ,3]"]
# Malformed lists that one release's scontrol reads and another rejects: ours raises on every release.
# "n[1-3]]": 22.05 says "Invalid hostlist"; 24.11 keeps the stray bracket in each name (n1], n2], n3]),
# a name no node can have (SLURM's node names hold no brackets).
LENIENT = {"n[1-3]]": ["n1]", "n2]", "n3]"]}


def scontrol_hostnames(pattern: str) -> list[str] | None:
    """SLURM's expansion, or None when scontrol rejects the list (it still exits 0 then)."""
    proc = subprocess.run(["scontrol", "show", "hostnames", pattern], capture_output=True, text=True,
                          timeout=20, check=False)
    if "Invalid" in proc.stdout + proc.stderr or proc.returncode != 0:
        return None
    return proc.stdout.split()


def test_table_is_large_enough() -> None:
    assert len(PATTERNS) >= 15


@pytest.mark.parametrize("pattern", PATTERNS)
def test_python_expansion_matches_scontrol(slurm_cluster: Path, pattern: str) -> None:
    expected = scontrol_hostnames(pattern)
    assert expected, f"scontrol rejected {pattern!r}, which the table lists as valid"
    assert expand(pattern) == expected


@pytest.mark.parametrize("pattern", MALFORMED)
def test_malformed_lists_are_rejected_by_both(slurm_cluster: Path, pattern: str) -> None:
    assert scontrol_hostnames(pattern) is None, f"scontrol accepted {pattern!r}"
    with pytest.raises(ValueError):
        expand(pattern)


@pytest.mark.parametrize("pattern", LENIENT)
def test_lists_a_newer_scontrol_reads_leniently_are_rejected_by_ours(slurm_cluster: Path, pattern: str) -> None:
    assert scontrol_hostnames(pattern) in (None, LENIENT[pattern])
    with pytest.raises(ValueError):
        expand(pattern)


def test_live_job_nodelist_matches(slurm_cluster: Path) -> None:
    """A real allocation's SLURM_JOB_NODELIST (compressed by slurmctld) expands to the nodes the
    tasks actually ran on, in task order."""
    proc = subprocess.run(
        ["srun", "--partition=cpu", "--nodes=2", "--ntasks-per-node=1", "--time=1", "--quiet",
         "bash", "-c", 'echo "$SLURM_PROCID $SLURMD_NODENAME $SLURM_JOB_NODELIST"'],
        capture_output=True, text=True, timeout=90, check=True,
    )
    rows = sorted(line.split() for line in proc.stdout.splitlines() if line.strip())
    assert len(rows) == 2
    nodelist = rows[0][2]
    assert "[" in nodelist  # slurmctld compressed it, e.g. cpu[1-2] or cpu[2,4]
    assert expand(nodelist) == [node for _, node, _ in rows]
