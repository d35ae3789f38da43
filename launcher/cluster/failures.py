"""What the scheduler's tools and the tasks they ran said, shortened to the line a user reads.

sbatch's refusal, scontrol's complaint and a rank's traceback are reported by every wing above
this one; they all shorten them the same way, here.
"""

from __future__ import annotations


def last_line(text: str | bytes | None, default: str = "") -> str:
    """The last non-blank line: a traceback's exception, a SLURM command's conclusion
    ("Unable to contact slurm controller")."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else default


def one_line(text: str | None, default: str = "") -> str:
    """All non-blank lines joined by spaces (sbatch's multi-line refusals quoted in one error line)."""
    return " ".join(line.strip() for line in (text or "").splitlines() if line.strip()) or default
