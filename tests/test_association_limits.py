"""The association's MaxSubmitJobs in the over-size-sweep preflight (launcher/cluster/slurm/capacity.py),
against the dev cluster's real slurmdbd.

What cannot be tested here: the dev cluster runs with AccountingStorageEnforce=none, so its
controller does not enforce association limits (four held jobs under an association with
MaxSubmitJobs=3 were all accepted), and the preflight, which reads the enforcement from
`scontrol show config`, rightly skips the limit there. Enforcement needs another slurm.conf and a
restart of the slurmctld every test shares, so the end-to-end refusal of a `submit.py` sweep is not
exercised.

What is tested for real: the limits are created with `sacctmgr` on a throwaway account (and a
user name that exists nowhere, for the default-account lookup), read back by
`association_max_submit` through the real slurmdbd, and removed again; and `check_room` refuses a
sweep beyond them given the controller's own `scontrol show config` text with the one line a
cluster that enforces limits prints instead (`AccountingStorageEnforce = associations,limits`),
counting the user's jobs in the real queue. Nothing else on the cluster changes: root keeps its
default account, and without enforcement the new associations bind no job.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.cluster.slurm.capacity import association_max_submit, check_room
from trainer.config.schema import ConfigError

pytestmark = pytest.mark.slurm

SOURCE = "cluster_profiles/test.yaml"


def sacctmgr(*args: str) -> str:
    proc = subprocess.run(["sacctmgr", "-i", *args], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture
def account(slurm_cluster: Path) -> Iterator[str]:
    """A throwaway account of the dev cluster's accounting, removed with its associations afterwards."""
    name = f"ddptest{os.getpid()}"
    sacctmgr("add", "account", name, "cluster=devcluster", "description=test", "organization=test")
    try:
        yield name
    finally:
        subprocess.run(["sacctmgr", "-i", "delete", "user", f"{name}user"], capture_output=True, timeout=60,
                       check=False)
        sacctmgr("delete", "account", name)


def env() -> dict[str, str]:
    return dict(os.environ)  # (slurm_cluster set SLURM_CONF)


def test_the_association_limit_is_read_from_slurmdbd(account: str) -> None:
    user = f"{account}user"  # only in SLURM's accounting: its default account is the first one added
    sacctmgr("add", "user", user, f"account={account}", "cluster=devcluster")
    assert association_max_submit(user, "", env(), SOURCE) is None  # no limit set

    sacctmgr("modify", "user", "where", f"name={user}", f"account={account}", "set", "MaxSubmitJobs=3",
             "GrpSubmitJobs=7")
    assert association_max_submit(user, "", env(), SOURCE) == 3  # the default account's, the smaller one
    assert association_max_submit(user, account, env(), SOURCE) == 3  # the profile's account

    sacctmgr("modify", "user", "where", f"name={user}", f"account={account}", "set", "MaxSubmitJobs=-1")
    assert association_max_submit(user, account, env(), SOURCE) == 7  # the group's limit then binds


def test_a_sweep_beyond_maxsubmitjobs_is_refused_where_limits_are_enforced(account: str) -> None:
    sacctmgr("add", "user", "root", f"account={account}", "cluster=devcluster", "MaxSubmitJobs=3")
    live = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True,
                          timeout=30).stdout
    assert re.search(r"^AccountingStorageEnforce\s*=\s*none$", live, re.M), "the dev cluster enforces limits now?"
    check_room(4, account, live, env(), SOURCE)  # not enforced: the controller takes them, so does the preflight

    enforced = re.sub(r"^AccountingStorageEnforce\s*=.*$", "AccountingStorageEnforce = associations,limits", live,
                      flags=re.M)
    with pytest.raises(ConfigError) as refused:
        check_room(4, account, enforced, env(), SOURCE)
    message = str(refused.value)
    assert message.startswith(f"{SOURCE}: 4 task(s) and the ") and "exceed the association's MaxSubmitJobs of 3 " \
        "(sacctmgr): nothing was queued" in message, message
    assert "\n" not in message

    sacctmgr("modify", "user", "where", "name=root", f"account={account}", "set", "MaxSubmitJobs=100000")
    check_room(4, account, enforced, env(), SOURCE)  # room under a larger limit
