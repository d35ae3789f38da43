"""Waiting for what was sent (`--wait`, and the Python handles through the command line): `ends` (one
result, or a sweep's endings, or failures root cause first), `pending` (while it waits: a job SLURM requeued
after NODE_FAIL leaves the lost node out before it starts again) and `echo` (rank 0's output live while a
local run is waited for). The request (launcher.request) is done once this starts: nothing here sends."""
