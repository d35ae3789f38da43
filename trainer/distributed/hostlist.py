"""Expand SLURM node lists ("gpu-[01-03,7],login2") in Python, as `scontrol show hostnames` does.

Ranks derive MASTER_ADDR from the first host without shelling out to scontrol, which may be
missing inside containers and costs a fork per rank.
"""

from __future__ import annotations


def expand(nodelist: str) -> list[str]:
    """All host names of a SLURM node list, in order."""
    hosts: list[str] = []
    for item in _split_top_level(nodelist.strip()):
        hosts.extend(_expand_item(item))
    return hosts


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
