# Helpers shared by the rules: the validated config, its runs, and the input
# functions and resources of the rules. Stage files hold only rules.
import json
import os
import re
import sys

import snakemake.logging

from workflow.scripts.common import config as cfg
from workflow.scripts.common.plan_lines import brief_dry_run, experiment_line, run_line
from workflow.scripts.common import stages
from workflow.scripts.common.model_copy import fetched_dir, is_hub_id, model_key
from workflow.scripts.common.hostfile import read_hostfile
from workflow.scripts.common import sweep as sweeps
from workflow.scripts.common.snakemake_env import prepare_job_environment
from workflow.scripts.launch import resources
from workflow.scripts.report import glue_table

prepare_job_environment(workflow.basedir)

try:
    CONFIG = cfg.load_config(config)
except cfg.ConfigError as err:
    sys.exit(f"error: {err}")

EXP = CONFIG["experiment"]
RESULTS = f"results/{EXP}"
RUNS = cfg.runs(CONFIG)
FIRST_RUN = next(iter(RUNS))  # the baseline of a sweep
# Before Snakemake's plan: one line per run, where and how it runs; a dry
# run then prints the job table, not every job's block (plan_lines.py).
if workflow.is_main_process:
    brief_dry_run(sys.argv, snakemake.logging.logger)
    for name, run in RUNS.items():
        print(run_line(name, run, RESULTS, CONFIG.get("cluster")), file=sys.stderr)
    print(experiment_line(EXP, len(RUNS), RESULTS), file=sys.stderr)
# A sweep over task, model or length: data per task, tokens per task, model
# and length, each under results/<experiment>/data/<key>/ with its own
# config slice (scope "data/<key>"); else the experiment's one copy.
SPLIT_DATA = sweeps.per_data(CONFIG)
DATA_SCOPES = sweeps.data_scopes(CONFIG, RUNS)


def data_key(scope):
    """The scope data/<task>/ -> the key of its paths, a slash and <task>."""
    return f"{os.sep}{scope[len('data/') :].rstrip('/')}"


# The rules that launch ranks on the nodes (Slurm submits only these).
MPI_RULES = ("environment_check", "train_ddp", "setup_nodes")


wildcard_constraints:
    experiment=re.escape(EXP),
    run="|".join(re.escape(r) for r in RUNS),
    # "" for the experiment's own stages, "<run>/" for a run's
    scope="|".join(
        ["", *(re.escape(r) + "/" for r in RUNS), *map(re.escape, DATA_SCOPES)]
    ),
    # empty or a slash and <task> (loaded data), or <task>/<model>-len<L> (tokens)
    # ("(?:)": an empty constraint would mean Snakemake's default, ".+")
    dkey="|".join(
        ["(?:)", *(re.escape(data_key(s)) for s in DATA_SCOPES if s.count("/") == 2)]
    ),
    tkey="|".join(
        ["(?:)", *(re.escape(data_key(s)) for s in DATA_SCOPES if s.count("/") == 3)]
    ),
    stage="|".join(stages.SHARED_STAGES + stages.RUN_STAGES),


def register_node_count():
    """With a hostfile, the `nodes` resource counts its nodes: each training
    (and environment check) takes its own `nodes` of them, so that runs that
    need fewer run side by side, each on nodes it leases at launch
    (workflow/scripts/launch/lease.py). Returns that count (None: no hostfile)."""
    dist = CONFIG["distributed"]
    if not resources.leasing(dist):
        return None
    count = len(read_hostfile(dist["hostfile"]))
    if "nodes" not in workflow.global_resources:  # --resources nodes=N wins
        workflow.register_resource("nodes", count)
    return count


HOSTFILE_NODES = register_node_count()
# Steps that need the whole cluster to themselves (the plan's measurements,
# tuning, node set-up) hold every node.
ALL_NODES = HOSTFILE_NODES or 1
if workflow.is_main_process and len(RUNS) > 1:
    print(
        "sweep: "
        + resources.packing(
            CONFIG["distributed"],
            [r["distributed"]["nodes"] for r in RUNS.values()],
            HOSTFILE_NODES,
        ),
        file=sys.stderr,
    )


def scoped_config(scope):
    """The experiment's config (scope ""), one run's (scope "<run>/") or a
    data set's (scope "data/<task>/" or "data/<task>/<model>-len<L>/")."""
    if scope in DATA_SCOPES:
        return DATA_SCOPES[scope]
    return RUNS[scope.rstrip("/")] if scope else CONFIG


def data_config(key, stage):
    """The config slice of a data set's stage (key "" = the experiment's)."""
    return (
        f"{RESULTS}/data{key}/config/{stage}.json"
        if key
        else f"{RESULTS}/config/{stage}.json"
    )


def raw_of(run):
    return f"{RESULTS}/data/{sweeps.data_key(RUNS[run], SPLIT_DATA)}raw"


def tokens_of(run):
    return f"{RESULTS}/data/{sweeps.tokens_key(RUNS[run], SPLIT_DATA)}tokenized"


