"""The experiment behind the rule files: its validated configuration, its
runs, where each run's data and tokens live, and what `rule all` and the
deploy, plan and table rules ask for. common.smk builds one `Experiment`
when the workflow is parsed; the input functions there read from it.

Paths: a sweep over task, model or length keeps data per task and tokens per
task, model and length under results/<experiment>/data/<key>/, each with its
own config slice (scope "data/<key>/"); otherwise the experiment has one copy
(key ""). A key is empty or a slash and <task> (loaded data), or a slash and
<task>/<model>-len<L> (tokens).
"""

from __future__ import annotations

import os
import re

from workflow.helpers import stages
from workflow.scripts.settings import config as cfg
from workflow.scripts.settings import sweep as sweeps
from workflow.scripts.data.model_copy import fetched_dir, is_hub_id, model_key
from workflow.scripts.report import glue_table

NEVER = "(?!)"  # a wildcard constraint that matches nothing


class Experiment:
    def __init__(self, config: dict):
        self.config = config
        self.name = config["experiment"]
        self.results = f"results/{self.name}"
        self.runs = cfg.runs(config)
        self.first_run = next(iter(self.runs))  # the baseline of a sweep
        self.split_data = sweeps.per_data(config)
        self.data_scopes = sweeps.data_scopes(config, self.runs)
        # Every Hub model of the experiment, by the folder it is fetched to.
        self.hub_models = {model_key(r["model"]): r["model"] for r in self.runs.values() if is_hub_id(r["model"])}
        # The scaling plan measures the network where the run has the most nodes.
        self.widest_run = max(self.runs, key=lambda r: self.runs[r]["distributed"]["nodes"])

    # ------------------------------------------------------------ wildcards

    def wildcard_constraints(self) -> dict[str, str]:
        scopes = [s for s in self.data_scopes]
        return {
            "experiment": re.escape(self.name),
            "run": "|".join(map(re.escape, self.runs)),
            # "" for the experiment's own stages, "<run>/" for a run's
            "scope": "|".join(["", *(re.escape(r) + "/" for r in self.runs), *map(re.escape, scopes)]),
            # "(?:)": an empty constraint would mean Snakemake's default, ".+"
            "dkey": "|".join(["(?:)", *(re.escape(data_key(s)) for s in scopes if s.count("/") == 2)]),
            "tkey": "|".join(["(?:)", *(re.escape(data_key(s)) for s in scopes if s.count("/") == 3)]),
            "mkey": "|".join(map(re.escape, self.hub_models)) or NEVER,
            "stage": "|".join((*stages.SHARED_STAGES, *stages.RUN_STAGES)),
        }

    # ------------------------------------------------------------ config slices and data

    def scoped_config(self, scope: str) -> dict:
        """The experiment's config (scope ""), one run's (scope "<run>/") or a
        data set's (scope "data/<task>/" or "data/<task>/<model>-len<L>/")."""
        if scope in self.data_scopes:
            return self.data_scopes[scope]
        return self.runs[scope.rstrip("/")] if scope else self.config

    def data_config(self, key: str, stage: str) -> str:
        """The config slice of a data set's stage (key "" = the experiment's)."""
        return f"{self.results}/data{key}/config/{stage}.json" if key else f"{self.results}/config/{stage}.json"

    def raw_of(self, run: str) -> str:
        return f"{self.results}/data/{sweeps.data_key(self.runs[run], self.split_data)}raw"

    def tokens_of(self, run: str) -> str:
        return f"{self.results}/data/{sweeps.tokens_key(self.runs[run], self.split_data)}tokenized"

    def raw_for_tokens(self, tkey: str) -> str:
        """The loaded data a tokenized set is made from (its key's <task> part)."""
        task = tkey.split(os.sep)[1] if tkey else ""
        return f"{self.results}/data/{task}/raw" if task else f"{self.results}/data/raw"

    def tokens_config(self, tkey: str) -> dict:
        """The config of a tokenized data set (key "" = the experiment's)."""
        return self.scoped_config(f"data{tkey}/") if tkey else self.config

    def local_data_files(self, dkey: str) -> list[str]:
        return list(cfg.data_files(self.scoped_config(f"data{dkey}/" if dkey else "")).values())

    def fetched_model_of(self, config: dict) -> list[str]:
        """The fetched copy of a config's Hub model (rule data_fetch_model); nothing for a local one."""
        return [fetched_dir(self.name, config["model"])] if is_hub_id(config["model"]) else []

    # ------------------------------------------------------------ the demo's generated files

    def demo_files(self) -> list[str]:
        """What data_generate_demo writes: every swept task's files in the
        demo's GLUE archive folder, or the train and validation files; none
        without data.generate (nothing then asks for the rule)."""
        data = self.config["data"] or {}
        if not data.get("generate"):
            return []
        files = (cfg.data_files(run).values() for run in self.runs.values())
        return sorted({f for run_files in files for f in run_files})

    def demo_args(self) -> list[str]:
        data = self.config["data"] or {}
        if not data.get("generate"):
            return []
        settings = data["generate"]
        if data.get("glue_dir"):
            tasks = ",".join(dict.fromkeys(r["task"] for r in self.runs.values()))
            where = ["--task", "glue", "--tasks", tasks, "--out", data["glue_dir"]]
        else:
            where = ["--task", self.config["task"], "--out", os.path.dirname(data["train"]) or "."]
        return [*where, "--train", str(settings["train"]), "--dev", str(settings["validation"]),
                "--seed", str(settings["seed"])]

    # ------------------------------------------------------------ a run's later stages

    def quantizing(self, run: str) -> bool:
        """quantization.enabled auto or true: the OpenVINO and INT8 rules are part of the run."""
        return self.runs[run]["quantization"]["enabled"] is not False

    def deploy_inputs(self, run: str) -> dict:
        """What deploy_model chooses from: eval_runtimes.json and every candidate's
        folder, or without quantization eval_fp32.json and the fine-tuned model."""
        run_dir = f"{self.results}/{run}"
        if not self.quantizing(run):
            return {"evaluation": f"{run_dir}/eval_fp32.json", "model": f"{run_dir}/model"}
        folders = ("model", "model_openvino", "model_int8")
        return {"evaluation": f"{run_dir}/eval_runtimes.json", **{f: f"{run_dir}/{f}" for f in folders}}

    def runtime_evaluations(self) -> list[str]:
        """The side-by-side evaluations of the runs that quantize (the summary reads them)."""
        return [f"{self.results}/{run}/eval_runtimes.json" for run in self.runs if self.quantizing(run)]

    def plan_network(self) -> list[str]:
        """The measured network, when the plan measures one (plan.measure_network;
        auto: a hostfile run on 2 or more nodes, not under Slurm)."""
        measure = self.config["plan"]["measure_network"]
        dist = self.runs[self.widest_run]["distributed"]
        hostfile_run = dist["nodes"] > 1 and dist.get("launcher") != "srun"
        return [f"{self.results}/plan/network.json"] if measure is True or (measure == "auto" and hostfile_run) \
            else []

    def table_outputs(self) -> list[str]:
        """The accuracy table, in `rule all` when the sweep varies task or seed."""
        if not glue_table.wanted(self.config.get("sweep")):
            return []
        return [f"{self.results}/table.md", f"{self.results}/table.csv", f"{self.results}/report/table.html"]

    def push_outputs(self) -> list[str]:
        """Each run's upload (deploy.push_to_hub), in `rule all`: its own rule, so a failed upload keeps deploy/."""
        return [f"{self.results}/{run}/pushed.json" for run, config in self.runs.items()
                if config["deploy"]["push_to_hub"]]

    def plan_outputs(self) -> list[str]:
        """The plan's files, in `rule all` when plan.report is set."""
        if not self.config["plan"]["report"]:
            return []
        return [f"{self.results}/plan/plan.{ext}" for ext in ("json", "md", "html", "png")]


def data_key(scope: str) -> str:
    """The scope data/<task>/ -> the key of its paths, a slash and <task>."""
    return f"{os.sep}{scope[len('data/'):].rstrip('/')}"
