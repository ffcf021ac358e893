"""Deployment step (deploy_model): results/<experiment>/<run>/deploy/ is the
model to ship, the fastest candidate that met the gates in evaluate_runtimes
(without quantization: the fine-tuned fp32 model), with its tokenizer and
`deploy.json` beside it: runtime, precision, shapes, where it came from, why,
the CPU it was measured on and the measured numbers. Load it with two lines:

    from workflow.scripts.infer.deploy import load_deployed
    model, tokenizer = load_deployed("results/demo/default/deploy")

then `model(**tokenizer(a, b, return_tensors="pt")).logits` (or
`.start_logits` / `.end_logits` for SQuAD), whatever the runtime.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from workflow.scripts.common import card as model_card, tasks

from workflow.scripts.settings import step

from workflow.scripts.probes import hardware
from workflow.scripts.common.atomic import atomic_dir, read_json, write_json
from workflow.scripts.common.errors import UserError
from workflow.scripts.settings.views import DeployView
from workflow.scripts.infer import artifacts, policy

DEPLOY_FILE = policy.DEPLOY_FILE
SNAKEMAKE_MARKERS = (".snakemake",)  # .snakemake_timestamp of directory outputs
# Copied from the candidate's evaluation into deploy.json (besides its task metrics).
KEPT = ("runtime", "precision", "shapes", "buckets", "samples", "samples_per_second", "latency_ms_p50",
        "latency_ms_p99", "speedup_vs_eager", "speedup_vs_fp32_same_runtime", "timing")


def deployment(evaluation: dict, task: tasks.Task) -> dict:
    """deploy.json, from eval_runtimes.json, or from eval_fp32.json without quantization."""
    if "eval" in evaluation:
        name, why = evaluation["deploy"]["candidate"], evaluation["deploy"]["why"]
        entry, cpu = evaluation["eval"][name], evaluation["cpu"]["tag"]
    else:
        name, entry, why = "fp32", evaluation, "quantization.enabled false: the fine-tuned model as trained"
        cpu = evaluation.get("cpu") or hardware.cpu_tag(hardware.cpu_summary())
    metrics = {k: v for k, v in entry.items() if k.removesuffix("_mm") in task.metrics}
    return {"candidate": name, "label": policy.LABELS[name], "source": policy.FOLDERS[name], "why": why,
            "measured_on": cpu, "task": task.name, "outputs": list(artifacts.output_names(task)),
            **{k: entry.get(k) for k in KEPT}, "metrics": metrics}


def link_or_copy(source: Path, target: Path) -> None:
    """Every file of `source` into `target`: hard links where the filesystem allows, else copies.
    Snakemake's own markers are left out: it touches deploy/'s, which must not touch the source's."""
    for path in sorted(source.rglob("*")):
        if path.name.startswith(SNAKEMAKE_MARKERS):
            continue
        dest = target / path.relative_to(source)
        if path.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
            continue
        try:
            os.link(path, dest)
        except OSError:
            shutil.copy2(path, dest)


def deploy(evaluation: dict, folders: dict[str, str], out_dir, task_name: str, card=None) -> dict:
    """Fill `out_dir` (atomically) with the chosen model, its model card (`card(meta)`,
    a ModelCard) and deploy.json; return deploy.json."""
    meta = deployment(evaluation, tasks.get_task(task_name))
    source = folders.get(meta["candidate"])
    if not source or not Path(source).is_dir():
        raise UserError(f"deploy: the chosen model {meta['label']} has no folder ({source}); rerun the workflow")
    with atomic_dir(out_dir) as tmp:
        link_or_copy(Path(source), tmp)
        if card is not None:
            model_card.write(tmp, card(meta))  # replaces model/'s card (a new file, not through the link)
        write_json(tmp / DEPLOY_FILE, meta)  # last: its presence marks a finished deployment
    return meta


class _Autocast:
    """The eager model under the autocast it was measured with (bf16 where the run chose it)."""

    def __init__(self, model, precision: str):
        from workflow.scripts.common.modeling import autocast_for

        self.model, self.autocast = model, autocast_for(precision)

    def __call__(self, **batch):
        with self.autocast():
            return self.model(**batch)


