"""One rank in this process: a free port and the environment of a
single-rank gloo group, whatever launcher's variables the test runs under."""

from __future__ import annotations

import socket

LAUNCHER_RANKS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def single_rank(monkeypatch) -> None:
    """Rank 0 of 1 on localhost: no launcher's rank variables, a free port."""
    for name in LAUNCHER_RANKS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
