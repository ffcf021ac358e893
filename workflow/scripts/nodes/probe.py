"""What each node reports for the environment check: its versions, CPU and
decisions (describe.py), the workflow revision it runs, and the interface
that reaches the first node.

    python -m workflow.scripts.nodes.probe --config-json J --master-addr A   (one rank per node)
"""

from __future__ import annotations

import argparse
import json
import socket
import sys

from workflow.scripts.common.errors import run_cli
from workflow.scripts.launch import ranks
from workflow.scripts.common import lines
from workflow.scripts.nodes import describe
from workflow.scripts.settings.views import EnvironmentView



def interface_of(address: str) -> str | None:
    """The network interface holding an IPv4 address."""
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            try:
                raw = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))  # SIOCGIFADDR
            except OSError:
                continue
            if socket.inet_ntoa(raw[20:24]) == address:
                return name
    return None


def route_source(address: str) -> str | None:
    """This node's own address on the way to `address` (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((address, 9))
            return sock.getsockname()[0]
    except OSError:
        return None


def gloo_ifname(master: str) -> str | None:
    """The interface this node reaches MASTER_ADDR through (on the first node:
    the one that holds it); gloo's GLOO_SOCKET_IFNAME."""
    source = route_source(master)
    if source is None or source.startswith("127."):
        return None
    return interface_of(source)


def probe(config: EnvironmentView, master: str) -> dict:
    report = describe.describe(config.distributed, config.train, launcher=False)
    return {**report, "revision": describe.revision(), "python_executable": sys.executable,
            "gloo_ifname": gloo_ifname(master)}


def report_line(args) -> None:
    rank = ranks.read().rank
    try:
        line = {"rank": rank, "report": probe(EnvironmentView.pick(json.loads(args.config_json)), args.master_addr)}
    except Exception as err:  # reported by name on the launch node, never a silent rank
        line = {"rank": rank, "host": socket.gethostname(), "error": f"{type(err).__name__}: {err}"}
    for text in lines.report_lines("NODE", rank, line):
        print(text, flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config-json", required=True)
    parser.add_argument("--master-addr", required=True)
    report_line(parser.parse_args(argv))


if __name__ == "__main__":
    run_cli(main)
