"""User-facing failures: one clear line on stderr and a non-zero exit."""

from __future__ import annotations

import sys


class UserError(Exception):
    """Something the user must change; the message says what and how."""


def run_cli(main, argv=None) -> None:
    """Run a step's main(); known failures end in one line, exit code 1."""
    try:
        main(argv)
    except (UserError, ValueError, FileNotFoundError) as err:
        # ValueError covers the config/data/task errors of our modules.
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
