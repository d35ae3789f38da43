"""The torchrun command line of the `launch: torchrun` shape, as pure data (what `--dry-run` shows and
what each node's task runs): one torchrun per node, c10d rendezvous on the allocation's first node.
"""

from __future__ import annotations

# The worker each torchrun process runs: it loads the job and trains one rank (launcher/node/torchrun_worker.py).
WORKER_MODULE = "launcher.node.torchrun_worker"


def command(python: str, nnodes: int | str, nproc: int, first_node: str, port: int | str, run_id: str,
            spec: str, is_host: bool | str) -> list[str]:
    """torchrun for one node of the job. `--max-restarts=0`: a dead rank ends the node's other workers
    and the agent exits non-zero, which ends the job (srun --kill-on-bad-exit); requeueing is the
    scheduler's, not the agent's. The run id is the job's, so the nodes of one job (and only they) meet.
    `is_host`: the first node's agent serves the rendezvous store. Said, not guessed: torchrun's guess
    compares the endpoint with the machine's hostname, which a node's SLURM name need not be."""
    return [python, "-m", "torch.distributed.run", f"--nnodes={nnodes}", f"--nproc-per-node={nproc}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={first_node}:{port}", f"--rdzv-id={run_id}",
            f"--rdzv-conf=is_host={str(is_host).lower()}", "--max-restarts=0", "-m", WORKER_MODULE, spec]


def preview(nnodes: int, nproc: int) -> str:
    """The command as `--dry-run` shows it: the job's values are known only on the node."""
    import shlex

    words = command("PYTHON", nnodes, nproc, "FIRST_NODE", "PORT", "SLURM_JOB_ID", "RUN/logs/JOB/torchrun-NODE.pkl",
                    "NODE==0")
    return shlex.join(words) + "   (FIRST_NODE: the allocation's first node; PORT: derived from the job id)"
