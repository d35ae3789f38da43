"""Per-rank services behind the public API: `context` (Context), `stopping` (stop signals), `checkpoint`
(with `durable`, its atomic checksummed files, and `sharded`, FSDP2 state through torch.distributed.checkpoint),
`interval` (the checkpoint interval from measurements),
`reporting` (logs, metrics, TensorBoard), `events` (events.jsonl, and the attempt number), `jsonlines`
(the one reader of events.jsonl and metrics.jsonl), `trackers` (MLflow and W&B runs),
`sampler` (ResumableSampler), `timing` (marks on the way to the first step), `handoff` (a script's stop
hand-off) and `rundir` (the names the trainer writes in a run folder)."""
