"""The submission: as pure data (`submission`: what `--dry-run` prints), planned and checked (`plan`;
over SSH `over_ssh`, with `wire`: the submission as JSON and back), its submitit `executor` (and the
sbatch script; `in_allocation`: a job step of the allocation held here), `send` (the single place that
queues it), `errors` (how sending fails), `waiting` (for what was sent; `pending`: a job requeued after
NODE_FAIL leaves the lost node out before it starts again), `when_variants` (`--when`: when it would start, and its
variants), `echo` (rank 0's output live while a local run is waited for) and `channel` (`--events FD`: what
a submission tells the program that started it, as JSON lines)."""
