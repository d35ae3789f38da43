"""The submission: as pure data (`submission`: what `--dry-run` prints), planned and checked (`plan`;
over SSH `over_ssh`, with `wire`: the submission as JSON and back), its submitit `executor` (and the
sbatch script; `in_allocation`: a job step of the allocation held here), `send` (the single place that
queues it), `errors` (how sending fails), `when_variants` (`--when`: when it would start, and its
variants) and `channel` (`--events FD`: what a submission tells the program that started it, as JSON
lines). Waiting for what was sent is launcher.waiting's."""
