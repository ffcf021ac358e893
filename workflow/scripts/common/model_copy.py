"""Where the ranks load the model from. A Hub id is fetched once, on the
launch node (or the Slurm login node), into results/<experiment>/data/model
(rule data_fetch_model); a local folder or a pkg: model (resolved to its
folder) is used where it is, never copied. Ranks then read a local folder
with the Hub offline, so compute nodes need no internet.
"""

from __future__ import annotations

from pathlib import Path


def is_hub_id(model: str) -> bool:
    """A Hub id such as distilbert-base-uncased: not a folder here."""
    return not Path(model).is_dir()


def fetched_dir(experiment: str) -> str:
    return f"results/{experiment}/data/model"


def local_model(config: dict) -> str:
    """The folder the tokenizer and the ranks load: the fetched copy of a Hub id, else the model's own folder."""
    return fetched_dir(config.get("experiment", "")) if is_hub_id(config["model"]) else config["model"]
