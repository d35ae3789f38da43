"""When a file is unchanged since it was last read: git's rule for its index, and the one rule of this
tool, for the snapshot's links (launcher.rundir.snapshot_links: a copy lent by the previous run) and the
SSH sync's remembered content hashes (launcher.remote.sync).

A file's stamp is its size, mtime, ctime and inode (`source_stat`); it is unchanged when its stamp now
is the one recorded (`unchanged`), and what was read then is its content only when its mtime and ctime
were older than that reading by more than `RACY_S` (`settled`): an edit in the same clock tick as the
reading (on a file system that keeps whole seconds, or two) keeps the stamp, so a racy file is read
again next time. The ctime catches an edit whose mtime was put back (`cp -p`, `touch -r`, an archive
tool). Standard library only: both the run folder's wing and the SSH transport's stand above it.
"""

from __future__ import annotations

import os

RACY_S = 2.0
# A file's stamp: size, mtime_ns, ctime_ns, inode (a snapshot's manifest appends its copy's own stat).
Entry = list[int]


def source_stat(st: os.stat_result) -> Entry:
    """A file's stamp: size, mtime_ns, ctime_ns, inode (what `unchanged` compares)."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def unchanged(recorded: Entry, now: Entry) -> bool:
    """The file stamped `now` is the one stamped `recorded`, with its content then (when `settled`)."""
    return recorded[:4] == now[:4]


def settled(stamp: Entry, at: float) -> bool:
    """Whether the file stamped `stamp` had stopped changing more than RACY_S before `at` (a time.time()
    at which its content was read): else an edit within the clock's granularity could keep its stamp."""
    return max(stamp[1], stamp[2]) < int((at - RACY_S) * 1e9)
