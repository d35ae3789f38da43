"""What travels to the cluster side over SSH, by content (docs/remote.md): the content address of
the tool's code and of your own project's files (remembered per file while unchanged by the tool's
one rule, launcher.filestamp, as git's index does, so an unchanged project costs stat calls, not
reads), and their rsync, from where they are, into REMOTE_DIR/code/<address> and REMOTE_DIR/projects/<address> (launcher.remote.folders).
Which files travel is the snapshot's list (launcher.rundir.snapshot), given by the caller."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from launcher import filestamp
from launcher.remote import folders
from launcher.remote.connection import Connection


def hash_cache_file(root: Path, kind: str = "project") -> Path:
    """Where the content hashes of `root`'s files are remembered (by their stamps, as git's index does)."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "ddp-submit" / "project-hashes"
    return base / f"{hashlib.sha256(f'{kind}:{root}'.encode()).hexdigest()[:20]}.json"


def project_hash(root: Path, names: list[str], kind: str = "project",
                 known_stamps: dict[str, filestamp.Entry] | None = None) -> tuple[str, str]:
    """The content address of `names` and the one before it ("": none), from each file's sha256,
    computed again only for files not unchanged since the last submission of this project (the
    tool's rule, launcher.filestamp: size, mtime, ctime and inode). The unchanged case reads one
    small file: the digest of every name and stamp as remembered; when this call's stamps give the
    same digest, the address is the remembered one, and the cost is one lstat per file (the per-file
    hashes are read only when something changed), none where `known_stamps` has them (the snapshot
    listing's, made moments before by the same submission)."""
    cache_file = hash_cache_file(root, kind)
    head_file = cache_file.with_suffix(".head")
    names = sorted(names)
    base, now = os.path.join(str(root), ""), time.time()
    given = known_stamps or {}
    stamps = [given.get(name) or filestamp.source_stat(os.lstat(base + name)) for name in names]
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
    # stamp (git's "racy" entries, filestamp.settled): its hash is used, not remembered (the next call reads it again).
    entries, digest = [], hashlib.sha256()
    for name, stamp in zip(names, stamps):
        entry = known.get(name)
        if not (isinstance(entry, list) and len(entry) == 5 and filestamp.unchanged(entry, list(stamp))):
            path = base + name
            body = os.readlink(path).encode() if os.path.islink(path) else Path(path).read_bytes()
            entry = [*stamp, hashlib.sha256(body).hexdigest()]
        entries.append(entry if filestamp.settled(stamp, now) else entry[:4])
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

    kind: str = folders.PROJECTS  # where it goes under remote_dir: folders.CODE or folders.PROJECTS

    def folders(self) -> tuple[str, ...]:
        """The folders under remote_dir the preflight asks about: this version's and the previous one's."""
        return tuple(folders.content(self.kind, a) for a in dict.fromkeys((self.address, self.before)) if a)


def listing(root: Path, files: list[str], kind: str = folders.PROJECTS,
            stamps: dict[str, filestamp.Entry] | None = None) -> Listing:
    """`files` of `root` as they will travel, with their content address (`stamps`: the snapshot
    listing's, made moments before by the same submission, spare the lstat calls)."""
    address, before = project_hash(root, files, "code" if kind == folders.CODE else "project", stamps)
    return Listing(root, files, address, before if kind == folders.PROJECTS else "", kind)


def sync(conn: Connection, listing: Listing, found: set[str], remote_root: str) -> tuple[str, int]:
    """`listing` to its content-addressed folder there (where it is, and how many files were sent). A
    folder there is complete or absent (rsynced into a partial one, then renamed), so one `found` by
    the preflight is whole and nothing is sent; a changed project is rsynced with the previous
    version's folder as --copy-dest (only the changed files travel)."""
    kind, address = listing.kind, listing.address
    where = folders.under(remote_root, folders.content(kind, address))
    if folders.content(kind, address) in found:
        return where, 0
    before = folders.content(kind, listing.before)
    previous = folders.under(remote_root, before) if listing.before and before in found else ""
    partial = folders.under(remote_root, folders.partial(kind, address, os.getpid()))
    sent = conn.rsync_files(listing.root, listing.files, partial, previous)
    # Another submitter may have completed the same folder meanwhile: theirs is as good.
    conn.run(f"mv -T {shlex.quote(partial)} {shlex.quote(where)} 2>/dev/null || rm -rf {shlex.quote(partial)}",
             timeout=120)
    return where, sent


