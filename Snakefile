# cpuddp: fine-tune Hugging Face models with DDP on CPU machines.
# Wiring only: the rules live in workflow/rules, the code in workflow/scripts.
import os

from snakemake.utils import min_version

from workflow.scripts.common.hostfile import cluster_file

min_version("9.0")


configfile: os.path.join(workflow.basedir, "config.yaml")


# A profile's cluster file (profiles/xeon, profiles/slurm) comes after
# config.yaml but before experiment files and --config, which override it.
if config.get("cluster"):

    configfile: cluster_file(config["cluster"], workflow.basedir)


include: "workflow/rules/common.smk"
include: "workflow/rules/config.smk"
include: "workflow/rules/nodes.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/infer.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/plan.smk"


# On Slurm only the rules that launch ranks are submitted; the rest runs here.
workflow.localrules(*(r.name for r in workflow.rules if r.name not in MPI_RULES))


rule all:
    default_target: True
    input:
        rules.report_summary.output,
        plan_outputs(),
        table_outputs(),
