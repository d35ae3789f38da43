"""How a submission can end part-way, as the command line reports it.

Its own module, with no imports, so that the command line's error handling does not load the
submit path (send.py and what it imports) for commands that never submit, such as `status`.
"""

from __future__ import annotations


class PartiallySubmitted(RuntimeError):
    """Part of a split array was queued before sbatch refused the rest: what was queued is recorded
    in the run folder (status, cancel and --resume see it); the submitter exits 1."""
