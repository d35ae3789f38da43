"""SLURM: the environment for its commands (`env`), sbatch parameters (`sbatch`), the partition
limits from scontrol (`limits`), job states from sacct/squeue and scancel (`accounting`), and srun's
report lines (`srun`)."""
