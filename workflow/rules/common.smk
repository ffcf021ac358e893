# Helpers shared by the rules: the validated config, its runs, and the input
# functions and resources of the rules. Stage files hold only rules.
import json
import re
import sys

import snakemake.logging

from workflow.scripts.common import config as cfg
from workflow.scripts.common.plan_lines import brief_dry_run, experiment_line, run_line
from workflow.scripts.common import stages
from workflow.scripts.common.model_copy import fetched_dir, is_hub_id
from workflow.scripts.common.snakemake_env import prepare_job_environment
from workflow.scripts.launch import resources

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
# The rules that launch ranks on the nodes (Slurm submits only these).
MPI_RULES = ("environment_check", "train_ddp", "setup_nodes")


wildcard_constraints:
    experiment=re.escape(EXP),
    run="|".join(re.escape(r) for r in RUNS),
    # "" for the experiment's own stages, "<run>/" for a run's
    scope="|".join(["", *(re.escape(r) + "/" for r in RUNS)]),
    stage="|".join(stages.SHARED_STAGES + stages.RUN_STAGES),


def scoped_config(scope):
    """The experiment's config (scope "") or one run's (scope "<run>/")."""
    return RUNS[scope.rstrip("/")] if scope else CONFIG


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
    return list(cfg.data_files(CONFIG).values())


def fetched_model(wildcards):
    """The fetched copy of a Hub model (rule data_fetch_model); nothing for a local one."""
    return [fetched_dir(EXP)] if is_hub_id(CONFIG["model"]) else []


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


def plan_outputs():
    """The plan's files, in `rule all` when plan.report is set."""
    if not CONFIG["plan"]["report"]:
        return []
    return [f"{RESULTS}/plan/plan.{ext}" for ext in ("json", "md", "html", "png")]
