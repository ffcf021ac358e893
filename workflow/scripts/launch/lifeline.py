"""A process that must not outlive its parent (Linux's PR_SET_PDEATHSIG).

The signal comes when the *thread* that started the process exits, not the
whole parent: set it only where that thread lives as long as its process (a
shell, or the main thread of our launcher). It survives exec, not fork.
"""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent(signum: int = signal.SIGTERM, parent: int | None = None) -> bool:
    """Ask Linux for `signum` when the parent exits; False where that is not
    available. `parent`: the pid the parent had (for a child just forked: a
    parent already gone is then noticed at once)."""
    parent = os.getppid() if parent is None else parent
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    if prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:  # it exited before the request: nobody would send the signal
        os.kill(os.getpid(), signum)
    return True
