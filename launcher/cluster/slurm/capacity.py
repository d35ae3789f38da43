"""Room in the queue: will the controller accept this many jobs now? Asked before the first sbatch.

A sweep larger than the queue has room for was accepted array by array until the controller
refused one (after minutes of sbatch retries), leaving part of it queued. Every array task counts
as one job against the controller's MaxJobCount (finished jobs too, until MinJobAge passes: what
`squeue --states=all` lists), and against the user's association MaxSubmitJobs where the cluster
enforces limits (AccountingStorageEnforce with "limits"; pending and running jobs count). A sweep
that does not fit is refused whole (a ConfigError: exit 2, nothing queued).
"""

from __future__ import annotations

import os
import pwd
import subprocess

from launcher.cluster.slurm.controller import conclusion
from trainer.config.schema import ConfigError

TIMEOUT_S = 15.0


def config_value(config_text: str, key: str) -> str:
    """A value of `scontrol show config` ("" when absent)."""
    for line in config_text.splitlines():
        name, eq, value = line.partition("=")
        if eq and name.strip() == key:
            return value.strip()
    return ""


def _run(argv: list[str], env: dict[str, str], source: str) -> str:
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ConfigError(f"{source}: cannot ask the controller how full its queue is (`{' '.join(argv)}`: "
                          f"{err})") from None
    if proc.returncode != 0:
        raise ConfigError(f"{source}: cannot ask the controller how full its queue is (`{' '.join(argv)}` said: "
                          f"{conclusion(proc.stderr) or proc.returncode})")
    return proc.stdout


def _count(argv: list[str], env: dict[str, str], source: str) -> int:
    return sum(1 for line in _run(argv, env, source).splitlines() if line.strip())


def association_max_submit(user: str, account: str, env: dict[str, str], source: str) -> int | None:
    """The smallest MaxSubmitJobs (per user) or GrpSubmitJobs of the user's association for `account`
    (the user's default account when empty); None when none is set."""
    if not account:
        default = _run(["sacctmgr", "-n", "-P", "show", "user", user, "format=DefaultAccount"], env, source).split()
        account = default[0] if default else ""
    # "where" is a word of its own: sacctmgr refuses "where users=X" as one argument ("Unknown condition").
    text = _run(["sacctmgr", "-n", "-P", "show", "assoc", "where", f"users={user}", f"accounts={account}",
                 "format=MaxSubmit,GrpSubmit"], env, source) if account else ""
    limits = [int(v) for line in text.splitlines() for v in line.split("|") if v.strip().isdigit()]
    return min(limits) if limits else None


def check_room(tasks: int, account: str, config_text: str, env: dict[str, str], source: str) -> None:
    """Refuse (ConfigError) `tasks` jobs that the controller or the user's limits cannot take now."""
    most = config_value(config_text, "MaxJobCount")
    if most.isdigit():
        held = _count(["squeue", "-h", "-r", "--states=all", "-o", "%i"], env, source)
        if held + tasks > int(most):
            raise ConfigError(f"{source}: {tasks} task(s) (one job each) and the {held} job(s) the controller holds "
                              f"now exceed its MaxJobCount of {most}: nothing was queued; submit at most "
                              f"{max(0, int(most) - held)} task(s) now (split the sweep) or wait for the queue "
                              f"to drain")
    if "limits" not in config_value(config_text, "AccountingStorageEnforce"):
        return  # the controller does not enforce association limits: it will take them
    # The account SLURM bills: the real user id's name (getpass would prefer $USER, which can differ).
    user = pwd.getpwuid(os.getuid()).pw_name
    limit = association_max_submit(user, account, env, source)
    if limit is not None:
        mine = _count(["squeue", "-h", "-r", "-u", user, "--states=PENDING,RUNNING,SUSPENDED", "-o", "%i"], env,
                      source)
        if mine + tasks > limit:
            raise ConfigError(f"{source}: {tasks} task(s) and the {mine} job(s) of user {user} already queued exceed "
                              f"the association's MaxSubmitJobs of {limit} (sacctmgr): nothing was queued; submit "
                              f"at most {max(0, limit - mine)} task(s) now or wait")
