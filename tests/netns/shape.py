"""A bandwidth and a latency for every link of the test hosts (hosts.py).

Each host's link is shaped in both directions: on the host's own interface
(what it sends) and on its bridge port (what it receives), with a token
bucket (tc tbf) for the bandwidth and, when latency is asked for, netem
under it for the delay: half the latency on each end, so a message from
one host to another takes `latency` (the model's per-message latency). Kernels without sch_netem (CONFIG_NET_SCH_NETEM)
can shape bandwidth only; `netem_available` tells before anything is built.
"""

from __future__ import annotations

import subprocess
import uuid

from hosts import IFACE, Host


def tc(namespace: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["tc", "-n", namespace, *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode:
        raise RuntimeError(f"tc -n {namespace} {' '.join(args)}: {done.stderr.strip()}")
    return done


def burst_bytes(rate_bit: float) -> int:
    """Bucket depth: 1 ms at the rate, at least a few 64 KB GSO packets."""
    return max(int(rate_bit / 8 / 1000), 4 * 65536)


def qdisc_args(rate_gbit: float, latency_us: float) -> list[list[str]]:
    """The tc commands (after `qdisc add dev DEV`) for one end of a link: tbf
    at the root, netem below it for half the one-way latency."""
    rate = rate_gbit * 1e9
    limit = max(int(rate / 8 * 0.05), 4 * burst_bytes(rate))  # 50 ms of queue
    tbf = ["root", "handle", "1:", "tbf", "rate", f"{int(rate)}bit", "burst", str(burst_bytes(rate)),
           "limit", str(limit)]
    if not latency_us:
        return [tbf]
    return [tbf, ["parent", "1:1", "handle", "10:", "netem", "delay", f"{latency_us / 2:g}us", "limit", "100000"]]


def netem_available(probe_namespace: str | None = None) -> bool:
    """Whether this kernel has sch_netem (tried on a dummy link in a scratch namespace)."""
    ns = probe_namespace or f"cpdt-probe-{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
    try:
        subprocess.run(["ip", "-n", ns, "link", "add", "d0", "type", "veth", "peer", "name", "d1"], check=True,
                       capture_output=True)
        return tc(ns, "qdisc", "add", "dev", "d0", "root", "netem", "delay", "1us", check=False).returncode == 0
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def links(prefix: str, hosts: list[Host]) -> list[tuple[str, str]]:
    """(namespace, device) of both ends of every host's link."""
    switch = f"{prefix}sw"
    return [end for i, h in enumerate(hosts) for end in ((h.namespace, IFACE), (switch, f"p{i}"))]


def shape(prefix: str, hosts: list[Host], rate_gbit: float, latency_us: float = 0) -> None:
    """Every link gets `rate_gbit` each way and a one-way delay of latency_us
    (replacing what was there)."""
    for namespace, device in links(prefix, hosts):
        clear(namespace, device)
        for args in qdisc_args(rate_gbit, latency_us):
            tc(namespace, "qdisc", "add", "dev", device, *args)


def clear(namespace: str, device: str) -> None:
    tc(namespace, "qdisc", "del", "dev", device, "root", check=False)


def unshape(prefix: str, hosts: list[Host]) -> None:
    for namespace, device in links(prefix, hosts):
        clear(namespace, device)
