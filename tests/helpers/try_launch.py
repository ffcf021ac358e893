"""A training try's launcher in a test folder (launch/__main__.py with
--tries, so it takes the run's lock and a try folder): its config,
environment.json and a rank that reports in and waits to be stopped."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
from pathlib import Path

from helpers.workflow import BIN, REPO
from workflow.scripts.nodes import describe as environment
from workflow.scripts.settings import config as cfg
from workflow.scripts.settings.views import EnvironmentView

ENV = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(REPO),
       "HF_HUB_OFFLINE": "1"}

# A rank that reports in and then waits to be stopped.
WAITING_RANK = """
import argparse, time
from workflow.scripts.common import logs
from workflow.scripts.launch import ranks
parser = argparse.ArgumentParser()
parser.add_argument("--log-dir")
with logs.exit_status(parser.parse_args().log_dir, ranks.read().rank):
    time.sleep(3600)
"""

# ssh for the launcher: HOST runs the command here, except stuck-node,
# whose login never ends (a hung NFS home).
SLOW_SSH = """#!/bin/sh
while [ $# -gt 0 ]; do
    case "$1" in
        -[bcDEeFIiJLlmOoPpQRSWw]) shift 2 ;;
        -*) shift ;;
        *) break ;;
    esac
done
host="$1"; shift
[ "$host" = stuck-node ] && exec sleep 3600
exec sh -c "$*"
"""


def write_launch(work: Path, distributed: dict) -> list[str]:
    """The launcher's command for a training try in `work` (config,
    environment.json and the waiting rank program written there)."""
    config = cfg.validate({"experiment": "t", "task": "mrpc", "model": "m", "train": {"precision": "fp32"},
                           "distributed": {"backend": "gloo", "processes_per_node": 1, "threads_per_process": 1,
                                           "exit_grace_seconds": 2, **distributed}})
    local = {**config, "distributed": {**config["distributed"], "hostfile": None, "nodes": 1,
                                       "launcher_args": []}}
    view = EnvironmentView.pick(local)
    info = environment.describe(view.distributed, view.train)
    hosts = [h.strip() for h in Path(distributed["hostfile"]).read_text().split()] if "hostfile" in distributed \
        else [socket.gethostname()]
    info["node_reports"] = [{"node": host} for host in hosts]  # as the check saw them
    (work / "config.json").write_text(json.dumps(config))
    (work / "environment.json").write_text(json.dumps(info))
    (work / "rank.py").write_text(WAITING_RANK)
    (work / "results/run").mkdir(parents=True)
    return [sys.executable, "-m", "workflow.scripts.launch", "--config", str(work / "config.json"),
            "--environment", str(work / "environment.json"), "--log-dir", str(work / "logs"), "--try", "1",
            "--tries", str(work / "results/run/tries.json"), "--", sys.executable, str(work / "rank.py"),
            "--log-dir", str(work / "logs")]


def locked(lock) -> bool:
    try:
        return fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB) is None  # None: taken
    except BlockingIOError:
        return False
