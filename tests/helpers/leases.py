"""What the lease folder of a test hostfile says (launch/lease.py): its
events, and who held each host after each of them."""

from __future__ import annotations

import json
from pathlib import Path


def lease_events(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "events.log").read_text().splitlines()]


def holders_over_time(events: list[dict]) -> list[dict]:
    """host -> (run, role) after each event; fails on a host acquired while
    another run holds it. Any other event (release, keep: the check's
    reservation for its training, stale) frees the host."""
    held, states = {}, []
    for event in events:
        for host in event["hosts"]:
            if event["event"] == "acquire":
                assert host not in held, f"{host} leased twice: {held[host]} and {event['run']}"
                held[host] = (event["run"], event["role"])
            elif event["event"] != "yield":  # a reservation taken: nobody held it
                held.pop(host, None)
        states.append(dict(held))
    return states
