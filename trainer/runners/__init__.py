"""What runs on a rank: `dispatch` (the one dispatcher, `run_job`), `functions` (calling a training
function), `entrypoints` (finding and checking an entrypoint), `usertypes` (its config dataclass, built
with cattrs), `scripts` (a `script:` per rank), `childproc` (the script's process ties to its task) and
`envelope` (the result's shape)."""
