"""Fault points for the integration tests: with CPUDDP_FAULT=<point>:<rank>
in the ranks' environment, that rank kills itself (SIGKILL, as the OOM
killer or a lost node would) when it reaches <point>. Unset, nothing."""

from __future__ import annotations

import os
import signal

VARIABLE = "CPUDDP_FAULT"
# final-save: after the final checkpoint, while rank 0 saves the model;
# second-evaluation: once the second evaluation during training is recorded (and checkpointed).
POINTS = ("final-save", "second-evaluation")


def reach(point: str, rank: int) -> None:
    if os.environ.get(VARIABLE) == f"{point}:{rank}":
        os.kill(os.getpid(), signal.SIGKILL)
