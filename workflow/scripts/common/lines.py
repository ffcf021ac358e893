"""The report a rank prints for the launch node, in lines short enough that
no launcher splits them.

srun passes a task's output on in pieces of 1 KiB, so a longer line can be
cut by another task's output (seen on a real Slurm: a node's report lost
about one time in two); mpirun's forwarding differs again. A report is sent
as base64 parts of at most PART characters, one line each, and put back
together by rank.
"""

from __future__ import annotations

import base64
import json
import re

PART = 600  # + the header: well under 1 KiB


def report_lines(kind: str, rank: int, report: dict) -> list[str]:
    """CPUDDP-<kind>-PART <rank> <i>/<n> <base64>, one line per part."""
    text = base64.b64encode(json.dumps(report).encode()).decode()
    parts = [text[i:i + PART] for i in range(0, len(text), PART)] or [""]
    return [f"CPUDDP-{kind}-PART {rank} {i + 1}/{len(parts)} {part}" for i, part in enumerate(parts)]


def read_reports(text: str, kind: str) -> dict[int, dict]:
    """Reports by rank, from every part found anywhere in the launcher's
    output; a rank with a part missing or damaged counts as silent."""
    parts: dict[int, dict[int, str]] = {}
    counts: dict[int, int] = {}
    for rank, index, count, part in re.findall(rf"CPUDDP-{kind}-PART (\d+) (\d+)/(\d+) ([A-Za-z0-9+/=]*)", text):
        parts.setdefault(int(rank), {})[int(index)] = part
        counts[int(rank)] = int(count)
    found = {}
    for rank, pieces in parts.items():
        if sorted(pieces) != list(range(1, counts[rank] + 1)):
            continue
        try:
            found[rank] = json.loads(base64.b64decode("".join(pieces[i] for i in sorted(pieces))))
        except ValueError:
            continue
    return found
