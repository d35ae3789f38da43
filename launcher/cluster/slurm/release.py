"""The SLURM release a run is queued on, read once by the preflight, and every behaviour of ours that
depends on it, decided here and nowhere else.

The release is the older of the controller's (`scontrol show config`'s SLURM_VERSION, which the preflight
reads anyway) and the client commands' (`scontrol --version`): a site may run commands older than its
controller, and an option must be known to both. Releases older than `OLDEST` are refused at the preflight
with one line. What differs between the releases we run (Debian 12's 22.05, Debian 13's 24.11; the table
in docs/dev-cluster.md) is either handled the same way on both or decided by a property of `Release`, which
the dry run shows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainer.config.schema import ConfigError

# The oldest release the toolkit supports: the one the suite's SLURM-facing core runs on (Debian 12's).
OLDEST = (22, 5)
# Expedited requeue (25.11): a batch job submitted with --requeue=expedite that SLURM requeues (a node
# failure) may start again at once, ahead of others, instead of after the job credential's lifetime
# (cred_expire, 120 s by default) that every earlier release makes a requeued job wait.
EXPEDITE = (25, 11)
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class Release:
    """A SLURM release as "major.minor.micro" (e.g. "24.11.5"); "" where it was not read (a dry run
    without a cluster): then every decision is the oldest supported release's."""

    version: str = ""

    @property
    def parts(self) -> tuple[int, int]:
        found = _VERSION.match(self.version)
        return (int(found.group(1)), int(found.group(2))) if found else OLDEST

    @property
    def requeue(self) -> str:
        """sbatch's --requeue value: "expedite" where the release has it, else "" (a plain --requeue)."""
        return "expedite" if self.version and self.parts >= EXPEDITE else ""

    def describe(self) -> dict[str, str]:
        """What was decided by the release, for the dry run."""
        if not self.version:
            return {"release": "not read (the cluster was not asked): decided as for the oldest supported, "
                               f"{OLDEST[0]}.{OLDEST[1]:02d}"}
        requeue = ("--requeue=expedite: a job SLURM requeues may start again at once" if self.requeue else
                   f"--requeue: a requeued job waits out the credential lifetime (cred_expire) before it starts "
                   f"again; --requeue=expedite needs {EXPEDITE[0]}.{EXPEDITE[1]}")
        return {"release": self.version, "requeue": requeue}


def parse(text: str) -> str:
    """The first "X.Y[.Z]" in a version line or in `scontrol show config`'s SLURM_VERSION; "" if none."""
    line = next((line for line in text.splitlines() if line.strip().startswith("SLURM_VERSION")), text)
    found = _VERSION.search(line.partition("=")[2] if "=" in line else line)
    return found.group(0) if found else ""


def of(controller_config: str, client_version: str, source: str) -> Release:
    """The release to decide by: the older of the controller's and the commands'. A release below OLDEST
    is a ConfigError naming both, and what is supported."""
    versions = [v for v in (parse(controller_config), parse(client_version)) if v]
    if not versions:
        return Release()
    release = min((Release(v) for v in versions), key=lambda r: r.parts)
    if release.parts < OLDEST:
        said = f"the controller says {parse(controller_config) or '?'}, its commands {parse(client_version) or '?'}"
        raise ConfigError(f"{source}: SLURM {release.version} is older than ddp-submit supports ({said}); "
                          f"it supports SLURM {OLDEST[0]}.{OLDEST[1]:02d} and newer: submit from a cluster "
                          f"that runs one, or use the local profile")
    return release
