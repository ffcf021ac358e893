"""Test hosts on this machine: network namespaces joined by a bridge.

Each host is a namespace with one veth interface (`cpd0`) and its own
address; the bridge lives in a namespace of its own, so the machine's own
network never sees the test subnet (no route to it, nothing can leak out).
Names carry a unique prefix; `remove` deletes everything with it, and
`sweep` removes what a killed run left behind.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

PREFIX = "cpdt-"
IFACE = "cpd0"
SUBNET = "10.251.0"  # only inside the namespaces made here
ETC_NETNS = Path("/etc/netns")


@dataclass
class Host:
    name: str
    namespace: str
    address: str


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def remove(prefix: str) -> None:
    """Delete every namespace of a prefix, after ending the processes still
    in it (a killed run's daemons); their links and hosts files go too."""
    for ns in namespaces():
        if ns.startswith(prefix):
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    for folder in ETC_NETNS.glob(f"{prefix}*"):
        shutil.rmtree(folder, ignore_errors=True)


def sweep() -> None:
    """Remove test hosts of runs whose process is gone (a killed test run)."""
    for ns in namespaces():
        if ns.startswith(PREFIX):
            pid = ns[len(PREFIX):].split("-")[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                remove(f"{PREFIX}{pid}-")


def create(count: int, workdir: Path) -> tuple[str, list[Host], Path]:
    """`count` hosts on one bridge; returns (prefix, hosts, host->namespace map file)."""
    prefix = f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:4]}-"
    switch = f"{prefix}sw"
    hosts = [Host(f"{prefix}n{i}", f"{prefix}n{i}", f"{SUBNET}.{i + 1}") for i in range(count)]
    try:
        ip("netns", "add", switch)
        ip("-n", switch, "link", "add", "br0", "type", "bridge")
        ip("-n", switch, "link", "set", "br0", "up")
        for i, host in enumerate(hosts):
            ip("netns", "add", host.namespace)
            ip("-n", host.namespace, "link", "set", "lo", "up")
            ip("-n", switch, "link", "add", f"p{i}", "type", "veth", "peer", "name", IFACE, "netns", host.namespace)
            ip("-n", switch, "link", "set", f"p{i}", "master", "br0", "up")
            ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", IFACE)
            ip("-n", host.namespace, "link", "set", IFACE, "up")
        hosts_text = "127.0.0.1 localhost\n" + "".join(f"{h.address} {h.name}\n" for h in hosts)
        for host in hosts:  # `ip netns exec` shows it as the namespace's /etc/hosts
            (ETC_NETNS / host.namespace).mkdir(parents=True, exist_ok=True)
            (ETC_NETNS / host.namespace / "hosts").write_text(hosts_text)
    except BaseException:
        remove(prefix)
        raise
    mapping = workdir / "netns.map"
    mapping.write_text("".join(f"{h.name} {h.namespace}\n{h.address} {h.namespace}\n" for h in hosts))
    return prefix, hosts, mapping
