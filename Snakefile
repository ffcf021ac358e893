# cpuddp: fine-tune Hugging Face models with DDP on CPU machines.
# Wiring only: the rules live in workflow/rules, the code in workflow/scripts.
import os
import sys

from snakemake.utils import min_version

from workflow.scripts.settings import profiles

min_version("9.0")


configfile: os.path.join(workflow.basedir, "config.yaml")


# A profile's cluster file (profiles/xeon, profiles/slurm) comes after
# config.yaml but before experiment files and --config, which override it.
# A --config on the command line replaces the profile's `config:` list, so the
# profile is also read directly; jobs get the file through the environment.
CLUSTER = profiles.cluster_of(config, sys.argv)
if CLUSTER:
    os.environ[profiles.CLUSTER_ENV] = CLUSTER

    configfile: str(profiles.existing(CLUSTER, workflow.basedir))

    config["cluster"] = str(profiles.existing(CLUSTER, workflow.basedir))


include: "workflow/rules/common.smk"


# Every wildcard matches only what this experiment has (helpers/experiment.py).
wildcard_constraints:
    **X.wildcard_constraints(),


include: "workflow/rules/config.smk"
include: "workflow/rules/nodes.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/infer.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/plan.smk"


# On Slurm only the rules that launch ranks are submitted; the rest runs here.
workflow.localrules(*(r.name for r in workflow.rules if r.name not in MPI_RULES))


# The last line of a run that did something: where results/<experiment>/report.html is.
onsuccess:
    report_hint()


rule all:
    default_target: True
    input:
        rules.report_summary.output,
        X.plan_outputs(),
        X.table_outputs(),
        X.push_outputs(),
