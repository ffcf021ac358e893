# cpuddp: fine-tune Hugging Face models with DDP on CPU machines.
# Wiring only: the rules live in workflow/rules, the code in workflow/scripts.
import os
import sys

from snakemake.utils import min_version

min_version("9.0")

# Steps run as `python -m workflow.scripts.<step>`, from any working directory.
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (workflow.basedir, os.environ.get("PYTHONPATH")) if p
)
# `python` and `mpirun` in the rules are those of Snakemake's own environment
# (the .venv), even when it was not activated; --sdm conda puts its env first.
os.environ["PATH"] = os.pathsep.join((os.path.dirname(sys.executable), os.environ["PATH"]))


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
