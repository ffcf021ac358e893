"""A real SIGTERM to the test process itself, as a scheduler sends it."""

from __future__ import annotations

import signal
import threading


def sigterm_to_this_process() -> None:
    """SIGTERM, delivered to the main thread, where Python runs every signal
    handler. A process-directed kill may land on any thread: in a pytest
    worker that had loaded OpenVINO in-process (test_quantize), landing on
    one of its CPU plugin's threads crashed the worker with SIGSEGV under
    pytest's faulthandler (2026-11-27, 3 runs of 3; 0 of 2 with the plugin
    off). A rank never loads OpenVINO, and the handler under test is the same."""
    signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
