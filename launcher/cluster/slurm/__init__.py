"""SLURM: the environment for its commands (`env`), the cluster's release and what depends on it
(`release`), the request and its sbatch parameters (`sbatch`),
the preflight against the live cluster (`limits`, with `capacity`: room in the queue, and `gres`: the
nodes' GPUs; `clusters`: against each of several), job states from sacct/squeue and scancel (`accounting`), a controller that does not
answer (`controller`), what a job used (`usage`), srun's report lines (`srun`), the batch script's
retry-step lines (`healing`), a job requeuing itself without the nodes its run leaves out (`requeue`),
when a request would start (`start_estimate`) and the allocation the submitter holds (`allocation`)."""
