"""Atomic outputs: a later step never sees a half-written file or folder."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
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
        os.chmod(tmp, 0o666 & ~umask())  # mkstemp makes it owner-only: a team shares results/
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def umask() -> int:
    """This process's umask, read without setting it (os.umask sets it: for
    that instant another thread's new file would get mode 0666)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o077)  # no /proc (not Linux): for that instant, the safe side
    os.umask(mask)
    return mask


def follow_umask(root) -> None:
    """Give `root` and everything under it the modes a plain mkdir and open
    give under this umask (executables keep their x bits): mkdtemp makes a
    folder 0700 and some writers (safetensors' save_file) a file 0600, which
    would hide results from the team sharing the folder or the account that
    serves the model. Links are left alone (chmod would follow them)."""
    mask = umask()
    for folder, _, files in os.walk(root):
        os.chmod(folder, 0o777 & ~mask)
        for name in files:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            if stat.S_ISREG(info.st_mode):
                os.chmod(path, (0o777 if info.st_mode & 0o111 else 0o666) & ~mask)


def read_json(path):
    return json.loads(Path(path).read_text())


def fsync_dir(path) -> None:
    """Make a folder's entries (a file created or renamed in it) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file and folder under `root`, and `root` itself."""
    for folder, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(folder)


@contextmanager
def atomic_dir(path):
    """Yield a temporary folder that replaces `path` only on success: its
    modes follow the umask, its files are fsynced, it is renamed into place,
    and the parent is fsynced.
    A previous `path` is moved aside first and removed after the rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    old = tmp.with_name(tmp.name[:-len(".tmp")] + ".old")
    try:
        with space_for(path):
            yield tmp
            follow_umask(tmp)
            fsync_tree(tmp)
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    finally:
        for leftover in (tmp, old):
            if leftover.exists():
                shutil.rmtree(leftover)
