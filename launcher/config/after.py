"""`--after RUN[:ok|any|notok]` (launcher.client: `after=[run, (run, "notok")]`): a run that starts only
once other runs ended, successfully (`ok`, the default: SLURM's afterok), in any way (`any`: afterany) or
failed (`notok`: afternotok). Each `--after` names one run; several must all hold. A run whose condition
can never hold (a parent that succeeded, for `notok`) is cancelled by SLURM rather than left pending
(`--kill-on-invalid-dep=yes`, launcher.cluster.slurm.sbatch)."""

from __future__ import annotations

import re

from trainer.config.schema import ConfigError

# The condition as written after RUN, and SLURM's dependency type for it.
CONDITIONS = {"ok": "afterok", "any": "afterany", "notok": "afternotok"}


def split(item: str, exists: bool) -> tuple[str, str]:
    """(RUN, condition) of one `--after` value; `exists`: whether `item` as a whole names a folder (a run
    folder whose name has a colon is taken whole)."""
    run, colon, condition = item.rpartition(":")
    if colon and condition in CONDITIONS and run:
        return run, condition
    if colon and not exists and re.fullmatch(r"[A-Za-z_]+", condition):
        raise ConfigError(f"--after {item}: {condition!r} is not a condition; after RUN write :ok (RUN succeeded, "
                          f"the default), :any (RUN ended, however) or :notok (RUN failed)")
    return item, "ok"


def dependency(run_ids: list[str], condition: str) -> list[str]:
    """One run's job ids as SLURM dependency items ("afterok:12")."""
    return [f"{CONDITIONS[condition]}:{job_id}" for job_id in run_ids]
