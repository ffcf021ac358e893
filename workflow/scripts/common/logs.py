"""Per-rank logging and exit status.

Every rank writes its own log (rank 0 also to stderr) and a status file,
rank<N>.exit, that the launcher reads: `running` (with host and pid) from the
start, `trained` once the rank's results are complete, then `ok` or `error`
at exit. A rank's Python stacks can be dumped into its log at any time with
SIGUSR1 (the launcher does this to a rank that does not exit).
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import socket
import sys
from contextlib import contextmanager
from pathlib import Path

from workflow.scripts.common.atomic import read_json, write_json
from workflow.scripts.common.errors import Preempted, Terminated, sigterm_raises

STACK_SIGNAL = signal.SIGUSR1
FINAL = ("ok", "error", "preempted")  # a rank with one of these has exited
STOPPED = "stopped by SIGTERM (scancel, a time limit, preemption, or the launcher after another rank failed)"


def log_path(log_dir, rank: int) -> Path:
    return Path(log_dir) / f"rank{rank}.log"


def status_path(log_dir, rank: int) -> Path:
    return Path(log_dir) / f"rank{rank}.exit"


def setup(log_dir, rank: int, name: str = "cpuddp") -> logging.Logger:
    fmt = logging.Formatter(f"%(asctime)s [rank {rank} {socket.gethostname()}] %(message)s", "%H:%M:%S")
    logger = logging.getLogger(name)
    logger.handlers.clear()
    logger.setLevel(logging.INFO)
    logger.propagate = False
    # Appending (the file was emptied by exit_status) keeps stack dumps and
    # log lines from overwriting each other.
    to_file = logging.FileHandler(log_path(log_dir, rank), mode="a")
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


class RankStatus:
    """The rank's status file, and its stack dumps into its log."""

    def __init__(self, log_dir, rank: int):
        self.path = status_path(log_dir, rank)
        self.record = {"rank": rank, "host": socket.gethostname(), "pid": os.getpid(), "status": "running"}
        log = log_path(log_dir, rank)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")
        self.stack_file = open(log, "a")  # noqa: SIM115  open for the life of the process
        faulthandler.register(STACK_SIGNAL, file=self.stack_file, all_threads=True)

    def write(self, status: str, **extra) -> None:
        self.record.update(status=status, **extra)
        write_json(self.path, self.record)

    def trained(self, exit_within: float) -> None:
        """Results are complete; only teardown is left. If the process has not
        exited `exit_within` seconds later, dump its stacks and end it."""
        self.write("trained")
        faulthandler.dump_traceback_later(exit_within, exit=True, file=self.stack_file)


@contextmanager
def exit_status(log_dir, rank: int):
    """rank<N>.exit through the rank's life: running, trained, then ok,
    error or preempted (SIGTERM while training: a checkpoint, then exit 75);
    SIGTERM outside the training loop says so; a killed rank stays `running`."""
    status = RankStatus(log_dir, rank)
    status.write("running")
    try:
        with sigterm_raises():
            yield status
    except Preempted as err:
        status.write("preempted", error=str(err))  # SIGTERM is ignored from here (sigterm_raises)
        raise
    except Terminated:
        print(f"rank {rank}: {STOPPED}", file=status.stack_file, flush=True)
        if status.record["status"] != "trained":  # results complete: teardown only
            status.write("error", error=STOPPED)
        raise
    except BaseException as err:
        status.write("error", error=f"{type(err).__name__}: {err}".splitlines()[0])
        raise
    else:
        status.write("ok")
    finally:
        faulthandler.cancel_dump_traceback_later()


def read_status(log_dir, rank: int) -> dict:
    """A rank's last status; {} when it never started."""
    path = status_path(log_dir, rank)
    return read_json(path) if path.is_file() else {}
