"""What travels to the cluster side over SSH, by content (docs/remote.md): the content address of
the tool's code and of your own project's files (remembered per file while unchanged by the
snapshot's rule, launcher.rundir.links, as git's index does, so an unchanged project costs stat calls,
not reads), and their rsync, from where
they are, into REMOTE_DIR/code/<address> and REMOTE_DIR/projects/<address> (the folder that stands
in for your checkout there)."""

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
from launcher.rundir import links
from trainer.config import project
from trainer.config.lookup import CODE_ROOT

def hash_cache_file(root: Path, kind: str = "project") -> Path:
    """Where the content hashes of `root`'s files are remembered (by size, mtime and inode, as git's index does)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "ddp-submit" / "project-hashes"
    return base / f"{hashlib.sha256(f'{kind}:{root}'.encode()).hexdigest()[:20]}.json"


def project_hash(root: Path, names: list[str], kind: str = "project",
                 known_stamps: dict[str, links.Entry] | None = None) -> tuple[str, str]:
    """The content address of `names` and the one before it ("": none), from each file's sha256,
    computed again only for files not unchanged since the last submission of this project (the
    snapshot's rule, launcher.rundir.links: size, mtime, ctime and inode). The unchanged case reads one
    small file: the digest of every name and stamp as remembered; when this call's stamps give the
    same digest, the address is the remembered one, and the cost is one lstat per file (the per-file
    hashes are read only when something changed), none where `known_stamps` has them (the snapshot
    listing's, made moments before by the same submission)."""
    cache_file = hash_cache_file(root, kind)
    head_file = cache_file.with_suffix(".head")
    names = sorted(names)
    base, now = os.path.join(str(root), ""), time.time()
    given = known_stamps or {}
    stamps = [given.get(name) or links.source_stat(os.lstat(base + name)) for name in names]
    stamped = hashlib.sha256("\0".join(f"{n}\0" + "\0".join(map(str, st)) for n, st in zip(names, stamps))
                             .encode("utf-8", "surrogateescape")).hexdigest()
    try:
        head = json.loads(head_file.read_text())
        if head["stamps"] == stamped:
            return str(head["address"]), str(head["address"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        cache = json.loads(cache_file.read_text())
        known, before = dict(zip(cache["names"], cache["entries"])), str(cache["address"])
    except (OSError, ValueError, KeyError, TypeError):
        known, before = {}, ""
    # A file changed within RACY_S of now may change again within the clock's granularity, keeping its
    # stamp (git's "racy" entries, links.settled): its hash is used, not remembered (the next call reads it again).
    entries, digest = [], hashlib.sha256()
    for name, stamp in zip(names, stamps):
        entry = known.get(name)
        if not (isinstance(entry, list) and len(entry) == 5 and links.unchanged(entry, list(stamp))):
            path = base + name
            body = os.readlink(path).encode() if os.path.islink(path) else Path(path).read_bytes()
            entry = [*stamp, hashlib.sha256(body).hexdigest()]
        entries.append(entry if links.settled(stamp, now) else entry[:4])
        digest.update(name.encode("utf-8", "surrogateescape") + b"\0" + entry[4].encode() + b"\0")
    address = digest.hexdigest()[:20]
    racy = any(len(entry) < 5 for entry in entries)
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        for path, body in ((cache_file, {"root": str(root), "address": address, "names": names, "entries": entries}),
                           (head_file, {"address": address, "stamps": "" if racy else stamped})):
            partial = path.with_suffix(f".{os.getpid()}.partial")
            partial.write_text(json.dumps(body))
            os.replace(partial, path)
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

    def folders(self, kind: str = "projects") -> tuple[str, ...]:
        """The folders under remote_dir the preflight asks about: this version's and the previous one's."""
        return tuple(f"{kind}/{a}" for a in dict.fromkeys((self.address, self.before)) if a)


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
    address, before = project_hash(root, files.files, known_stamps=files.stats)
    return Listing(root, files.files, address, before)


def tool_listing() -> tuple[Listing, dict[str, Any]]:
    """This tool's code as it will travel (the files a run's RUN/code copies, from where they are:
    no local copy is made) and the snapshot note the cluster side writes for it (git's view)."""
    from launcher.rundir import snapshot

    files, git = snapshot.tool_files(CODE_ROOT)
    address, _ = project_hash(CODE_ROOT, files, kind="code")
    return Listing(CODE_ROOT, files, address, ""), {"from": str(CODE_ROOT), "files": len(files), **git}


def sync_listing(conn: Connection, listing: Listing, found: set[str], remote_root: str, kind: str) -> tuple[str, int]:
    """`listing` to REMOTE_DIR/<kind>/<content hash> (where it is, and how many files were sent). A
    folder there is complete or absent (rsynced into a partial one, then renamed), so one `found` by
    the preflight is whole and nothing is sent; a changed project is rsynced with the previous
    version's folder as --copy-dest (only the changed files travel)."""
    where = f"{remote_root}/{kind}/{listing.address}"
    if f"{kind}/{listing.address}" in found:
        return where, 0
    previous = f"{remote_root}/{kind}/{listing.before}" if f"{kind}/{listing.before}" in found else ""
    partial = f"{remote_root}/{kind}/.{listing.address}.{os.getpid()}.partial"
    sent = conn.rsync_files(listing.root, listing.files, partial, previous)
    # Another submitter may have completed the same folder meanwhile: theirs is as good.
    conn.run(f"mv -T {shlex.quote(partial)} {shlex.quote(where)} 2>/dev/null || rm -rf {shlex.quote(partial)}",
             timeout=120)
    return where, sent


def sync_project(conn: Connection, listing: Listing, found: set[str], remote_root: str,
                 submit_dir: Path) -> dict[str, Any]:
    """The project to REMOTE_DIR/projects/<content hash>, sent from where it is (sync_listing). On
    the cluster side that folder stands in for your checkout (docs/remote.md)."""
    where, sent = sync_listing(conn, listing, found, remote_root, "projects")
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
