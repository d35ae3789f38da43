"""Which SLURM the dev cluster runs: this machine's own packages (Debian 12's 22.05, the default), or
Debian 13's 24.11 unpacked from Debian's packages into a folder of its own and run from there.

Debian 13's SLURM cannot be installed over Debian 12's (it needs a newer C library), so `install
--slurm 24.11` unpacks Debian's trixie packages (slurmctld, slurmd, slurmdbd, slurm-client and what
they depend on, C library included) with ``mmdebstrap --variant=extract`` into
``<state>/slurm/24.11/root`` and points each SLURM program there at that folder's own loader and
libraries (``patchelf``: the interpreter, and an RPATH, which unlike RUNPATH also covers the plugins
SLURM loads and their libraries). The programs then run on this machine as they are: no chroot, so
a job's processes (the batch script, srun's tasks, the ranks' Python) are this machine's, exactly as
under 22.05. Nothing of that folder is on the loader's search path of anything else.

While 24.11 is up, its client commands are linked into ``/usr/local/bin`` (ahead of ``/usr/bin`` on
every usual PATH, an SSH login's included), so that this machine is a 24.11 site for every shell and
job; `down` and an `up` of another release remove exactly those links. munged and MariaDB are this
machine's for both releases; each release keeps its own state (spool folders, accounting database),
because neither reads the other's back.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from launcher.devcluster.paths import COMMAND, STATE_DIR, ClusterError, active_clients

DEFAULT_RELEASE = "22.05"
# Debian's client programs of SLURM (package slurm-client), linked for an unpacked release.
CLIENTS = (
    "sacct", "sacctmgr", "salloc", "sattach", "sbatch", "sbcast", "scancel", "scontrol", "scrontab", "sdiag",
    "sinfo", "sprio", "squeue", "sreport", "srun", "sshare", "sstat", "strigger",
)
DAEMONS = ("slurmctld", "slurmd", "slurmdbd", "slurmstepd")
# Where an unpacked release's client commands are linked while it is up (see the module doc).
LINK_DIR = Path("/usr/local/bin")
MULTIARCH = "usr/lib/x86_64-linux-gnu"


@dataclass(frozen=True)
class Release:
    """One SLURM release the dev cluster can run, and where its programs are."""

    version: str  # as `--slurm` takes it, e.g. "24.11"
    suite: str  # the Debian suite whose packages it is
    unpacked: bool  # False: this machine's own packages; True: unpacked into root()

    def home(self) -> Path:
        return STATE_DIR / "slurm" / self.version

    def root(self) -> Path:
        return self.home() / "root" if self.unpacked else Path("/")

    def state_tag(self) -> str:
        """Names this release's own state (spool folder, accounting database)."""
        return self.version.replace(".", "_")

    def daemon(self, name: str) -> str:
        """The command that starts daemon `name` (slurmctld, slurmd, slurmdbd; slurmstepd for slurmd -d).

        An unpacked release's are links named like the daemon (its process name then reads so), to
        Debian's `-wlm` programs; this machine's own are found on PATH, as their packages install them."""
        return str(self.home() / "sbin" / name) if self.unpacked else name

    def client_dir(self) -> Path | None:
        """The folder of this release's client commands, ahead of PATH; None: this machine's own."""
        return self.home() / "bin" if self.unpacked else None

    def plugin_dir(self) -> str | None:
        """slurm.conf's PluginDir for this release; None: the compiled-in default."""
        return str(self.root() / MULTIARCH / "slurm-wlm") if self.unpacked else None

    def ready_file(self) -> Path:
        return self.home() / "ready"

    def missing(self) -> list[str]:
        """What `install --slurm VERSION` would add; empty when this release can run."""
        if not self.unpacked:
            return []
        return [] if self.ready_file().exists() else [f"SLURM {self.version} under {self.home()}"]


RELEASES = {
    "22.05": Release("22.05", "bookworm", unpacked=False),
    "24.11": Release("24.11", "trixie", unpacked=True),
}
# The host packages an unpacked release needs: the unpacking tool, the loader patcher.
UNPACK_TOOLS = {"mmdebstrap": "mmdebstrap", "patchelf": "patchelf"}
DEBIAN_PACKAGES = ("slurmctld", "slurmd", "slurmdbd", "slurm-client")
MIRROR = os.environ.get("DEV_CLUSTER_DEBIAN_MIRROR", "http://deb.debian.org/debian")


