"""What a model id may look like: a Hugging Face Hub id as huggingface_hub's
validate_repo_id takes it (ASCII only), name or namespace/name, each 1-96 of
letters, digits, '-', '_', '.', starting and ending with a letter, digit or
'_'; no '--' or '..', no trailing '.git'. Nothing a shell would read."""

from __future__ import annotations

import re
from pathlib import Path

_HUB_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?"
HUB_ID = re.compile(rf"{_HUB_PART}(?:/{_HUB_PART})?")


def is_hub_id_form(model: str) -> bool:
    """True when `model` has the form of a Hugging Face Hub id."""
    return bool(HUB_ID.fullmatch(model)) and "--" not in model and ".." not in model \
        and not model.endswith(".git")


def is_hub_id(model: str) -> bool:
    """A Hub id such as distilbert-base-uncased: not a folder here."""
    return not Path(model).is_dir()


def model_key(model: str) -> str:
    """A folder name for a Hub id (org/name -> org--name)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "--", model)


def fetched_dir(experiment: str, model: str) -> str:
    """Where a Hub model is fetched to: once per experiment and model, shared by every run of a sweep."""
    return f"results/{experiment}/data/models/{model_key(model)}"
