"""How sending can fail, as the submitter reports it (launcher.commands.main maps them to exit codes
without loading the sending code itself)."""

from __future__ import annotations

from trainer.config.schema import ConfigError


class SubmissionRefused(ConfigError):
    """sbatch refused the job and nothing was queued (bad input, exit 2): a request the preflight
    cannot see, e.g. an unknown node name."""


class PartiallySubmitted(RuntimeError):
    """Part of a split array was queued before sbatch refused the rest: what was queued is recorded
    in the run folder (status, cancel and --resume see it); the submitter exits 1."""


class LostAfterSending(RuntimeError):
    """A submission over SSH lost its connection after the submission was sent: the cluster side may
    have queued it (its record here says where; `status` asks); the submitter exits 1."""
