"""Training a rerun superseded is moved aside, never deleted (DESIGN.md).

A checkpoint of other work (train/checkpoint.py: its fingerprint differs,
say the training file changed) goes to
`<run>/superseded/<what changed>-<UTC time>/step-...`: beside the
checkpoints folder, so on the same filesystem (a rename: no copy, no
space), and out of everything that is read or removed later: no rule's
input or output, not the checkpoints folder a finished training removes.
summary.json lists what a run keeps aside; `rm -rf <run>/superseded`
deletes it (docs/fault-tolerance.md).
"""

from __future__ import annotations

import os
import shlex
import shutil
import time
from pathlib import Path

from workflow.scripts.common.atomic import fsync_dir
from workflow.scripts.common.errors import UserError

FOLDER = "superseded"


def folder(run_dir) -> Path:
    return Path(run_dir) / FOLDER


def delete_command(run_dir) -> str:
    """The one command that deletes what a run keeps aside (documented)."""
    return f"rm -rf {shlex.quote(str(folder(run_dir)))}"


def listed(run_dir) -> list[str]:
    """The checkpoints `run_dir` keeps aside, in the order they were moved."""
    root = folder(run_dir)
    kept = root.glob("*/*") if root.is_dir() else []
    return [str(p) for p in sorted(kept, key=lambda p: (p.parent.name.rsplit("-", 1)[-1], p.name))]


def size(path: Path) -> int:
    """The bytes of the files under `path` (what writing it again needs)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


def set_aside(other: list[tuple[Path, str]], run_dir) -> Path:
    """Move each (checkpoint, part that changed), newest first, into
    `<run>/superseded/<part>-<time>/`; the folder of the newest. Refused with
    one line, nothing moved, when the disk has less room than the newest
    takes: the fresh training could not write its own checkpoints."""
    newest, _ = other[0]
    need, free = size(newest), free_bytes(newest.parent)
    if free < need:
        raise UserError(f"no space for a fresh training's checkpoints in {newest.parent}: each needs about "
                        f"{need / 1e6:.1f} MB, {free / 1e6:.1f} MB are free; nothing was moved or deleted; free "
                        f"some space (`{delete_command(run_dir)}` deletes the training kept aside before) and rerun")
    stamp, places = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()), {}
    for checkpoint, part in other:
        if part not in places:
            places[part] = _new_folder(folder(run_dir), f"{part}-{stamp}")
        try:
            os.rename(checkpoint, places[part] / checkpoint.name)
        except OSError as err:
            raise UserError(f"cannot move checkpoint {checkpoint} aside to {places[part]} ({err.strerror}); "
                            "nothing was deleted: move it out of the checkpoints folder yourself and rerun") from None
    fsync_dir(newest.parent)  # the moves survive a crash
    for place in places.values():
        fsync_dir(place)
    return places[other[0][1]]


def _new_folder(root: Path, name: str) -> Path:
    """`root/name`, created new (`name.2`, ... when a rerun of the same second made it)."""
    root.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        place = root / (name if n == 1 else f"{name}.{n}")
        try:
            place.mkdir()
            return place
        except FileExistsError:
            continue
    raise UserError(f"{root} holds too many folders named {name}*; delete some and rerun")
