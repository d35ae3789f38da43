"""What travels to the cluster side over SSH, by content (docs/remote.md): the content address of the
tool's code snapshot and of your own project's files (remembered per file by size, mtime and inode,
as git's index does, so an unchanged project costs stat calls, not reads), and the project's rsync into
REMOTE_DIR/projects/<address>, the folder that stands in for your checkout there."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.cluster.ssh import Connection
from trainer.config import project


def code_hash(code: Path) -> str:
    """The snapshot's content address: its files' names and bytes (not its SNAPSHOT.json timing)."""
    return files_hash(code, [str(p.relative_to(code)) for p in code.rglob("*")
                             if p.is_file() and p.name != "SNAPSHOT.json"])


def files_hash(root: Path, names: list[str]) -> str:
    """The content address of `names` (relative to `root`): their names and bytes (a symbolic link: its target)."""
    digest = hashlib.sha256()
    for name in sorted(names):
        path = root / name
        body = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
        digest.update(name.encode("utf-8", "surrogateescape") + b"\0" + body + b"\0")
    return digest.hexdigest()[:20]


RACY_S = 2.0


def hash_cache_file(root: Path) -> Path:
    """Where the content hashes of `root`'s files are remembered (by size, mtime and inode, as git's index does)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "ddp-submit" / "project-hashes"
    return base / f"{hashlib.sha256(str(root).encode()).hexdigest()[:20]}.json"


def project_hash(root: Path, names: list[str]) -> tuple[str, str]:
    """The content address of `names` and the one before it ("": none), from each file's sha256,
    computed again only for files whose size, mtime or inode changed since the last submission of
    this project (an unchanged 20,000-file project is 20,000 stat calls, not 40 MB read)."""
    cache_file = hash_cache_file(root)
    try:
        cache = json.loads(cache_file.read_text())
        known, before = cache["files"], str(cache["address"])
    except (OSError, ValueError, KeyError, TypeError):
        known, before = {}, ""
    files, digest, now = {}, hashlib.sha256(), time.time_ns()
    for name in sorted(names):
        path = root / name
        info = os.lstat(path)
        stamp = [info.st_size, info.st_mtime_ns, info.st_ino]
        entry = known.get(name)
        if not (isinstance(entry, list) and len(entry) == 4 and entry[:3] == stamp):
            body = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
            entry = [*stamp, hashlib.sha256(body).hexdigest()]
        # A file modified within RACY_S of now may change again within the clock's granularity,
        # keeping its stamp (git's "racy" entries): its hash is not remembered, only used.
        files[name] = entry if now - info.st_mtime_ns > RACY_S * 1e9 else entry[:3]
        digest.update(name.encode("utf-8", "surrogateescape") + b"\0" + entry[3].encode() + b"\0")
    address = digest.hexdigest()[:20]
    if address != before or files != known:
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            partial = cache_file.with_suffix(f".{os.getpid()}.partial")
            partial.write_text(json.dumps({"root": str(root), "address": address, "files": files}))
            os.replace(partial, cache_file)
        except OSError:
            pass  # a cache only: the next submission hashes again
    return address, before


@dataclass
class Listing:
    """Your project as it will travel: its root here, the snapshot's files and their content address."""

    root: Path
    files: list[str]
    address: str
    before: str  # the address of this project's previous submission ("": none)

    def folders(self) -> tuple[str, ...]:
        """The folders under remote_dir the preflight asks about: this version's and the previous one's."""
        return tuple(f"projects/{a}" for a in dict.fromkeys((self.address, self.before)) if a)


def project_listing(sub: Any, source: str) -> Listing | None:
    """The files a snapshot of your own project (an `entrypoint:`/`script:` job's root) would take
    (git's list, .gitignore and snapshot_exclude honoured; the plan's own listing when it made one)
    and their address. None: a built-in job."""
    from launcher.rundir import snapshot

    if not sub.project_root:
        return None
    root = Path(sub.project_root).resolve()
    files = sub.project if sub.project is not None else snapshot.survey(
        root, sub.profile.snapshot_exclude, sub.profile.snapshot_max_mb, source,
        skip=[Path(sub.profile.runs_dir).expanduser().resolve()])
    address, before = project_hash(root, files.files)
    return Listing(root, files.files, address, before)


def sync_project(conn: Connection, listing: Listing, found: set[str], remote_root: str,
                 submit_dir: Path) -> dict[str, Any]:
    """The project to REMOTE_DIR/projects/<content hash>, sent from where it is. A folder there is
    complete or absent (rsynced into a partial one, then renamed), so an unchanged project (`found`
    by the preflight) transfers no file; a changed one is rsynced with the previous version's folder
    as --copy-dest (only the changed files travel). On the cluster side that folder stands in for
    your checkout (docs/remote.md)."""
    where = f"{remote_root}/projects/{listing.address}"
    previous = f"{remote_root}/projects/{listing.before}" if f"projects/{listing.before}" in found else ""
    sent = 0
    if f"projects/{listing.address}" not in found:
        partial = f"{remote_root}/projects/.{listing.address}.{os.getpid()}.partial"
        sent = conn.rsync_files(listing.root, listing.files, partial, previous)
        # Another submitter may have completed the same folder meanwhile: theirs is as good.
        conn.run(f"mv -T {shlex.quote(partial)} {shlex.quote(where)} 2>/dev/null || rm -rf {shlex.quote(partial)}",
                 timeout=120)
    here, root = submit_dir.resolve(), listing.root
    rel = here.relative_to(root) if project.inside(here, root) else None
    return {"root": str(root), "dir": where, "hash": listing.address, "files": len(listing.files), "sent": sent,
            "submit_dir": "" if rel is None else where if rel == Path(".") else f"{where}/{rel}"}


def project_job(job_data: dict[str, Any], job: Any, synced: dict[str, Any]) -> dict[str, Any]:
    """The job as the cluster side reads it: the project root, the job file's folder and the script
    (made absolute by the check here) moved to their places in the synced project; a job file's
    folder outside the project does not travel (the synced project root stands for it)."""
    root, there = Path(synced["root"]), synced["dir"]

    def moved(path: str) -> str | None:
        where = Path(path).resolve()
        if not project.inside(where, root):
            return None
        rel = where.relative_to(root)
        return there if rel == Path(".") else f"{there}/{rel}"

    data = {**job_data, "project_root": there, "code_dir": (job.code_dir and moved(job.code_dir)) or there}
    if job.script and (script := moved(job.script)) is not None:
        data["script"] = script
    return data
