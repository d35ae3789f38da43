"""Per-rank services behind the public API: stops, checkpoints, reporting, events, the sampler, timing marks."""
