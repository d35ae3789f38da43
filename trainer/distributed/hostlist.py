"""Expand SLURM node lists ("gpu-[01-03,7],login2") in Python, as `scontrol show hostnames` does: the one
reader of node lists, wherever one comes from (SLURM's variables and answers, a profile's `sbatch_extra`
exclude and nodelist, a run's records).

Ranks derive MASTER_ADDR from the first host without shelling out to scontrol, which may be
missing inside containers and costs a fork per rank. A list is counted before it is expanded: one of more
than MAX_HOSTS names ("n[1-100000000]", a typo or a hostile value) is refused, not built in memory; and a
name holds only what SLURM's node names hold (letters, digits, `-`, `_`, `.`).
"""

from __future__ import annotations

import re

# More nodes than any cluster has (the largest run tens of thousands): a list longer than this is refused.
MAX_HOSTS = 100_000
_NAME_PART = re.compile(r"[A-Za-z0-9._-]*")


def expand(nodelist: str, limit: int = MAX_HOSTS) -> list[str]:
    """All host names of a SLURM node list, in order; ValueError for a malformed list or one of more than
    `limit` names (counted before anything is expanded)."""
    items = _split_top_level(nodelist.strip())
    total = sum(_count_item(item) for item in items)
    if total > limit:
        raise ValueError(f"node list {_shown(nodelist)} names {total} hosts, more than the {limit} a list may name")
    hosts: list[str] = []
    for item in items:
        hosts.extend(_expand_item(item))
    return hosts


def _shown(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")


def _count_item(item: str) -> int:
    """How many names `item` expands to, from its bracket groups' sizes (checked as `_expand_item` does)."""
    count, rest = 1, item
    while "[" in rest:
        prefix, _, rest = rest.partition("[")
        _check_name(prefix, item)
        group, closed, rest = rest.partition("]")
        if not closed:
            raise ValueError(f"unbalanced '[' in node list item {item!r}")
        count *= sum(_range_size(part, item) for part in group.split(","))
    _check_name(rest, item)
    return count


def _check_name(text: str, item: str) -> None:
    if not _NAME_PART.fullmatch(text):
        bad = next(ch for ch in text if not _NAME_PART.fullmatch(ch))
        raise ValueError(f"{bad!r} in node list item {_shown(item)}: node names hold letters, digits, '-', '_', '.'")


def _range_size(part: str, item: str) -> int:
    lo, sep, hi = part.partition("-")
    if not lo.isdigit() or (sep and not hi.isdigit()):
        raise ValueError(f"bad range {part!r} in node list item {_shown(item)}")
    if sep and int(hi) < int(lo):
        raise ValueError(f"descending range {part!r} in node list item {_shown(item)}")
    return int(hi) - int(lo) + 1 if sep else 1


def first_host(nodelist: str) -> str:
    hosts = expand(nodelist)
    if not hosts:
        raise ValueError(f"empty node list {nodelist!r}")
    return hosts[0]


def _split_top_level(text: str) -> list[str]:
    """Split on commas and whitespace that are not inside brackets (SLURM accepts "n1, n2" and
    "n1 n2" as two hosts)."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in node list {text!r}")
        elif (ch == "," or ch.isspace()) and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced '[' in node list {text!r}")
    items.append(text[start:])
    return [item for item in items if item]


def _expand_item(item: str) -> list[str]:
    """Expand one host pattern that may hold several bracket groups: "n[1-2]-ib[0,1]"."""
    open_at = item.find("[")
    if open_at < 0:
        return [item]
    close_at = item.index("]", open_at)
    prefix, group, rest = item[:open_at], item[open_at + 1 : close_at], item[close_at + 1 :]
    tails = _expand_item(rest)
    return [prefix + value + tail for value in _expand_group(group, item) for tail in tails]


def _expand_group(group: str, item: str) -> list[str]:
    values: list[str] = []
    for part in group.split(","):
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"bad range {part!r} in node list item {item!r}")
        if not sep:
            values.append(lo)
            continue
        # Zero padding follows the lower bound's width, as SLURM does ("[08-10]" -> 08, 09, 10).
        width = len(lo)
        if int(hi) < int(lo):
            raise ValueError(f"descending range {part!r} in node list item {item!r}")
        values.extend(str(n).zfill(width) for n in range(int(lo), int(hi) + 1))
    return values
