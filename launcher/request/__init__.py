"""The submission as pure data (`submission`: what `--dry-run` prints) and the one place that
queues it (`send`)."""
