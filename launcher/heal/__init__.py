"""Runs that heal themselves: the retry step a SLURM batch script runs around srun
(`python -m launcher.heal before|after ...`, written by launcher.cluster.slurm.healing).

After an attempt failed, `after` reads how each rank ended (facts), asks where the failure came from
(launcher.reports.fault_origin: the node or the code), leaves a failed node out of the run's later attempts
(launcher.rundir.exclusions) and, within the profile's `max_failures` (launcher.rundir.retries),
requeues the job without it (launcher.cluster.slurm.requeue); the next attempt resumes from the newest
checkpoint, as after a preemption. `before` keeps the logs' attempt marks, records a node SLURM lost
(NODE_FAIL) and moves an attempt off a left-out node. Every decision is a "failure" event in the task's
events.jsonl and a `[heal]` line in rank 0's log. This wing is the job's own: nothing imports it.

`__main__` (the command line: any error of the step itself is one line, and the job goes on), `attempt`
(the two moments) and `facts` (what an attempt left in the run folder).
"""
