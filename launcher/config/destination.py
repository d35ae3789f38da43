"""The `login:` key: an ssh destination in either form OpenSSH takes (docs/remote.md).

    login: mylab                      # a ~/.ssh/config alias, or host, or user@host
    login: ssh://alice@login.example.org:2222   # OpenSSH's URI form: ssh://[user@]host[:port]

Parsed once, where the profile is loaded (launcher.config.profile), so that a malformed value is one
`error:` line naming the key; the connection (launcher.remote.connection) asks this module for the
words ssh and rsync get. The URI form's port is passed as `-p PORT`: rsync's `HOST:PATH` has no room
for a port, and ssh then reads the same destination from both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The plain form as ssh reads it: a config alias, host or user@host (IPv6 in brackets or bare). (Pattern
# strings: re compiles them on first use, so that a profile without `login:` never pays for it.)
_PLAIN = r"[A-Za-z0-9_.@:\[\]%+-]+"
_URI = (r"ssh://(?:(?P<user>[A-Za-z0-9_.+-]+)@)?(?P<host>[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.%A-Za-z]+\])"
        r"(?::(?P<port>[0-9]{1,5}))?")
VALID = ("an ssh destination: a ~/.ssh/config alias, host or user@host, or ssh://[user@]host[:port] "
         "(no spaces, no path, not starting with '-', a port from 1 to 65535)")


@dataclass(frozen=True)
class Destination:
    """Where ssh and rsync connect: `ssh_host` as ssh reads it (alias, host or user@host), the same
    as rsync's `HOST:PATH` reads it (an IPv6 address in brackets), and a port (None: the one the
    user's ssh config gives)."""

    ssh_host: str
    rsync_host: str
    port: int | None = None

    def ssh_options(self) -> list[str]:
        """The options that carry the port (ssh and rsync's -e alike)."""
        return ["-p", str(self.port)] if self.port is not None else []


def problem(login: str) -> str | None:
    """None when `login` is a destination ("" too: no SSH), else what would be valid."""
    return None if login == "" or _parse(login) is not None else VALID


def parse(login: str) -> Destination:
    """The destination of a `login:` value (checked at profile load: `problem`)."""
    found = _parse(login)
    if found is None:
        raise ValueError(f"login {login!r}: expected {VALID}")
    return found


def _parse(login: str) -> Destination | None:
    if login.startswith("ssh://"):
        uri = re.fullmatch(_URI, login)
        if uri is None or uri["host"].startswith("-") or (uri["user"] or "").startswith("-"):
            return None
        port = int(uri["port"]) if uri["port"] is not None else None
        if port is not None and not 0 < port < 65536:
            return None
        user = f"{uri['user']}@" if uri["user"] else ""
        bare = uri["host"].strip("[]")
        return Destination(user + bare, user + (f"[{bare}]" if ":" in bare else bare), port)
    if re.fullmatch(_PLAIN, login) is None or login.startswith("-"):
        return None
    return Destination(login, login)
