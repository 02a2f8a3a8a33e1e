"""Splitting a body by owner: the node tag found as the mapper reads it, lines kept as sent."""

from __future__ import annotations

import gzip

import pytest

from service.api.shard_split import Owners, line_node, split_lines
from service.cluster.shard_map import Shard, ShardMap


@pytest.mark.parametrize("line,node", [
    (b"gpu,host=n1,gpu=0 gpu_temp=40 1", "n1"),
    (b"gpu,gpu=0,host=n1 gpu_temp=40", "n1"),
    (b"nvidia_smi,index=0,host=relay,Hostname=n7 temp=1", "n7"),  # dcgm's own label first
    (b"gpu,host=n1", "n1"),
    (b"gpu,xhost=n1,gpu=0 f=1", None),
    (b"gpu\\,host=n1,gpu=0 f=1", None),  # an escaped comma: part of the measurement
    (b"gpu,gpu=0 note=\",host=n9 \" 1", None),  # a field value is not a tag
    (b"# gpu,host=n1 f=1", None),
    (b"gpu,host=a\\ b,gpu=0 f=1", None),  # escapes: never a valid host name
    (b"", None),
])
def test_the_node_of_a_line(line: bytes, node: str | None) -> None:
    assert line_node(line) == node


def test_lines_go_to_their_owner_as_sent_and_nameless_ones_stay() -> None:
    m = ShardMap([Shard("a", "http://a"), Shard("b", "http://b"), Shard("c", "http://c")], "a")
    n1, n2, n3 = (next(f"n{i}" for i in range(999) if m.owner(f"n{i}").id == s)
                  for s in ("a", "b", "c"))
    owners = Owners(lambda h: m.owner(h).id, "a")
    body = (f"gpu,host={n1},gpu=0 f=1 5\n\ngpu,host={n2},gpu=0 f=2 5\nbroken\n"
            f"gpu,host=-x,gpu=0 f=3\ngpu,host={n3},gpu=1 f=4 5").encode()
    parts = split_lines(body, owners)
    # a name no shard can own stays here, where the parser refuses it by line
    assert parts.local == f"gpu,host={n1},gpu=0 f=1 5\nbroken\ngpu,host=-x,gpu=0 f=3\n".encode()
    assert gzip.decompress(parts.foreign["b"]) == f"gpu,host={n2},gpu=0 f=2 5\n".encode()
    assert gzip.decompress(parts.foreign["c"]) == f"gpu,host={n3},gpu=1 f=4 5\n".encode()
    assert parts.nodes == {"a": {n1, "-x"}, "b": {n2}, "c": {n3}}
