"""When SLURM would start a request, without queueing it: `sbatch --test-only` of its batch script, and the
partitions the user may submit to (`scontrol show partition`), for `submit.py --when`."""

from __future__ import annotations

import datetime
import grp
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass

from launcher.cluster.slurm.controller import conclusion
from trainer.distributed import hostlist

# sbatch: Job 655 to start at 2026-12-02T06:52:54 using 2 processors on nodes cpu[1-2] in partition cpu
_ESTIMATE = r"Job \d+ to start at (?P<start>\S+) using \d+ processors on nodes (?P<nodes>\S+) in partition (?P<partition>\S+)"


@dataclass(frozen=True)
class Estimate:
    """SLURM's answer for one request: when and where it would start, or why it would not."""

    start: float | None = None  # epoch seconds
    nodes: str = ""
    partition: str = ""
    error: str = ""


def estimate(script: str, env: dict[str, str]) -> Estimate:
    """`sbatch --test-only` of the batch script `script` (nothing is queued)."""
    with tempfile.NamedTemporaryFile("w", prefix="ddp-submit-when-", suffix=".sh") as fh:
        fh.write(script)
        fh.flush()
        try:
            done = subprocess.run(["sbatch", "--test-only", fh.name], capture_output=True, text=True, timeout=60,
                                  env=env, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            return Estimate(error=f"sbatch --test-only: {err}")
    return parse(f"{done.stdout}\n{done.stderr}", done.returncode)


def parse(said: str, code: int = 0) -> Estimate:
    """sbatch --test-only's answer, parsed where it enters: a start SLURM does not know ("Unknown") or cannot
    be read is no start; node and partition names hold only what SLURM's names hold; nothing of the answer
    that reaches the table (an error line included) carries a control character to the user's terminal."""
    found = re.search(_ESTIMATE, said)
    if found is None:
        return Estimate(error=_printable(conclusion(said, f"sbatch --test-only exited {code}").removeprefix("sbatch: ")))
    nodes, partition = found.group("nodes"), found.group("partition")
    try:
        hostlist.expand(nodes)
    except ValueError:
        return Estimate(error=f"sbatch --test-only named nodes that are not a node list: {_printable(nodes)!r}")
    if not re.fullmatch(r"[A-Za-z0-9._-]+", partition):
        return Estimate(error=f"sbatch --test-only named a partition that is not one: {_printable(partition)!r}")
    try:
        start = datetime.datetime.fromisoformat(found.group("start")).timestamp()
    except ValueError:  # "Unknown": SLURM cannot say when (no node will free up in its plan)
        return Estimate(None, nodes, partition, f"SLURM gives no start time ({_printable(found.group('start'))})")
    return Estimate(start, nodes, partition)


def _printable(text: str) -> str:
    return re.sub(r"[\x00-\x1f\x7f-\x9f]", "?", text)


def partitions(env: dict[str, str], account: str = "") -> list[str]:
    """The partitions that are up and that this user (their groups, the profile's account) may submit to."""
    try:
        listed = subprocess.run(["scontrol", "show", "partition", "-o"], capture_output=True, text=True, timeout=60,
                                env=env, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    groups = {grp.getgrgid(g).gr_name for g in os.getgroups() if _has_group(g)}
    return usable(listed, groups, account, root=os.geteuid() == 0)


def usable(listed: str, groups: set[str], account: str = "", root: bool = False) -> list[str]:
    """Of `scontrol show partition -o`'s records, the partitions that are up, shown, and open to a user in `groups`
    (and to the profile's `account`, when it names one); a RootOnly one only to root."""
    out = []
    for line in listed.splitlines():
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        allowed_groups = fields.get("AllowGroups", "ALL")
        allowed_accounts = fields.get("AllowAccounts", "ALL")
        if fields.get("State") != "UP" or fields.get("Hidden") == "YES" or (fields.get("RootOnly") == "YES" and not root):
            continue
        if allowed_groups != "ALL" and not groups & set(allowed_groups.split(",")):
            continue
        if allowed_accounts != "ALL" and account and account not in allowed_accounts.split(","):
            continue
        out.append(fields.get("PartitionName", ""))
    return [name for name in out if name]


def _has_group(gid: int) -> bool:
    try:
        grp.getgrgid(gid)
    except KeyError:
        return False
    return True
