"""What runs on a rank: `dispatch` (the one dispatcher, `run_job`), `functions` (calling a training
function), `entrypoints` (finding and checking an entrypoint), `pickled` (a function pickled by value
into the run folder: written, read, checked like an entrypoint), `failures` (what your function raised
on a rank, as a record), `usertypes` (its config dataclass, built with cattrs), `scripts` (a `script:`
per rank), `childproc` (the script's process ties to its task) and `envelope` (the result's shape)."""
