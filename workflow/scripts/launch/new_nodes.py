"""The nodes of a training's lease that its environment check did not see
(its reservation was taken between check and training, launch/lease.py):
checked now, by the environment check itself (nodes/check.py --confirm),
before the training runs on them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from workflow.scripts.common.errors import UserError


def described(environment: dict) -> list[str]:
    """The nodes an environment.json describes."""
    return [node["node"] for node in environment.get("node_reports", [])]


def check_new_nodes(config_file: str, environment_file: str, hosts: list[str] | None) -> list[str]:
    """The nodes of `hosts` that environment.json does not describe, checked
    by the environment check (nodes/check.py --confirm) before a training
    runs on them; fails with its one line where they differ."""
    new = [h for h in hosts or [] if h not in described(json.loads(Path(environment_file).read_text()))]
    if not new:
        return []
    done = subprocess.run([sys.executable, "-m", "workflow.scripts.nodes.check", "--config", config_file,
                           "--confirm", environment_file, "--hosts", ",".join(new)],
                          stderr=subprocess.PIPE, text=True)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    if done.returncode:
        raise UserError(lines[-1].removeprefix("error: ") if lines else
                        f"the check of {', '.join(new)} ended with exit status {done.returncode}")
    print("\n".join(lines), file=sys.stderr, flush=True)
    return new
