"""Everything that talks to a scheduler: one module per backend (`slurm/`, `local`), and job ids."""
