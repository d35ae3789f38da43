"""The command line's verbs, one module per family: `main` (parsing and dispatch), `submit` (a new run and
its `--dry-run`), `sending` (the one path every submission takes, and a new run's report and `--wait`), `reuse` (a submission
whose signature's run exists: answered with it, followed or continued), `resume`, `operate` (`status`,
`logs`), `cancel`, `recent` (`list`), `diff` (what differs between two runs), `watch`, `probe`, `when` (`--when`), `catalog` (`list-profiles`, `list-jobs`,
`show`) and `receive` (the cluster side of a submission over SSH); `console` is their own helper
(console output and exit codes). Only `submit.py` (and `launcher/__main__.py`) imports this wing."""
