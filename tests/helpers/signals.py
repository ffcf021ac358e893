"""A real SIGTERM to the test process itself, as a scheduler sends it."""

from __future__ import annotations

import signal
import threading


def sigterm_to_this_process() -> None:
    """SIGTERM to the main thread, where Python runs every signal handler
    (a process-directed kill may land on any thread).

    Send it only where OpenVINO was never loaded: a fresh interpreter
    (test_bf16_master) or the unit lane. In a pytest process that had
    loaded an OpenVINO model (test_quantize, earlier on the same xdist
    worker), a handled SIGTERM crashed the process with SIGSEGV, to any
    thread (2026-11-27: 3 runs of 3 process-directed, 2 of 2 to the main
    thread). A rank never loads OpenVINO."""
    signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