def raw_for_tokens(tkey):
    """The loaded data a tokenized set is made from (its key's <task> part)."""
    task = tkey.split(os.sep)[1] if tkey else ""
    return f"{RESULTS}/data/{task}/raw" if task else f"{RESULTS}/data/raw"


def run_raw(wildcards):
    """The loaded data a run evaluates on (shared by the runs of its task)."""
    return raw_of(wildcards.run)


def run_tokens(wildcards):
    """The tokenized data a run trains on (shared by task, model and length)."""
    return tokens_of(wildcards.run)


def stage_content(wildcards):
    return stages.stage_json(wildcards.stage, scoped_config(wildcards.scope))


def write_stage_config(output, content, log):
    with open(output, "w") as handle:
        print(content, file=handle)
    with open(log, "w") as handle:
        print(f"wrote {output}", file=handle)


def run_dirs():
    return [f"{RESULTS}/{run}" for run in RUNS]


def local_data_files(wildcards):
    return list(cfg.data_files(scoped_config(data_scope(wildcards.dkey))).values())


def demo_glue_files():
    """Every swept task's train and dev files in the demo's GLUE archive folder."""
    files = (cfg.data_files(run).values() for run in RUNS.values())
    return sorted({f for run_files in files for f in run_files})


def data_scope(key):
    """A key (a slash and <task>) -> the scope data/<task>/ (its config slice)."""
    return f"data{key}/" if key else ""


# Every Hub model of the experiment, by the folder it is fetched to.
HUB_MODELS = {
    model_key(run["model"]): run["model"]
    for run in RUNS.values()
    if is_hub_id(run["model"])
}


def fetched_model_of(config):
    """The fetched copy of a config's Hub model (rule data_fetch_model); nothing for a local one."""
    return [fetched_dir(EXP, config["model"])] if is_hub_id(config["model"]) else []


def tokens_config(tkey):
    """The config of a tokenized data set (key "" = the experiment's)."""
    return scoped_config(f"data{tkey}/") if tkey else CONFIG


def tuned_layout(wildcards):
    """The tuning result, a real input of runs with `threads_per_process: tuned`."""
    if RUNS[wildcards.run]["distributed"]["threads_per_process"] == "tuned":
        return f"{RESULTS}/tune/layout.json"
    return []


def machine_cores():
    """The cores for a step that takes the whole machine (--cores of a local
    run). A cluster executor has no total; the steps that stay on this node
    get its --local-cores, submitted jobs are sized by cpus_per_task."""
    settings = workflow.resource_settings
    return settings.cores or settings.local_cores or 1


def training_retries():
    """distributed.retries, counted and resubmitted by the main process only.
    The process inside a Slurm job would otherwise retry in the same
    allocation, which may be at its time limit (whose SIGTERM stopped the try)."""
    return CONFIG["distributed"]["retries"] if workflow.is_main_process else 0


def dist_of(wildcards):
    return RUNS[wildcards.run]["distributed"]


def quantizing(run):
    """quantization.enabled auto or true: the OpenVINO and INT8 rules are part of the run."""
    return RUNS[run]["quantization"]["enabled"] is not False


def deploy_inputs(wildcards):
    """What deploy_model chooses from: eval_runtimes.json and every candidate's
    folder, or without quantization eval_fp32.json and the fine-tuned model."""
    run_dir = f"{RESULTS}/{wildcards.run}"
    if not quantizing(wildcards.run):
        return {"evaluation": f"{run_dir}/eval_fp32.json", "model": f"{run_dir}/model"}
    folders = ("model", "model_openvino", "model_int8")
    return {
        "evaluation": f"{run_dir}/eval_runtimes.json",
        **{f: f"{run_dir}/{f}" for f in folders},
    }


def runtime_evaluations(wildcards):
    """The side-by-side evaluations of the runs that quantize (the summary reads them)."""
    return [f"{RESULTS}/{run}/eval_runtimes.json" for run in RUNS if quantizing(run)]


# The scaling plan (docs/scaling-plan.md): the run with the most nodes is where
# the network between the nodes is measured.
WIDEST_RUN = max(RUNS, key=lambda r: RUNS[r]["distributed"]["nodes"])


def plan_network(wildcards):
    """The measured network, when the plan measures one (plan.measure_network;
    auto: a hostfile run on 2 or more nodes, not under Slurm)."""
    measure = CONFIG["plan"]["measure_network"]
    dist = RUNS[WIDEST_RUN]["distributed"]
    hostfile_run = dist["nodes"] > 1 and dist.get("launcher") != "srun"
    if measure is True or (measure == "auto" and hostfile_run):
        return f"{RESULTS}/plan/network.json"
    return []


def table_outputs():
    """The accuracy table, in `rule all` when the sweep varies task or seed."""
    if not glue_table.wanted(CONFIG.get("sweep")):
        return []
    return [
        f"{RESULTS}/table.md",
        f"{RESULTS}/table.csv",
        f"{RESULTS}/report/table.html",
    ]


def plan_outputs():
    """The plan's files, in `rule all` when plan.report is set."""
    if not CONFIG["plan"]["report"]:
        return []
    return [f"{RESULTS}/plan/plan.{ext}" for ext in ("json", "md", "html", "png")]
