"""User-facing failures: one clear line on stderr and a non-zero exit."""

from __future__ import annotations

import sys


class UserError(Exception):
    """Something the user must change; the message says what and how."""


class Preempted(Exception):
    """Asked to stop (SIGTERM); a checkpoint was written and a retry resumes
    from it. Exits with PREEMPTED, which tells it apart from a failure."""


PREEMPTED = 75  # EX_TEMPFAIL: try again later


def run_cli(main, argv=None) -> None:
    """Run a step's main(); known failures end in one line, exit code 1."""
    try:
        main(argv)
    except Preempted as err:
        print(f"preempted: {err}", file=sys.stderr)
        sys.exit(PREEMPTED)
    except (UserError, ValueError, FileNotFoundError) as err:
        # ValueError covers the config/data/task errors of our modules.
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
