"""The tries of a training run, for summary.json: each try's outcome, the
step it resumed from, its world size and the nodes it ran on or dropped.
Snakemake retries a failed training job (`distributed.retries`); each try
resumes from the newest whole checkpoint. A try that failed on what no
retry can fix (verdict.retry_cannot_fix) is recorded so, and the next try
of the same workflow run ends at once with its error (`hopeless`)."""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path

from workflow.scripts.common import logs
from workflow.scripts.common.atomic import read_json, write_json
from workflow.scripts.common.errors import Preempted, RetryCannotFix


def earlier(path: Path, attempt: int) -> list[dict]:
    """The record so far; the first try of a workflow run starts a new one."""
    if attempt <= 1 or not path.is_file():
        return []
    return [t for t in read_json(path) if t["try"] < attempt]


def hopeless(path, attempt: int) -> None:
    """Raise the previous try's error when no retry can fix it (a config,
    data or model problem): minutes of starting ranks saved per retry."""
    previous = earlier(Path(path), attempt)[-1:]
    if previous and previous[0].get("retry_can_fix") is False:
        cause = previous[0]["error"].split(NOT_STARTED, 1)[-1]  # the first try's line, not a chain of them
        raise RetryCannotFix(f"try {attempt} not started{NOT_STARTED}{cause}")


NOT_STARTED = ", a retry cannot fix this: "


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
        entry.update(outcome="failed", error=str(err).splitlines()[0] if str(err) else type(err).__name__,
                     retry_can_fix=not isinstance(err, RetryCannotFix))
        raise
    finally:
        entry["seconds"] = round(time.time() - started, 1)
        entry["resumed_from_step"] = logs.read_status(log_dir, 0).get("resumed_from_step") if log_dir else None
        write_json(path, [*history, entry])
