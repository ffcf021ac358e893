"""Snakemake with the Slurm executor polling every second or two: run as
`python tests/helpers/slurm_poll.py <snakemake arguments>`.

The executor plugin adds 10 s to its status interval after every poll in
which no job ended (up to 180 s), so a test's 1-2 minute job is noticed
20-50 s after it ended, and a test with ten jobs waits minutes for nothing.
Only the first interval is a setting (--slurm-init-seconds-before-status-checks);
this caps the interval at that value. Submission, sacct/squeue, scancel and
everything else stay the plugin's own.
"""

from __future__ import annotations

import sys

import snakemake_executor_plugin_slurm as slurm
from snakemake.cli import main

CAP_SECONDS = 2
_interval = slurm.Executor.next_seconds_between_status_checks  # the plugin interface's property


def _capped(executor, seconds) -> None:
    executor._next_seconds_between_status_checks = min(seconds, CAP_SECONDS)


slurm.Executor.next_seconds_between_status_checks = _interval.setter(_capped)

if __name__ == "__main__":
    sys.argv[0] = "snakemake"
    main()
