# Helpers shared by the rules: the validated config, its runs and the
# per-stage configuration each rule depends on (and nothing more, so that
# changing an evaluation setting never retrains).
import json
import re
import sys

from workflow.scripts.common import config as cfg
from workflow.scripts.common.snakemake_env import prepare_job_environment

prepare_job_environment(workflow.basedir)

try:
    CONFIG = cfg.load_config(config)
except cfg.ConfigError as err:
    sys.exit(f"error: {err}")

EXP = CONFIG["experiment"]
RESULTS = f"results/{EXP}"
RUNS = cfg.runs(CONFIG)
FIRST_RUN = next(iter(RUNS))  # the baseline of a sweep
try:
    # `tuned` runs take the layout `snakemake ... tune` measured (run it first).
    cfg.apply_tuned_layout(RUNS, f"{RESULTS}/tune/layout.json", tuning="tune" in getattr(workflow.dag_settings, "targets", ()))
except cfg.ConfigError as err:
    sys.exit(f"error: {err}")
RUN_STAGES = ("environment", "train", "evaluate")
SHARED_STAGES = ("data", "tokenize")


wildcard_constraints:
    experiment=re.escape(EXP),
    run="|".join(re.escape(r) for r in RUNS),
    shared_stage="|".join(SHARED_STAGES),
    run_stage="|".join(RUN_STAGES),


def _pick(source, *keys):
    return {k: source[k] for k in keys if k in source}


def stage_config(stage, run=None):
    """The slice of the configuration one stage depends on."""
    c = RUNS[run] if run else CONFIG
    common = _pick(c, "task", "model", "trust_remote_code")
    if stage == "data":
        data = dict(c["data"] or {})
        data.pop("generate", None)
        return {"task": c["task"], "data": data or None}
    if stage == "tokenize":
        return {**common, "train": _pick(c["train"], "max_seq_length", "doc_stride")}
    if stage == "environment":
        return {"distributed": c["distributed"], "train": _pick(c["train"], "precision", "ipex")}
    if stage == "train":
        return {**common, "train": c["train"], "distributed": c["distributed"]}
    if stage == "evaluate":
        return {"task": c["task"], "evaluation": c["evaluation"]}
    raise ValueError(f"unknown stage {stage}")


def stage_json(stage, run=None):
    return json.dumps(stage_config(stage, run), sort_keys=True)


def world_size(run):
    d = RUNS[run]["distributed"]
    return d["nodes"] * d["processes_per_node"]


def run_dirs():
    return [f"{RESULTS}/{run}" for run in RUNS]


def local_data_files(wildcards):
    return list(cfg.data_files(CONFIG).values())


def tuned_layout(wildcards):
    """The tuning result, for runs that use `threads_per_process: tuned`."""
    if RUNS[wildcards.run]["distributed"]["threads_per_process"] == "tuned":
        return f"{RESULTS}/tune/layout.json"
    return []
