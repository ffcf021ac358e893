"""The scaling plan: the model's arithmetic, its buckets against real DDP's,
the network fit, the recommendation, and the plan and compare commands."""

from __future__ import annotations

import json
import subprocess
import sys


from helpers.workflow import REPO, write_config
from helpers.plan_profile import profile
from workflow.scripts.plan.scaling_model import (Network)

NET = Network.stated(10, 50)  # 1.25e9 bytes/s, 50 us


def test_plan_command_prints_table_and_writes_chart(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({**profile().to_dict(), "model": "m", "seq_len": 128}))
    experiment = write_config(tmp_path / "exp.yaml", {
        "experiment": "e", "task": "mrpc", "model": "m", "distributed": {"hostfile": "h"},
        "sweep": {"nodes": [1, 2, 4]}, "plan": {"bandwidth_gbit": [10], "max_nodes": 8},
        "published": {"source": "s", "figures": {"n2": {"speedup": 1.7}, "n4": {"speedup": 3.0}}}})
    done = subprocess.run([sys.executable, "-m", "workflow.scripts.plan.plan", "--profile", str(path), "--config",
                           str(experiment), "--latency-us", "20", "--out-dir", str(tmp_path / "out")],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "| no levers | 100% |" in done.stdout and "10 Gbit/s, 20 us" in done.stdout
    assert "for >= 90% efficiency use up to" in done.stdout
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert plan["published_efficiency"] == {"2": 0.85, "4": 0.75}
    assert (tmp_path / "out" / "plan.png").stat().st_size > 10_000
    bad = subprocess.run([sys.executable, "-m", "workflow.scripts.plan.plan", "--profile", str(path),
                          "--bandwidth-gbit", "0"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert bad.returncode == 1 and bad.stderr.strip().splitlines() == [
        "error: network: bandwidth 0.0 Gbit/s must be > 0 and latency 50 us >= 0"]
