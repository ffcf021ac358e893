"""The slice of the configuration each stage depends on, and nothing more:
the workflow writes one file per slice (rule `config_stage`), rewritten only
when its content changes, so that changing an evaluation setting never
retrains and changing nothing does nothing."""

from __future__ import annotations

import json

from workflow.scripts.data.model_copy import local_model
from workflow.scripts.settings.views import STAGE_SUBKEYS

SHARED_STAGES = ("data", "tokenize", "report", "plan")  # one per experiment
RUN_STAGES = ("environment", "train", "evaluate", "convert", "quantize", "runtimes", "deploy")  # one per run of a sweep
# The gates are not what quantize_static depends on: changing them reruns evaluate_runtimes only.
GATES = ("max_accuracy_drop", "min_speedup")


def pick(source: dict, *keys: str) -> dict:
    return {k: source[k] for k in keys if k in source}


def stage_config(stage: str, config: dict) -> dict:
    """The slice of `config` (the experiment's, or one run's) that `stage` reads."""
    model = pick(config, "task", "model", "trust_remote_code")
    # Tokenizer and ranks read the local copy (a Hub id is fetched once by data_fetch_model).
    local = {**model, "model": local_model(config)} if "model" in config else model
    slices = {
        "data": lambda: {"task": config["task"], "data": data_slice(config)},
        "tokenize": lambda: {**local, "train": pick(config["train"], *STAGE_SUBKEYS["tokenize"]["train"])},
        "report": lambda: {**{k: config.get(k) for k in ("experiment", "task", "model", "published", "sweep")},
                           # the file's keys are sorted; run names follow the sweep's own order
                           "sweep_order": list(config.get("sweep") or {}),
                           "train": pick(config["train"], "seed", "learning_rate")},
        "plan": lambda: {**model, **{k: config.get(k) for k in ("experiment", "published", "sweep", "plan")},
                         "train": config["train"], "distributed": config["distributed"]},
        "environment": lambda: {"distributed": config["distributed"],
                                "train": pick(config["train"], *STAGE_SUBKEYS["environment"]["train"])},
        "train": lambda: {**local, "train": config["train"], "distributed": config["distributed"],
                          "evaluation": train_evaluation(config), **train_report(config)},
        # data: model/'s card names what it was trained and evaluated on (evaluate_fp32 completes it).
        "evaluate": lambda: {"task": config["task"], "data": data_slice(config), "evaluation": config["evaluation"]},
        "convert": lambda: {"task": config["task"]},
        "quantize": lambda: {"task": config["task"], "quantization": {
            k: v for k, v in config["quantization"].items() if k not in GATES}},
        "runtimes": lambda: {"task": config["task"], "evaluation": config["evaluation"],
                             "quantization": pick(config["quantization"], "enabled", *GATES)},
        # The model card's facts (the model as configured, not its local copy) and where to push.
        "deploy": lambda: {**pick(config, "experiment", "task", "model"), "data": data_slice(config),
                           "train": config["train"],
                           "deploy": config.get("deploy") or {}},
    }
    if stage not in slices:
        raise ValueError(f"unknown stage {stage}")
    return slices[stage]()


def train_evaluation(config: dict) -> dict:
    """What evaluation during training reads: with evaluation.every null
    only that, so that the other evaluation settings never retrain."""
    evaluation = config.get("evaluation") or {}
    if evaluation.get("every") is None:
        return {"every": None}
    return pick(evaluation, "every", "metric", "batch_size", "n_best_size", "max_answer_length",
                "null_score_diff_threshold")


def train_report(config: dict) -> dict:
    """The tracking settings (report), only when a tracker is named: a
    configuration without trackers keeps the slice (and the trained runs) it had."""
    report = config.get("report") or {}
    return {"report": report} if report.get("trackers") else {}


def data_slice(config: dict) -> dict | None:
    """The data files and format; how the demo generates them does not matter."""
    data = dict(config["data"] or {})
    data.pop("generate", None)
    return data or None


def stage_json(stage: str, config: dict) -> str:
    return json.dumps(stage_config(stage, config), sort_keys=True)
