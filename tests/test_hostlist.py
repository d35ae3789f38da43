"""SLURM node-list expansion in Python (the scontrol comparison lives in test_nodelist_scontrol.py)."""

from __future__ import annotations

import pytest

from trainer.distributed.hostlist import expand, first_host

TABLE = [
    ("node1", ["node1"]),
    ("node1,node2", ["node1", "node2"]),
    ("node[1-3]", ["node1", "node2", "node3"]),
    ("node[08-11]", ["node08", "node09", "node10", "node11"]),
    ("gpu-[001-002,010]", ["gpu-001", "gpu-002", "gpu-010"]),
    ("rack[1-2]-n[0-1]", ["rack1-n0", "rack1-n1", "rack2-n0", "rack2-n1"]),
    ("a[1,3],b2,c[5-6]", ["a1", "a3", "b2", "c5", "c6"]),
    ("x-1-[9-10]", ["x-1-9", "x-1-10"]),
]


@pytest.mark.parametrize("nodelist,hosts", TABLE)
def test_expand(nodelist: str, hosts: list[str]) -> None:
    assert expand(nodelist) == hosts


def test_first_host_is_master() -> None:
    assert first_host("cn-[0042-0050],login") == "cn-0042"


@pytest.mark.parametrize("bad", ["node[1-", "node]1[", "node[a-b]", "node[3-1]", ""])
def test_malformed_lists_raise(bad: str) -> None:
    with pytest.raises(ValueError):
        first_host(bad)


def test_a_list_is_counted_before_it_is_expanded() -> None:
    """10^8 names (a typo of a range, or a hostile value) are refused at once, not built in memory."""
    import time

    began = time.perf_counter()
    for huge in ("n[1-100000000]", "r[1-10000]n[1-10000]", "a[1-60000],b[1-60000]"):
        with pytest.raises(ValueError, match="more than the 100000"):
            expand(huge)
    assert time.perf_counter() - began < 1.0
    assert len(expand("n[1-100000]")) == 100000  # the bound itself is a list


@pytest.mark.parametrize("hostile", ["n1;reboot", "n$(id)", "n`id`", "n1|n2", "n[1-2]/x", "n\x00", "ñ1"])
def test_a_name_holds_only_what_slurm_node_names_hold(hostile: str) -> None:
    with pytest.raises(ValueError, match="node names hold letters, digits"):
        expand(hostile)
