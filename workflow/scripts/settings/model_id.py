"""What a model id may look like: a Hugging Face Hub id as huggingface_hub's
validate_repo_id takes it (ASCII only), name or namespace/name, each 1-96 of
letters, digits, '-', '_', '.', starting and ending with a letter, digit or
'_'; no '--' or '..', no trailing '.git'. Nothing a shell would read."""

from __future__ import annotations

import re

_HUB_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?"
HUB_ID = re.compile(rf"{_HUB_PART}(?:/{_HUB_PART})?")


def is_hub_id_form(model: str) -> bool:
    """True when `model` has the form of a Hugging Face Hub id."""
    return bool(HUB_ID.fullmatch(model)) and "--" not in model and ".." not in model \
        and not model.endswith(".git")
