"""Hostfiles (one node per line: `host`, `host:slots` or `host slots=N`)."""

from __future__ import annotations

import re
from pathlib import Path

from workflow.scripts.common.errors import UserError

# Host names and IPv4/IPv6 addresses; anything else (';', spaces, '$') is refused
# before it could reach a launcher or a shell.
HOST = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9._:-]*[A-Za-z0-9_])?$")


def read_hostfile(path) -> list[str]:
    """Host names of a hostfile ('#' comments and slot counts ignored)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"hostfile not found: {path}; set distributed.hostfile to a file with one node per line")
    hosts = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fields = line.split("#")[0].split()
        if not fields:
            continue
        host = fields[0].rsplit(":", 1)[0] if fields[0].count(":") == 1 else fields[0]
        if not HOST.match(host) or any(not re.match(r"^slots=\d+$", f) for f in fields[1:]):
            raise UserError(f"hostfile {path} line {number}: '{line.strip()}' is not a host name "
                            "(expected `host`, `host:slots` or `host slots=N`)")
        hosts.append(host)
    if not hosts:
        raise UserError(f"hostfile {path} lists no nodes")
    return hosts


def check_nodes(path, nodes: int) -> list[str]:
    """The first `nodes` hosts; the hostfile must list at least that many."""
    hosts = read_hostfile(path)
    if len(hosts) < nodes:
        raise UserError(f"distributed.nodes is {nodes} but hostfile {path} lists {len(hosts)} node(s); "
                        "add nodes to the hostfile or lower distributed.nodes")
    return hosts[:nodes]
