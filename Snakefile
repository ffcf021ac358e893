# cpuddp: fine-tune Hugging Face models with DDP on CPU machines.
# Wiring only: the rules live in workflow/rules, the code in workflow/scripts.
import os

from snakemake.utils import min_version

min_version("9.0")

configfile: os.path.join(workflow.basedir, "config.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/env.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        f"{RESULTS}/summary.json",
    default_target: True
