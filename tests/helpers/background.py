"""Commands started in the background whose output goes to a file.

A pipe that nobody reads until the end holds 64 KiB. A Snakemake that
retries prints every try's log (the rule's tee, show-failed-logs), fills
it, and blocks on its next line, between one try and the next: the test
then waits for a checkpoint that never comes (seen in CI's parallel lanes,
where ranks log more steps before a fault is injected).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path


class Background(subprocess.Popen):
    """subprocess.Popen with stdout and stderr in one temporary file, in a
    session of its own; communicate() waits and returns (that output, None).
    As a context manager it kills whatever of the session still runs on the
    way out, so a failing test leaves no Snakemake, launcher or rank behind."""

    def __init__(self, argv, **kwargs):
        fd, name = tempfile.mkstemp(prefix="cpuddp-output-", suffix=".log")
        self.output_path = Path(name)
        with os.fdopen(fd, "w") as out:
            super().__init__(argv, stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True, **kwargs)

    def __exit__(self, *exc) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)  # the whole session: its ranks too
        self.wait()
        self.output_path.unlink(missing_ok=True)

    def output(self) -> str:
        """What the command printed so far."""
        try:
            return self.output_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_until(self, what: str, ready, timeout: float = 300) -> None:
        """Until ready(); fails with the output if the command ends first
        (and `what` has not happened), or after `timeout` seconds."""
        deadline = time.time() + timeout
        while not ready():
            if self.poll() is not None and not ready():
                raise AssertionError(f"the workflow ended before {what}:\n{self.output()[-3000:]}")
            if time.time() > deadline:
                raise AssertionError(f"{what} never appeared")
            time.sleep(0.05)

    def communicate(self, input=None, timeout=None):
        self.wait(timeout)
        out = self.output()
        self.output_path.unlink(missing_ok=True)
        return out, None