def release(version: str | None) -> Release:
    """The release named `version` (None: the default); ClusterError naming the valid ones."""
    version = version or DEFAULT_RELEASE
    if version not in RELEASES:
        raise ClusterError(f"--slurm {version!r}: the dev cluster runs {' or '.join(RELEASES)}")
    return RELEASES[version]


def _is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _point_at_root(rel: Release, program: Path) -> None:
    """Make `program` load its C library and every library (plugins' too) from the release's root."""
    libs = rel.root() / MULTIARCH
    subprocess.run(["patchelf", "--set-interpreter", str(libs / "ld-linux-x86-64.so.2"), "--force-rpath",
                    "--set-rpath", f"{libs}/slurm-wlm:{libs}", str(program)], check=True)


def unpack(rel: Release) -> None:
    """Unpack `rel`'s Debian packages into its root and make its programs run from there (idempotent)."""
    if not rel.unpacked or rel.ready_file().exists():
        return
    shutil.rmtree(rel.home(), ignore_errors=True)  # a half-made one from an interrupted install
    rel.home().mkdir(parents=True)
    print(f"unpacking Debian {rel.suite}'s SLURM into {rel.root()}", flush=True)
    proc = subprocess.run(["mmdebstrap", "--variant=extract", "--include=" + ",".join(DEBIAN_PACKAGES),
                           rel.suite, str(rel.root()), MIRROR], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ClusterError(f"mmdebstrap of {rel.suite} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    root = rel.root()
    programs = [root / "usr/bin" / name for name in CLIENTS]
    programs += [root / "usr/sbin" / f"{name}-wlm" for name in ("slurmctld", "slurmd", "slurmstepd")]
    programs.append(root / "usr/sbin/slurmdbd")
    for program in programs:
        if _is_elf(program):
            _point_at_root(rel, program)
    for sub, names in (("bin", CLIENTS), ("sbin", DAEMONS)):
        (rel.home() / sub).mkdir()
        for name in names:
            target = root / "usr" / sub / (name if sub == "bin" or name == "slurmdbd" else f"{name}-wlm")
            if target.exists():
                (rel.home() / sub / name).symlink_to(target)
    # slurmd -V: the clients read a configuration before they answer even --version.
    version = subprocess.run([rel.daemon("slurmd"), "-V"], capture_output=True, text=True)
    if not version.stdout.startswith(f"slurm-wlm {rel.version}"):
        raise ClusterError(f"the unpacked slurmd says {version.stdout.strip() or version.stderr.strip()!r}, "
                           f"not SLURM {rel.version}")
    rel.ready_file().write_text(version.stdout)


def _ours(link: Path) -> bool:
    """A link a dev cluster made: it points at `<state>/slurm/<release>/bin/<its own name>`.

    By shape, not by this checkout's state folder: a session that ended with 24.11 up leaves its links behind,
    and a copy of that machine (CI's, a colleague's clone in another folder) must replace them rather than
    refuse to start. A client of a real SLURM installed there by hand has another shape and is left alone."""
    if not link.is_symlink():
        return False
    parts = Path(os.readlink(link)).parts
    return (len(parts) >= 4 and parts[-1] == link.name and parts[-2] == "bin" and parts[-4] == "slurm"
            and re.fullmatch(r"\d+\.\d+", parts[-3]) is not None)


def link_clients(rel: Release) -> None:
    """Make `rel`'s client commands the ones this machine's shells and jobs find (see the module doc)."""
    unlink_clients()
    folder = rel.client_dir()
    if folder is None:
        return
    taken = [LINK_DIR / n for n in CLIENTS if (LINK_DIR / n).exists() or (LINK_DIR / n).is_symlink()]
    if taken:
        raise ClusterError(f"{taken[0]} exists and is not the dev cluster's: SLURM {rel.version}'s clients "
                           f"would not be found first on PATH; move it away, then `{COMMAND} up` again")
    LINK_DIR.mkdir(parents=True, exist_ok=True)
    active_clients().symlink_to(folder)
    for name in CLIENTS:
        if (folder / name).exists():
            (LINK_DIR / name).symlink_to(folder / name)


def unlink_clients() -> None:
    """Remove the client links an unpacked release left in LINK_DIR, and nothing else."""
    active_clients().unlink(missing_ok=True)
    for name in CLIENTS:
        if _ours(LINK_DIR / name):
            (LINK_DIR / name).unlink()
