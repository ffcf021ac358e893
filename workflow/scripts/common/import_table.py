"""transformers' lazy-import table, kept on disk between processes.

transformers 5 builds, in every process that imports it, the table that maps
each of its names to the module defining it: `define_import_structure` reads
all of `transformers/models` (1,638 files, their `__all__` and backend
markers), about 0.3 CPU-s of the 0.9 its import takes here (2026-12-03).
Every step and rank imports transformers, so a workflow run pays it hundreds
of times for a table that changes only when transformers' files do.

`install()` (workflow/scripts/__init__.py, for programs started with -m)
wraps that one function as transformers loads it: the table is read from
the cache when a fingerprint of the models folder (every .py file's path,
size and mtime) matches, else built as transformers builds it and stored.
Anything unexpected (another transformers, no such function, an unwritable
cache, a folder or file another user could have written: common/private.py)
leaves transformers' own way in place."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.abc
import importlib.machinery
import os
import pickle
import sys
import tempfile
from pathlib import Path

from workflow.scripts.common.private import private, private_folder

MODULE = "transformers.utils.import_utils"
FUNCTION = "define_import_structure"


def cache_folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "cpuddp" / "transformers-import-table"


def fingerprint(folder: str) -> str:
    """Every .py file under `folder`: path, size and mtime, in a stable order."""
    digest = hashlib.sha256()
    pending = [folder]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        pending.append(entry.path)
                elif entry.name.endswith(".py"):
                    stat = entry.stat()
                    digest.update(f"{entry.path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:32]


def cached(original, folder: Path):
    """`original(module_path, prefix)` with the models folder's table read from,
    or written to, `folder`: a folder and pickle of this user alone (private()),
    since unpickling a file runs what its writer put in it."""
    def define_import_structure(module_path, prefix=None):
        if prefix != "models":  # a model package's own small table: transformers' way
            return original(module_path, prefix)
        try:
            path = None if private_folder(folder) else folder / f"{fingerprint(str(module_path))}.pickle"
        except OSError:
            path = None
        if path is None:  # no folder of this user's own: transformers' way
            return original(module_path, prefix)
        table = read(path)
        if table is None:
            table = original(module_path, prefix)
            with contextlib.suppress(OSError):
                store(path, pickle.dumps(table))  # before the caller adds its own names to the table
        return table
    return define_import_structure


def read(path: Path) -> dict | None:
    """The stored table, if there is one that only this user could have written."""
    try:
        if os.path.lexists(path) and not private(path):
            return pickle.loads(path.read_bytes())
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        pass
    return None


def store(path: Path, data: bytes) -> None:
    """Written beside `path` (owner-only, as mkstemp makes it), then renamed
    over it: ranks starting at once each write a whole file."""
    handle, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(partial, path)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


class _Finder(importlib.abc.MetaPathFinder):
    """Finds transformers' import_utils as Python would, and wraps the
    function once the module has run, before transformers' __init__ reads it."""

    def find_spec(self, name, path, target=None):
        if name != MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            try:
                folder = cache_folder()
            except (KeyError, RuntimeError):  # no home folder to find: transformers' own way
                return
            if callable(getattr(module, FUNCTION, None)):
                setattr(module, FUNCTION, cached(getattr(module, FUNCTION), folder))
        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    """Before transformers is imported: its models' table comes from the cache."""
    if MODULE not in sys.modules and not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
