"""Atomic outputs: a later step never sees a half-written file or folder."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from workflow.scripts.common.errors import UserError


@contextmanager
def space_for(path, needed_bytes: int | None = None):
    """A full disk while writing `path` ends in one line naming the path and
    the space (the atomic writers have left the previous version in place)."""
    try:
        yield
    except OSError as err:
        if err.errno != errno.ENOSPC:
            raise
        free = shutil.disk_usage(Path(path).parent if Path(path).parent.exists() else ".").free
        need = f"it needs about {needed_bytes / 1e6:.1f} MB, " if needed_bytes else ""
        raise UserError(f"no space left on the device writing {path}: {need}{free / 1e6:.1f} MB are free; "
                        "free some space and rerun (what was written before is untouched)") from None


def write_json(path, data) -> None:
    """Write JSON to a temporary file beside `path`, then rename over it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with space_for(path):
        _write_json(path, data)


def _write_json(path: Path, data) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, indent=2, sort_keys=False)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it owner-only
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def read_json(path):
    return json.loads(Path(path).read_text())


@contextmanager
def atomic_dir(path):
    """Yield a temporary folder that replaces `path` only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    try:
        with space_for(path):
            yield tmp
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
