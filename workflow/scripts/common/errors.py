"""User-facing failures: one clear line on stderr and a non-zero exit."""

from __future__ import annotations

import signal
import sys
from contextlib import contextmanager


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
    except (UserError, ValueError, FileNotFoundError) as err:
        # ValueError covers the config/data/task errors of our modules.
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
