"""The submitter: it reads profiles, builds a submission as data, queues it and reads run folders back.

Its wings (docs/architecture.md has the map and the allowed arrows): `commands/` (the verbs),
`request/` (the submission: planned and sent), `waiting/` (for what was sent), `remote/` (the SSH transport), `rundir/` (the run
folder), `node/` (what runs on a node), `heal/` (a SLURM job's own retry step), `cluster/` (the schedulers), `config/` (profiles and their
resolving), `reports/` (what the nodes leave, and what a failure means), `devcluster/` (the SLURM dev cluster, standing alone); and the modules `submitit_private`
(the private parts of submitit relied on), `filestamp` (when a file is unchanged since it was last read),
`client` (the Python API) and `__main__` (`python -m launcher`).

Nothing here imports torch at module level: `submit.py --help`, `--dry-run` and `status` stay fast.
"""
