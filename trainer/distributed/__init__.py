"""Where this process sits in the job and how it joins the others: `environment` (DistEnv from the
environment variables), `hostlist` (SLURM node lists), `threads` (the thread count per rank), `process`
(threads, device, process group), `ranks` (the collectives) and `usergroup` (a user function's own
`init_process_group`)."""
