"""Everything that talks to a scheduler: `slurm/` (SLURM's commands), `local` (the local executor's
processes), `preflights` (each scheduler's preflight, by executor name), `jobids` (job ids as recorded),
`failures` (what failed, shortened to one line, and which failed rank is the cause), `fault_origin`
(whose fault a failed attempt was: a node's, to leave out of later attempts, or the code's),
`rank_notes` (what the ranks under a node's torchrun leave in the job's folder: named and read once) and
`pool_claims` (who runs which point of a pool: named and read once likewise)."""
