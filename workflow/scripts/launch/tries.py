"""The tries of a training run, for summary.json: each try's outcome, the
step it resumed from, its world size and the nodes it ran on or dropped.
Snakemake retries a failed training job (`distributed.retries`); each try
resumes from the newest whole checkpoint."""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path

from workflow.scripts.common import logs
from workflow.scripts.common.atomic import read_json, write_json
from workflow.scripts.common.errors import Preempted


def earlier(path: Path, attempt: int) -> list[dict]:
    """The record so far; the first try of a workflow run starts a new one."""
    if attempt <= 1 or not path.is_file():
        return []
    return [t for t in read_json(path) if t["try"] < attempt]


@contextmanager
def recorded(path, attempt: int, log_dir, entry: dict):
    """Append this try to `path` however it ends (the exception goes on)."""
    path = Path(path)
    history = earlier(path, attempt)
    entry = {"try": attempt, **entry}
    started = time.time()
    try:
        yield entry
        entry["outcome"] = "ok"
    except Preempted as err:
        entry.update(outcome="preempted", error=str(err))
        raise
    except BaseException as err:
        entry.update(outcome="failed", error=str(err).splitlines()[0] if str(err) else type(err).__name__)
        raise
    finally:
        entry["seconds"] = round(time.time() - started, 1)
        entry["resumed_from_step"] = logs.read_status(log_dir, 0).get("resumed_from_step") if log_dir else None
        write_json(path, [*history, entry])
