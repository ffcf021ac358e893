"""What the run needs from the Hugging Face Hub, asked once, by Snakemake's
main process where the user typed the command (workflow/rules/common.smk),
never while a job on a compute node parses the workflow: those nodes often
have no route to the Hub, and need none (ranks read local folders).

- `model_problem`: a Hub model must be fetchable: in the local Hugging Face
  cache (HF_HOME), already fetched into results/, or on a reachable Hub.
- `push_problem`: deploy.push_to_hub needs a reachable Hub and a token that
  may write there. The upload runs on this node (a local rule), after training.

Each returns the one line the user reads, or None.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from workflow.scripts.common.errors import first_line

TIMEOUT = 10  # seconds per Hub request: a firewalled host never answers
FETCH_HINT = ("pre-fetch it where the Hub is reachable (`hf download {model}`, into the same HF_HOME) or set "
              "model: to a local folder (see docs/clusters.md, Nodes without internet); `make demo` runs offline")


def unreachable() -> str | None:
    """Why the Hub cannot be reached from here (offline mode, its host does not resolve), or None."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE is set"
    host = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or "huggingface.co"
    try:
        socket.getaddrinfo(host, 443)
    except OSError as err:
        return f"{host} does not resolve ({err.strerror or err}; no network?)"
    return None


def cached(model: str) -> bool:
    """The model's config and safetensors weights are in the local Hugging Face cache."""
    from huggingface_hub import try_to_load_from_cache

    config = try_to_load_from_cache(model, "config.json", cache_dir=_cache_dir())
    return isinstance(config, str) and any(Path(config).parent.glob("*.safetensors"))


def model_problem(model: str, fetched: Path) -> str | None:
    """Why a Hub model cannot be had here, or None (a folder, fetched, cached, or on a reachable Hub)."""
    if Path(model).is_dir() or fetched.is_dir() or cached(model):
        return None
    why = unreachable() or _missing_on_hub(model)
    return why and (f"config error: model: cannot fetch '{model}': no such folder here, not in the Hugging Face "
                    f"cache ({_cache_dir()}), and {why}; " + FETCH_HINT.format(model=model))


def _cache_dir() -> str:
    """The Hub cache as huggingface_hub resolves it, from the environment as it is now (its constants were
    read when it was imported, which in a long-lived process may be before HF_HOME was set)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.path.expanduser(os.environ["HF_HUB_CACHE"])
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.expanduser(os.environ.get("HF_HOME") or os.path.join(cache, "huggingface")), "hub")


def _missing_on_hub(model: str) -> str | None:
    """The Hub's answer about `model`: None when it is there."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        HfApi().model_info(model, timeout=TIMEOUT)
    except GatedRepoError:
        return "the Hub says it is gated (accept its terms on the Hub and log in: `hf auth login`)"
    except RepositoryNotFoundError:
        return "the Hub has no such model (or it is private: log in with `hf auth login`)"
    except Exception as err:  # no route, a firewall, a proxy: many kinds
        return f"the Hub does not answer ({first_line(err)})"
    return None


def push_problem(repo_id: str | None) -> str | None:
    """The config check's one line when deploy.push_to_hub cannot be uploaded from here, or None."""
    why = repo_id and (unreachable() or _cannot_write(repo_id))
    return why and (f"config error: deploy.push_to_hub: {repo_id} cannot be uploaded from here: {why}; "
                    "fix that or remove deploy.push_to_hub (nothing was trained)")


def _cannot_write(repo_id: str) -> str | None:
    """Ask the Hub who the token is (whoami): None when it may write to `repo_id`."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import LocalTokenNotFoundError

    try:
        me = HfApi().whoami()
    except LocalTokenNotFoundError:
        return "no Hugging Face token (set HF_TOKEN or run `hf auth login` with a write token)"
    except Exception as err:  # an invalid token (401), no route, a firewall
        return f"the Hub refused or did not answer ({first_line(err)})"
    return None if may_write(me, repo_id) else (
        f"the token of {me.get('name', '?')} may not write to {repo_id} (make a token with write access)")


def may_write(me: dict, repo_id: str) -> bool:
    """whoami's answer: a `write` token, or a fine-grained one with repo.write on the repo or its namespace."""
    token = (me.get("auth") or {}).get("accessToken") or {}
    if token.get("role") == "write":
        return True
    if token.get("role") != "fineGrained":
        return False
    namespace = repo_id.split("/")[0] if "/" in repo_id else me.get("name")
    return any("repo.write" in scope.get("permissions", ())
               and (scope.get("entity") or {}).get("name") in (namespace, repo_id)
               for scope in (token.get("fineGrained") or {}).get("scoped", ()))
