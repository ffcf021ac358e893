"""Where the ranks load the model from. A Hub id is fetched once, on the
launch node (or the Slurm login node), into results/<experiment>/data/models/<model>
(rule data_fetch_model); a local folder or a pkg: model (resolved to its
folder) is used where it is, never copied. Ranks then read a local folder
with the Hub offline, so compute nodes need no internet.
"""

from __future__ import annotations

import re
from pathlib import Path


def is_hub_id(model: str) -> bool:
    """A Hub id such as distilbert-base-uncased: not a folder here."""
    return not Path(model).is_dir()


def model_key(model: str) -> str:
    """A folder name for a Hub id (org/name -> org--name)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "--", model)


def fetched_dir(experiment: str, model: str) -> str:
    """Where a Hub model is fetched to: once per experiment and model, shared by every run of a sweep."""
    return f"results/{experiment}/data/models/{model_key(model)}"


def local_model(config: dict) -> str:
    """The folder the tokenizer and the ranks load: the fetched copy of a Hub id, else the model's own folder."""
    model = config["model"]
    return fetched_dir(config.get("experiment", ""), model) if is_hub_id(model) else model
