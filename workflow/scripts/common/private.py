"""Files of this user alone: what a cache may load code from (a compiled
kernel, a pickle) only where nobody else could have written it."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def private(path: Path) -> str | None:
    """None when `path` (not followed if a link) belongs to this user and
    no group or other user may write to it; else why not, in a few words."""
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symbolic link"
    if info.st_uid != os.geteuid():
        return f"{path} belongs to uid {info.st_uid}, not to this user (uid {os.geteuid()})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} can be written by group or others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def private_folder(folder: Path) -> str | None:
    """Create `folder` 0700 if missing (its parents as mkdir -p does); None
    when it is private(), else why not."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    folder.mkdir(mode=0o700, exist_ok=True)
    return private(folder)
