"""SIGTERM in a rank, in a fresh interpreter (a real signal to a real
process): Terminated outside the training loop; once Preempted (a checkpoint
written), a second SIGTERM is ignored so the rank still exits 75 (Slurm
signals every job step, and srun stops the other tasks once one exits 75)."""

from __future__ import annotations

import subprocess
import sys

from helpers.workflow import REPO

PROGRAM = """
import os, signal
from workflow.scripts.common.errors import Preempted, Terminated, sigterm_raises
before = signal.getsignal(signal.SIGTERM)
try:
    with sigterm_raises():
        os.kill(os.getpid(), signal.SIGTERM)
except Terminated:
    print("terminated")
assert signal.getsignal(signal.SIGTERM) is before
try:
    with sigterm_raises():
        raise Preempted("stopped at step 3")
except Preempted:
    print("preempted")
assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
os.kill(os.getpid(), signal.SIGTERM)
print("alive")
"""


def test_a_second_sigterm_after_preempted_is_ignored():
    done = subprocess.run([sys.executable, "-c", PROGRAM], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["terminated", "preempted", "alive"]
