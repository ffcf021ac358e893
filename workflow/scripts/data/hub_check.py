"""Before any download: does the Hub's host resolve? Without a network the
Hub clients retry for about 25 s and print a page of tracebacks; a host that
does not resolve will not answer, so the data step stops at once, with the
keys that replace the Hub by local files.
"""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse

from workflow.scripts.common.tasks import Task
from workflow.scripts.data.errors import HubUnavailableError

FORMATS = "glue_tsv csv tsv jsonl parquet squad_json"


def local_keys(task: Task) -> list[str]:
    """Every key the local-file setup of `task` needs (the schema requires format)."""
    keys = ["data.train", "data.validation", "data.format"]
    if "validation_mismatched" in task.validation_splits:
        keys.append("data.validation_mismatched")
    if task.own:
        keys += ["data.text_columns", "data.label_column"]
    return keys


def local_files_hint(task: Task) -> str:
    return (f"set {', '.join(local_keys(task))} (format one of {FORMATS}) for local files "
            "(see docs/tasks.md, Data), or run `make demo` for the offline demo")


def offline_mode() -> bool:
    """HF_HUB_OFFLINE / HF_DATASETS_OFFLINE: the clients read their cache without the network."""
    return any(os.environ.get(k, "").lower() in ("1", "true", "yes", "on")
               for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def require_hub(task: Task, what: str) -> None:
    """Stop at once, in one line, when the Hub's host does not resolve."""
    if offline_mode():
        return
    host = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or "huggingface.co"
    try:
        socket.getaddrinfo(host, 443)
    except OSError as err:
        raise HubUnavailableError(f"cannot download {what} from the Hugging Face Hub ({host} does not resolve: "
                                  f"{err.strerror or err}; no network?): {local_files_hint(task)}") from None
