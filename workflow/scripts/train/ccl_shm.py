"""oneCCL's shared-memory regions, removed when their rank is done.

With CCL_ATL_SHM=1 (ranks of one node, launch/ccl.py) libfabric's shm
provider gives each rank a 64 MiB region, /dev/shm/<pid>:<n>:<n>, and
does not unlink it when the rank exits: each 2-rank ccl run left 128 MiB
of the node's RAM in /dev/shm until a reboot (measured 2026-11-29, oneCCL
of the Intel env), so a sweep of a hundred runs held 12.8 GB. A rank
unlinks its own regions as it leaves the process group (the mappings stay
until it exits); a rank killed before that leaves them to the next ccl
rank on the node, which removes this user's regions whose process is gone.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from workflow.scripts.launch.supervise import pid_alive, unlink_own_files

SHM = Path("/dev/shm")
REGION = re.compile(r"(\d+):\d+:\d+")


def remove(folder: Path = SHM, own: bool = False) -> list[Path]:
    """Unlink this user's regions whose process is gone, or with `own` this
    process's; the ones removed. Another user's, or a live rank's, stay."""
    mine = os.getpid()
    return unlink_own_files(folder, REGION, (lambda pid: pid == mine) if own else (lambda pid: not pid_alive(pid)))
