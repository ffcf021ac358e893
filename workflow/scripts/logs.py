"""Per-rank logging: every rank writes its own file; rank 0 also to stderr."""

from __future__ import annotations

import json
import logging
import socket
from contextlib import contextmanager
import sys
from pathlib import Path


def setup(log_dir, rank: int, name: str = "cpuddp") -> logging.Logger:
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    fmt = logging.Formatter(f"%(asctime)s [rank {rank} {socket.gethostname()}] %(message)s", "%H:%M:%S")
    logger = logging.getLogger(name)
    logger.handlers.clear()
    logger.setLevel(logging.INFO)
    logger.propagate = False
    to_file = logging.FileHandler(log_dir / f"rank{rank}.log", mode="w")
    to_file.setFormatter(fmt)
    logger.addHandler(to_file)
    to_console = logging.StreamHandler(sys.stderr)
    to_console.setFormatter(fmt)
    # Other ranks only reach the console with problems, to keep it readable.
    to_console.setLevel(logging.INFO if rank == 0 else logging.WARNING)
    logger.addHandler(to_console)
    if rank != 0:
        import transformers

        transformers.logging.set_verbosity_error()
    return logger


@contextmanager
def exit_status(log_dir, rank: int):
    """Leave rank<N>.exit: ok or the error; a killed rank leaves none."""
    path = Path(log_dir) / f"rank{rank}.exit"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    status = {"rank": rank, "host": socket.gethostname(), "status": "ok"}
    try:
        yield
    except BaseException as err:
        status.update(status="error", error=f"{type(err).__name__}: {err}".splitlines()[0])
        raise
    finally:
        path.write_text(json.dumps(status) + "\n")