def load_deployed(path, threads: int | None = None):
    """(model, tokenizer) of a deploy/ folder, the model called like a Hugging Face one."""
    from transformers import AutoTokenizer

    from workflow.scripts.infer import stacks  # torch and OpenVINO: here, not in the deploy step
    from workflow.scripts.infer.runtime import load_for_eval

    path = Path(path)
    meta = artifacts.read_meta(path, DEPLOY_FILE, "deploy_model", "deployment")
    tokenizer = AutoTokenizer.from_pretrained(path)
    if meta["runtime"] == "openvino":
        model = stacks.load_ir(path, meta["outputs"], meta["shapes"], meta["buckets"], tokenizer.pad_token_id,
                               threads)
    elif meta["candidate"] == "int8":  # the IPEX stack's TorchScript
        model = stacks.load_quantized(path, threads)
    else:
        model = _Autocast(load_for_eval(str(path), tasks.get_task(meta["task"])), meta["precision"])
    return model, tokenizer


def not_deployed(evaluation: dict, chosen: str) -> list[dict]:
    """The candidates measured beside the deployed one, and why each is not it; a candidate that was
    never made (not converted, not quantized) with the reason."""
    entries = evaluation.get("eval") or {}
    rows = []
    for name in policy.CANDIDATES:
        entry = entries.get(name)
        if name == chosen or (entry is None and "eval" not in evaluation):
            continue
        if entry is None:
            dropped = (evaluation.get("dropped") or {}).get(name)
            reason = (evaluation.get("quantization") or {}).get("reason") if name == "int8" else None
            why = f"not converted: {dropped}" if dropped else f"not made: {reason or 'not quantized'}"
            rows.append({"candidate": name, "why_not": why})
            continue
        rows.append({"candidate": name, **{k: entry.get(k) for k in ("runtime", "precision", "samples_per_second",
                                                                    "speedup_vs_eager")},
                     "why_not": policy.why_not(entry, chosen, entries[chosen])})
    return rows


def deploy_card(config: DeployView, environment: dict, evaluation: dict, name: str, model_dir=None):
    """meta -> the deployed folder's ModelCard: the deployed artifact's figures and metrics (deploy.json's),
    the candidates not deployed and why, the data, and the training as model/'s card tells it (LoRA as
    trained, the step that became the model), the CPU."""
    trained = model_card.read_sections(model_dir, (model_card.LORA_TITLE, model_card.RUN_TITLE))

    def make(meta: dict):
        task = tasks.for_data(config.task)
        note = (evaluation.get("quantization") or {}).get("note")
        section = model_card.deployment_section(meta, not_deployed(evaluation, meta["candidate"]), note)
        body = model_card.text(name, config.train.as_dict(), model_card.run_facts(environment), environment,
                               model_card.git_commit(), section, data=model_card.data_section(task, config.data))
        for title, content in trained.items():
            body = model_card.replace_section(body, title, content, before=model_card.HARDWARE_TITLE)
        return model_card.make_card(config.model, task, name, meta["metrics"], body, config.data)
    return make


def push(folder, repo_id: str, api=None) -> str:
    """Upload `folder` to the Hub model repo `repo_id` (created if missing); the commit's URL."""
    from huggingface_hub import HfApi

    api = api or HfApi()
    api.create_repo(repo_id, repo_type="model", exist_ok=True)
    info = api.upload_folder(repo_id=repo_id, folder_path=str(folder), repo_type="model",
                             commit_message="cpuddp deploy/", ignore_patterns=[".snakemake*"])
    return str(getattr(info, "commit_url", info))


def main(argv=None) -> None:
    parser = step.parser(__doc__.splitlines()[0], environment=True)
    parser.add_argument("--evaluation", required=True, help="eval_runtimes.json (or eval_fp32.json)")
    for name, folder in policy.FOLDERS.items():
        parser.add_argument(f"--{folder.replace('_', '-')}", dest=name, help=f"{policy.LABELS[name]} folder")
    parser.add_argument("--out", required=True, help="deploy folder to write")
    args = parser.parse_args(argv)
    folders = {name: getattr(args, name) for name in policy.FOLDERS}
    config, evaluation = step.read_view(args, DeployView), read_json(args.evaluation)
    name = f"{config.experiment or 'cpuddp'}-{Path(args.out).resolve().parent.name}"  # <experiment>-<run>
    card = deploy_card(config, read_json(args.environment), evaluation, name, folders.get("fp32"))
    meta = deploy(evaluation, folders, args.out, config.task, card)
    print(f"deploy: {args.out} holds {meta['label']} ({meta['why']}) {meta['measured_on']}")
    print("deploy: " + json.dumps(meta), file=sys.stderr)


if __name__ == "__main__":
    step.entry(main)
