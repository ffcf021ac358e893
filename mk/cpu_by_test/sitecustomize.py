"""Where a test lane's CPU goes (`make cpu-by-test`, mk/cpu_by_test.py).

Python imports this file at start-up in every process whose PYTHONPATH holds
this folder: the test workers, Snakemake, every step and every rank they
start. With CPUDDP_CPU_LOG set, each process appends one JSON line to that
file as it exits: its CPU seconds (all threads), its command line, the test
that started it (pytest's PYTEST_CURRENT_TEST, which child processes
inherit), when it started and ended, and whether it loaded torch, torch._dynamo
and transformers.
Without CPUDDP_CPU_LOG it does nothing. A measuring tool for developers,
never on a user's path. It hides the interpreter's own sitecustomize while
it is on the path (Debian's installs only the apport crash hook)."""

import atexit
import contextlib
import json
import os
import resource
import sys
import time

START = time.time()  # sitecustomize is imported as the interpreter starts: the process's start, near enough
LOG = os.environ.get("CPUDDP_CPU_LOG")
_recorded = False


def _record() -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    line = {"test": os.environ.get("PYTEST_CURRENT_TEST", ""), "argv": sys.argv[:4],
            "cpu": round(usage.ru_utime + usage.ru_stime, 3),
            "start": round(START, 2), "end": round(time.time(), 2),
            **{name: name in sys.modules for name in ("torch", "torch._dynamo", "transformers")}}
    with open(LOG, "a") as out:  # one short write in append mode: lines of parallel processes do not interleave
        out.write(json.dumps(line) + "\n")


def _once() -> None:
    global _recorded
    if not _recorded:
        _recorded = True
        with contextlib.suppress(OSError):  # a full disk must not change the exit of what it measures
            _record()


if LOG:
    atexit.register(_once)
    _exit = os._exit

    def _record_then_exit(code):  # ranks end with os._exit (train/rank.py), which skips atexit
        _once()
        _exit(code)

    os._exit = _record_then_exit
