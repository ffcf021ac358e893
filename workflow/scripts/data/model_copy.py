"""Where the ranks load the model from. A Hub id is fetched once, on the
launch node (or the Slurm login node), into results/<experiment>/data/models/<model>
(rule data_fetch_model); a local folder or a pkg: model (resolved to its
folder) is used where it is, never copied. Ranks then read a local folder
with the Hub offline, so compute nodes need no internet.
"""

from __future__ import annotations

from workflow.scripts.settings.model_id import fetched_dir, is_hub_id, model_key  # noqa: F401 (this module's names)


def local_model(config: dict) -> str:
    """The folder the tokenizer and the ranks load: the fetched copy of a Hub id, else the model's own folder."""
    model = config["model"]
    return fetched_dir(config.get("experiment", ""), model) if is_hub_id(model) else model
