# Wiring shared by the rule files (the validated config and its runs,
# workflow/helpers/experiment.py), what is printed and registered when the
# workflow is parsed (`announce`), and the input functions of the rules.
# Stage files hold only rules.
import os
import sys

import snakemake.logging

from workflow.helpers import stages
from workflow.helpers.experiment import Experiment
from workflow.helpers.plan_lines import brief_dry_run, experiment_line, run_line
from workflow.helpers.snakemake_env import prepare_job_environment
from workflow.scripts.settings import config as cfg
from workflow.scripts.settings import layout
from workflow.scripts.settings.hostfile import read_hostfile
from workflow.scripts.settings.views import DistributedSettings
from workflow.scripts.launch import resources

prepare_job_environment(workflow.basedir)

# The main process (where the user typed the command) also asks the Hub, once,
# before any job: a job on a compute node parses this file again, often
# without a route to the Hub, and re-checks only what it answers alone.
try:
    X = Experiment(cfg.load_config(config))
    if workflow.is_main_process:
        cfg.check_hub(X.config)
except cfg.ConfigError as err:
    sys.exit(f"error: {err}")

CONFIG, EXP, RESULTS, RUNS, FIRST_RUN = X.config, X.name, X.results, X.runs, X.first_run
# Each run's distributed section, typed once (launch/resources.py reads it).
DISTRIBUTED = {run: DistributedSettings.of(r["distributed"]) for run, r in RUNS.items()}
# The rules that launch ranks on the nodes (Slurm submits only these).
MPI_RULES = ("environment_check", "train_ddp", "setup_nodes")


def announce():
    """What happens while the workflow is parsed, in one place. The main
    process prints one line per run (where and how it runs) and, for a
    dry run, Snakemake's job table only (plan_lines.py). With a hostfile,
    the `nodes` resource counts its nodes: each training and environment
    check takes its `nodes` of them, so that runs needing fewer run side by
    side, each on nodes it leases at launch (launch/lease.py). Returns that
    count, the `nodes` of a step that holds the whole cluster (tuning, the
    plan's measurements, node set-up)."""
    dist = DistributedSettings.of(CONFIG["distributed"])
    count = len(read_hostfile(dist.hostfile)) if resources.leasing(dist) else None
    if count and "nodes" not in workflow.global_resources:  # --resources nodes=N wins
        workflow.register_resource("nodes", count)
    if workflow.is_main_process:
        brief_dry_run(sys.argv, snakemake.logging.logger)
        for name, run in RUNS.items():
            print(run_line(name, run, RESULTS, CONFIG.get("cluster")), file=sys.stderr)
        print(experiment_line(EXP, len(RUNS), RESULTS), file=sys.stderr)
        if len(RUNS) > 1:
            nodes = [r["distributed"]["nodes"] for r in RUNS.values()]
            print(f"sweep: {resources.packing(dist, nodes, count)}", file=sys.stderr)
    return count or 1


ALL_NODES = announce()


# ------------------------------------------------------------ input functions


def stage_content(wildcards):
    return stages.stage_json(wildcards.stage, X.scoped_config(wildcards.scope))


def run_raw(wildcards):
    """The loaded data a run evaluates on (shared by the runs of its task)."""
    return X.raw_of(wildcards.run)


def run_tokens(wildcards):
    """The tokenized data a run trains on (shared by task, model and length)."""
    return X.tokens_of(wildcards.run)


def run_model(wildcards):
    """A run's fetched Hub model (nothing for a local one)."""
    return X.fetched_model_of(RUNS[wildcards.run])


def measured_layout(wildcards):
    """A run's measured layout (processes_per_node auto, settings/layout.py),
    a real input of its environment check; nothing when numbers fix it."""
    if layout.measured(RUNS[wildcards.run]["distributed"]):
        return f"{RESULTS}/{wildcards.run}/layout.json"
    return []


def dist_of(wildcards):
    return DISTRIBUTED[wildcards.run]


def deploy_inputs(wildcards):
    return X.deploy_inputs(wildcards.run)


def run_dirs():
    return [f"{RESULTS}/{run}" for run in RUNS]


def optional_charts():
    """The report's charts that say something for this experiment (render.py
    draws the same): the scaling chart with two runs or more, the evaluation
    during training where a run has evaluation.every."""
    charts = {}
    if len(RUNS) > 1:
        charts["scaling"] = report(
            f"{RESULTS}/report/scaling.png",
            caption="../report/scaling.rst",
            category="Scaling",
            labels={"chart": "speedup"},
        )
    if any((r.get("evaluation") or {}).get("every") for r in RUNS.values()):
        charts["evaluation"] = report(
            f"{RESULTS}/report/evaluation.png",
            caption="../report/evaluation.rst",
            category="Training",
            labels={"run": "evaluation during training"},
        )
    return charts


def report_hint():
    """The last line of a run that did something (Snakefile `onsuccess`):
    where its report is. A run with nothing to do names it when it starts
    (experiment_line)."""
    page = f"{RESULTS}/report.html"
    if os.path.isfile(page):
        print(f"Report: {page}", file=sys.stderr)


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


def write_stage_config(output, content, log):
    with open(output, "w") as handle:
        print(content, file=handle)
    with open(log, "w") as handle:
        print(f"wrote {output}", file=handle)
