"""User-facing failures: one clear line on stderr and a non-zero exit."""

from __future__ import annotations

import signal
import sys
from contextlib import contextmanager


def first_line(err: BaseException) -> str:
    """An exception's first line, or its type's name when it says nothing (the Hub's errors run to pages)."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


class UserError(Exception):
    """Something the user must change; the message says what and how."""


class RetryCannotFix(UserError):
    """A rank stopped on a UserError (the config, the data or the model) and
    no rank died: the next try would stop alike, so it is not started."""


class Preempted(Exception):
    """Asked to stop (SIGTERM); a checkpoint was written and a retry resumes
    from it. Exits with PREEMPTED, which tells it apart from a failure."""


PREEMPTED = 75  # EX_TEMPFAIL: try again later


class Terminated(SystemExit):
    """SIGTERM arrived: scancel, a Slurm time limit or preemption, or the
    launcher stopping a rank after another one failed. Exits 143, as the
    signal itself would, but through `finally` blocks and status files."""

    def __init__(self):
        super().__init__(128 + signal.SIGTERM)


@contextmanager
def sigterm_raises():
    """Within: SIGTERM raises Terminated in the main thread."""
    def handler(_signum, _frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    except Preempted:
        # The checkpoint is written: from here a second SIGTERM (Slurm signals
        # every step, and the launcher forwards its own) must not turn exit 75
        # into a kill, with no gap in which the default action is back.
        previous = signal.SIG_IGN
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


class Stopped(SystemExit):
    """SIGTERM or SIGINT stopped a process that waits (a lock, a lease, its
    ranks to start; `stoppable`). Raised in the main thread, so that every
    `finally` gives back what the process holds; run_cli prints its one
    line. Exits 128 + the signal, as the signal itself would."""

    def __init__(self, signum: int, waiting: str | None = None):
        super().__init__(128 + signum)
        self.line = f"{signal.Signals(signum).name}" + (f" while waiting for {waiting}" if waiting else "")

    def __str__(self) -> str:
        return self.line


_waiting: list[str] = []  # what the process waits for now, innermost last (`waiting`)
_stopping: list[int] = []  # the signal that stopped it, once one has


def stop_now(signum: int, waiting: str | None = None) -> None:
    """Raise Stopped, once: a later signal lets the clean-up run (each of
    its steps is bounded; SIGKILL still ends the process at once)."""
    if _stopping:
        return
    _stopping.append(signum)
    raise Stopped(signum, waiting or (_waiting[-1] if _waiting else None))


@contextmanager
def stoppable():
    """Within: SIGTERM and SIGINT raise Stopped (for a process that holds
    locks or leases while it waits; a default SIGTERM would skip every
    `finally` and leave them behind)."""
    def handler(signum, _frame):
        stop_now(signum)

    previous = {signum: signal.signal(signum, handler) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, action in previous.items():
            signal.signal(signum, action)


@contextmanager
def waiting(what: str):
    """Within: a Stopped says that the process was waiting for `what`."""
    _waiting.append(what)
    try:
        yield
    finally:
        _waiting.pop()


def run_cli(main, argv=None) -> None:
    """Run a step's main(); known failures end in one line, exit code 1.
    A rule's log gets no terminal escape codes (common/plain.py)."""
    from workflow.scripts import program_loaded
    from workflow.scripts.common import quiet
    from workflow.scripts.common.plain import plain_when_logged

    program_loaded()
    plain_when_logged()
    quiet.install()  # third-party warnings no user can act on, each with its reason
    try:
        main(argv)
    except Preempted as err:
        print(f"preempted: {err}", file=sys.stderr)
        sys.exit(PREEMPTED)
    except Stopped as err:
        print(f"stopped by {err}; what this process held is given back", file=sys.stderr)
        raise
    except (UserError, ValueError, FileNotFoundError) as err:
        # ValueError covers the config/data/task errors of our modules.
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
