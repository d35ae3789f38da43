"""A real multi-node SLURM cluster on this one machine (a product tool): Debian 12's SLURM 22.05 by
default, or Debian 13's 24.11 (``--slurm 24.11``).

Usage (as root; the daemons, /etc/hosts and apt need it)::

    python -m launcher.devcluster install [--slurm 24.11]   # the packages if missing
    python -m launcher.devcluster up --nodes 4 [--slurm 24.11]   # start (idempotent), wait for nodes
    python -m launcher.devcluster status           # exit 0 if up, 1 if not
    python -m launcher.devcluster env              # eval "$(... env)" for sinfo/sbatch
    python -m launcher.devcluster down             # stop everything it started

Modules: ``paths`` (the state folder, settings, ClusterError), ``releases`` (which
SLURM, and where its programs are: this machine's packages, or Debian 13's unpacked), ``config`` (the
spec, slurm.conf/gres.conf/slurmdbd.conf, /etc/hosts), ``processes`` (pid
files, starting and stopping), ``daemons`` (munge, MariaDB, slurmdbd,
slurmctld, slurmd, accounting, node readiness), ``second`` (a second cluster in the same slurmdbd, for
``-M``: ``up --clusters 2``), ``commands`` and ``cli`` (with
``__main__``: ``python -m launcher.devcluster``); for the tests and benchmarks, ``faults`` (a node dying and
coming back, the controller back, on purpose) and ``sshd`` (a real OpenSSH server as the cluster's login node),
which this file does not import.
It imports nothing else from ``launcher``. This file only hands names on.
"""

from launcher.devcluster.cli import main
from launcher.devcluster.commands import (
    APT_PACKAGES,
    REQUIRED_BINARIES,
    down,
    install,
    is_up,
    missing_binaries,
    print_env,
    status,
    up,
)
from launcher.devcluster.config import (
    HOSTS_FILE,
    HOSTS_MARK,
    OLD_HOSTS_MARKS,
    Node,
    Spec,
    ensure_hosts,
    load_spec,
    render_gres_conf,
    render_slurm_conf,
    render_slurmdbd_conf,
    write_configs,
)
from launcher.devcluster.daemons import USABLE_STATES, node_states, wait_nodes_ready
from launcher.devcluster.paths import (
    ACCOUNT,
    CLUSTER_NAME,
    CRED_EXPIRE_S,
    CTLD_PORT,
    DAEMON_MARK_VAR,
    DBD_PORT,
    DEFAULT_MAX_ARRAY_SIZE,
    GPU_NODES,
    GPUS_PER_NODE,
    MARIADB_PORT,
    MAX_NODES,
    PROJECT_ROOT,
    READY_TIMEOUT_S,
    STATE_DIR,
    ClusterError,
    client_env,
    slurm_conf_path,
)
from launcher.devcluster.processes import running_pid
from launcher.devcluster.releases import DEFAULT_RELEASE, RELEASES, Release, release

__all__ = [
    "ACCOUNT", "APT_PACKAGES", "CLUSTER_NAME", "CRED_EXPIRE_S", "CTLD_PORT", "ClusterError", "DEFAULT_RELEASE",
    "RELEASES", "Release", "release", "DAEMON_MARK_VAR", "DBD_PORT", "DEFAULT_MAX_ARRAY_SIZE", "GPU_NODES", "GPUS_PER_NODE",
    "HOSTS_FILE", "HOSTS_MARK", "MARIADB_PORT", "MAX_NODES", "Node", "OLD_HOSTS_MARKS",
    "PROJECT_ROOT", "READY_TIMEOUT_S", "REQUIRED_BINARIES", "STATE_DIR", "Spec",
    "USABLE_STATES", "client_env", "down", "ensure_hosts", "install", "is_up", "load_spec",
    "main", "missing_binaries", "node_states", "print_env", "render_gres_conf",
    "render_slurm_conf", "render_slurmdbd_conf", "running_pid", "slurm_conf_path", "status",
    "up", "wait_nodes_ready", "write_configs",
]
