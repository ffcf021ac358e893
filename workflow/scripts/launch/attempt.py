"""One try of a training run at a time, each in a folder of its own.

The lock. Before it touches anything of the run, a try takes an exclusive
flock on `<run folder>/try.lock` and writes its host, PID and folder into
it. A try that finds the lock held polls for `wait` seconds (as long as an
earlier try needs to stop: distributed.exit_grace_seconds plus the
launcher's own stop, STOP_SECONDS), then fails with one line naming the
holder. The descriptor is close-on-exec: mpirun and the ranks never hold the
lock, so a stray process cannot keep it forever; the launcher lets go only
after its ranks are gone (supervise.stop). The launch's guard (guard.py)
holds it as well: a launcher killed outright frees the lock only once the
guard has ended every process of its launch (within the grace and a few
seconds, less than `wait`).

The folder. Each try writes its rank logs, status files and console output
(launcher.log) into `<rank-log folder>/try-N/`, N one more than the highest
already there (Snakemake's attempt restarts at 1 with each invocation, so N
is not that). Earlier tries' folders are kept. Its output starts with a
header line (`== try N (attempt A) started ... on HOST`), which also
separates the tries in the rule log (train.smk appends to it). `rank<k>.log` and
`rank<k>.exit` beside them are links to the newest try's.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from workflow.scripts.common import logs
from workflow.scripts.common.errors import UserError, waiting

LOCK_NAME = "try.lock"
STOP_SECONDS = 15.0  # supervise: a stack dump and the launcher's stop, after the grace
POLL_SECONDS = 0.2
FOLDER = re.compile(r"try-(\d+)$")


def lock_wait(exit_grace_seconds: float) -> float:
    """How long a try waits for the one before it to stop."""
    return exit_grace_seconds + STOP_SECONDS


def holder_line(text: bytes | str) -> str:
    """`pid P on host H (try folder F)` from the lock file's content."""
    try:
        holder = json.loads(text or "{}")
    except ValueError:
        holder = {}
    if "pid" not in holder:
        return "a process that wrote no holder"
    folder = f" (try folder {holder['folder']})" if holder.get("folder") else ""
    return f"pid {holder['pid']} on host {holder.get('host', 'unknown')}{folder}"


@contextlib.contextmanager
def locked(run_dir, wait: float):
    """Hold the run's lock for the block; yields a function that records
    the try's folder in the lock file once it is chosen."""
    path = Path(run_dir) / LOCK_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        with waiting(f"the run's lock {path}"):
            _wait_for_lock(fd, path, wait)
        holder = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}

        def record(**extra) -> None:
            holder.update(extra)
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(holder).encode(), 0)

        record.fd = fd  # for the launch's guard (guard.py), which holds the lock as long as the launch runs
        record()
        try:
            yield record
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _wait_for_lock(fd: int, path: Path, wait: float) -> None:
    """flock `fd`, polled for `wait` seconds; says once that it waits, and for whom."""
    deadline, said = time.monotonic() + wait, False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            holder = holder_line(os.pread(fd, 4096, 0))
            if time.monotonic() > deadline:
                raise UserError(f"another try of this run is still running: {holder} holds {path} after {wait:g} s; "
                                "end that process or wait for it") from None
            if not said:
                print(f"try: another try of this run is still running ({holder}); waiting up to {wait:g} s for it "
                      "to stop", file=sys.stderr, flush=True)
                said = True
            time.sleep(POLL_SECONDS)


def numbers(log_dir) -> list[int]:
    """The numbers of the try folders in `log_dir`, in order."""
    log_dir = Path(log_dir)
    found = [FOLDER.match(p.name) for p in log_dir.iterdir()] if log_dir.is_dir() else []
    return sorted(int(m.group(1)) for m in found if m)


def new_folder(log_dir) -> Path:
    """`try-N` under `log_dir`, N one more than the highest there."""
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    number = (numbers(log_dir) or [0])[-1] + 1
    while True:
        folder = log_dir / f"try-{number}"
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            number += 1


def header(folder, attempt: int) -> str:
    """The line that starts a try's output in launcher.log and the rule log."""
    number = FOLDER.search(Path(folder).name).group(1)
    started = time.strftime("%Y-%m-%d %H:%M:%S %z")
    return f"== try {number} (attempt {attempt}) started {started} on {socket.gethostname()}: logs in {folder}"


def link_newest(log_dir, folder, world: int) -> None:
    """rank<k>.log and rank<k>.exit in `log_dir` point into `folder` (the
    places the docs and a reader know); links of an earlier, larger world go."""
    log_dir, name = Path(log_dir), Path(folder).name
    for old in [*log_dir.glob("rank*.log"), *log_dir.glob("rank*.exit")]:
        if old.is_symlink():
            old.unlink()
    for rank in range(world):
        for path in (logs.log_path(log_dir, rank), logs.status_path(log_dir, rank)):
            tmp = path.with_name(f".{path.name}.{os.getpid()}")
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(f"{name}/{path.name}")
            os.replace(tmp, path)


def for_try(program: list[str], log_dir, folder) -> list[str]:
    """The ranks' command with its `--log-dir <log_dir>` pointed at the try's folder."""
    program = list(program)
    for i, word in enumerate(program[:-1]):
        if word == "--log-dir" and Path(program[i + 1]) == Path(log_dir):
            program[i + 1] = str(folder)
    return program


def copy_output(path) -> subprocess.Popen:
    """From here on, this process's stdout and stderr (and so its children's)
    also go to `path`: a tee that ignores SIGTERM, like the rule's, and
    SIGINT (a Ctrl-C reaches the terminal's whole process group), so the
    last lines of a stopped try still arrive."""
    sys.stdout.flush()
    sys.stderr.flush()
    tee = subprocess.Popen(["tee", "-a", str(path)], stdin=subprocess.PIPE, stdout=sys.stderr.fileno(),
                           preexec_fn=ignore_stop_signals)
    os.dup2(tee.stdin.fileno(), sys.stdout.fileno())
    os.dup2(tee.stdin.fileno(), sys.stderr.fileno())
    tee.stdin.close()
    return tee


def ignore_stop_signals() -> None:
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
