"""Everything that talks to a scheduler: `slurm/` (SLURM's commands), `local` (the local executor's
processes), `preflights` (each scheduler's preflight, by executor name) and `jobids` (job ids as recorded).
What the nodes leave and what a failure means are launcher.reports'."""
