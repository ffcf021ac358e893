"""Loaded by every Python process started with this folder on PYTHONPATH
(tests/integration/test_offline_ranks.py). In a launched rank (PMI_RANK or
OMPI_COMM_WORLD_RANK set) it notes the rank's HF_HUB_OFFLINE, then notes and
refuses every name lookup and connection that leaves this machine, and any
to the test's closed Hub port: a rank that tried the network fails and
leaves a line in CPUDDP_NET_LOG."""

import json
import os
import socket

RANK = os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK")
LOG = os.environ.get("CPUDDP_NET_LOG")
LOCAL = {"127.0.0.1", "::1", "localhost", socket.gethostname(), None, ""}


def note(kind, what) -> None:
    with open(LOG, "a") as handle:
        handle.write(json.dumps({"pid": os.getpid(), "rank": RANK, "kind": kind, "what": str(what)}) + "\n")


def hub_port() -> int:
    return int(os.environ.get("HF_ENDPOINT", "http://x:0").rsplit(":", 1)[1].strip("/") or 0)


def guard() -> None:
    real_connect, real_lookup = socket.socket.connect, socket.getaddrinfo

    def connect(self, address):
        if isinstance(address, tuple) and (address[0] not in LOCAL or address[1] == hub_port()):
            note("connect", address)
            raise OSError(f"network blocked for ranks by the test: {address}")
        return real_connect(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if host not in LOCAL:
            note("resolve", host)
            raise socket.gaierror(f"name lookups blocked for ranks by the test: {host}")
        return real_lookup(host, *args, **kwargs)

    socket.socket.connect, socket.getaddrinfo = connect, getaddrinfo


if RANK is not None and LOG:
    note("start", os.environ.get("HF_HUB_OFFLINE"))
    guard()
