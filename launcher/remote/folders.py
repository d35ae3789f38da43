"""Every folder under `remote_dir` on the cluster side, named in one place (docs/remote.md).

    REMOTE_DIR/
        code/<content hash>/       this tool's code as it was sent (complete or absent)
        projects/<content hash>/   your project's files as they were sent: it stands in for your checkout
        runs/<run>/                the run folders (the same names as the local records' folders)
        submissions/<run>.json     each submission as the laptop planned it, as the cluster side read it
        data/                      the profile's data_dir there

A content-addressed folder is rsynced into `.<hash>.<pid>.partial` beside it, then renamed, so one
that is there is whole. `root` is remote_dir as the preflight found it (an absolute path), or as the
profile writes it where nothing connects (a dry run: `~/` is then the remote home).
"""

from __future__ import annotations

CODE, PROJECTS, RUNS, SUBMISSIONS, DATA = "code", "projects", "runs", "submissions", "data"
# Made by the preflight, before anything is sent (the others by the sync and the submission).
MADE_FIRST = (CODE, PROJECTS, RUNS)


def content(kind: str, address: str) -> str:
    """A content-addressed folder relative to remote_dir (`kind`: CODE or PROJECTS)."""
    return f"{kind}/{address}"


def partial(kind: str, address: str, pid: int | str) -> str:
    """Where a content-addressed folder is rsynced before it is renamed into place."""
    return f"{kind}/.{address}.{pid}.partial"


def under(root: str, relative: str) -> str:
    return f"{root}/{relative}" if relative else root


def code_dir(root: str, address: str) -> str:
    return under(root, content(CODE, address))


def project_dir(root: str, address: str) -> str:
    return under(root, content(PROJECTS, address))


def runs_dir(root: str) -> str:
    return under(root, RUNS)


def run_dir(root: str, name: str) -> str:
    return f"{runs_dir(root)}/{name}"


def submission_file(name: str) -> str:
    """Relative to remote_dir: the submission of run `name`, as sent."""
    return f"{SUBMISSIONS}/{name}.json"


def data_dir(root: str) -> str:
    return under(root, DATA)
