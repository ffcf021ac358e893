"""Can this machine reach the Hugging Face Hub? The same test as the data
step's (data/hub_check.py): offline mode set, or a Hub host that does not
resolve, means no; settings/config.py asks it before any training when
deploy.push_to_hub is set."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse


def unreachable() -> str | None:
    """Why the Hub cannot be reached from here, or None when its host resolves."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE is set"
    host = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or "huggingface.co"
    try:
        socket.getaddrinfo(host, 443)
    except OSError as err:
        return f"{host} does not resolve ({err.strerror or err}; no network?)"
    return None


def push_refusal(repo_id: str | None) -> str | None:
    """The config check's one line when deploy.push_to_hub is set but the Hub is out of reach."""
    why = unreachable() if repo_id else None
    return why and (f"config error: deploy.push_to_hub: {repo_id} cannot be uploaded: the Hugging Face Hub is "
                    f"unreachable ({why}); remove deploy.push_to_hub or run where the Hub is reachable")
