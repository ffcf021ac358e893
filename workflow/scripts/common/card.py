"""The model card (README.md) of a saved model folder: Hugging Face model-card
metadata (base_model, datasets, model-index with the task's official
metrics, library_name) and, in the text, the hyperparameters, the hardware
(CPU model and ISA flags), the cpuddp commit and, where there are any, the
int8 deploy figures. train/rank.py writes one into model/ (no evaluation
yet), infer/deploy.py into deploy/ (with the evaluation); `ModelCard.load`
reads either back.
"""

from __future__ import annotations

import os
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from workflow.scripts.common import tasks

CARD_FILE = "README.md"
LIBRARY = "transformers"
ROOT = Path(__file__).resolve().parents[3]
# Train settings the card lists (the rest are speed levers, not what a reader needs to reproduce the numbers).
HYPERPARAMETERS = ("epochs", "max_steps", "batch_size", "learning_rate", "weight_decay", "warmup_ratio",
                   "max_grad_norm", "max_seq_length", "seed", "precision")
HARDWARE = ("cpu_model", "sockets", "physical_cores", "isa_flags")
INT8_FIGURES = ("samples_per_second", "speedup_vs_fp32_same_runtime", "speedup_vs_eager", "accuracy_drop_points",
                "recommended", "recommendation")


def git_commit(root: Path = ROOT) -> str | None:
    """HEAD's commit of the checkout at `root`, read from .git's files (no git process); None outside one."""
    git = root / ".git"
    if git.is_file():  # a worktree: "gitdir: <path>"
        git = Path(git.read_text().split(":", 1)[1].strip())
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head
        ref = head.split(None, 1)[1]
        common = Path((git / "commondir").read_text().strip()) if (git / "commondir").is_file() else None
        for base in (git, git / common if common else None):
            if base is not None and (base / ref).is_file():
                return (base / ref).read_text().strip()
            packed = base / "packed-refs" if base is not None else None
            if packed is not None and packed.is_file():
                for line in packed.read_text().splitlines():
                    if line.endswith(" " + ref):
                        return line.split()[0]
    except OSError:
        return None
    return None


def base_model(model: str) -> str:
    """A Hub id as given; a local folder by its name (the Hub knows no local path)."""
    path = Path(model)
    if path.parent.name == "models" and path.parent.parent.name == "data":  # a Hub id's copy (model_copy.fetched_dir)
        return path.name.replace("--", "/")
    return Path(model).name if os.path.isdir(model) or model.startswith(("/", ".")) else model


def eval_results(task: tasks.Task, metrics: dict) -> list[EvalResult]:
    """model-index entries: each official metric of the task, on its validation split."""
    kind = "question-answering" if task.is_qa else "text-classification"
    results = []
    for key, value in metrics.items():
        name = key.removesuffix("_mm")
        if name not in task.metrics or not isinstance(value, (int, float)):
            continue
        split = "validation_mismatched" if key.endswith("_mm") else task.validation_splits[0]
        results.append(EvalResult(task_type=kind, dataset_type=task.hub_path or task.name,
                                  dataset_name=f"{task.name}", dataset_config=task.hub_config,
                                  dataset_split=split, metric_type=name, metric_value=value))
    return results


def card_data(model: str, task: tasks.Task, name: str, metrics: dict | None) -> ModelCardData:
    return ModelCardData(base_model=base_model(model), datasets=[task.hub_path] if task.hub_path else None,
                         library_name=LIBRARY, model_name=name, tags=["cpuddp", task.name],
                         pipeline_tag="question-answering" if task.is_qa else "text-classification",
                         eval_results=eval_results(task, metrics or {}) or None)


def _table(rows: dict) -> str:
    return "\n".join(["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows.items() if v is not None)])


def text(name: str, train: dict, decisions: dict, hardware: dict, commit: str | None, extra: str = "") -> str:
    """The card's body below the metadata."""
    flags = hardware.get("isa_flags")
    shown = {**{k: hardware.get(k) for k in HARDWARE}, "isa_flags": " ".join(sorted(flags)) if flags else None}
    return "\n\n".join(part for part in (
        f"# {name}", "Fine-tuned with cpuddp (data-parallel PyTorch on CPUs).",
        "## Hyperparameters", _table({k: train.get(k) for k in HYPERPARAMETERS}),
        "## Training run", _table(decisions),
        "## Hardware", _table(shown),
        f"## Code\n\ncpuddp commit `{commit or 'unknown (not a git checkout)'}`", extra) if part) + "\n"


def int8_section(evaluation: dict, deployment: dict | None) -> str:
    """What deploy/ holds and the int8 figures measured beside fp32 (none without quantization)."""
    lines = []
    if deployment:
        lines.append(f"This folder holds {deployment['label']}: {deployment['why']} (measured on "
                     f"{deployment['measured_on']}).")
    int8 = (evaluation.get("eval") or {}).get("int8")
    if int8:
        lines.append(_table({k: int8.get(k) for k in INT8_FIGURES}))
    note = (evaluation.get("quantization") or {}).get("note")
    if note:
        lines.append(f"Quantization: {note}")
    return "## Deployment\n\n" + "\n\n".join(lines) if lines else ""


def make_card(model: str, task: tasks.Task, name: str, metrics: dict | None, body: str) -> ModelCard:
    return ModelCard(f"---\n{card_data(model, task, name, metrics).to_yaml()}\n---\n\n{body}")


def write(folder, card: ModelCard) -> Path:
    """README.md into `folder`, replaced atomically."""
    path = Path(folder) / CARD_FILE
    tmp = path.with_name(path.name + ".cpuddp-tmp")
    tmp.write_text(str(card), encoding="utf-8")
    os.replace(tmp, path)
    return path


def run_facts(decisions) -> dict:
    """The environment check's decisions a reader needs (settings/decisions.py RunDecisions, or its dict)."""
    get = decisions.get if isinstance(decisions, dict) else lambda k: getattr(decisions, k, None)
    nodes, ranks = get("nodes"), get("processes_per_node")
    return {"backend": get("backend"), "precision": get("precision"), "nodes": nodes, "processes_per_node": ranks,
            "world_size": nodes * ranks if nodes and ranks else get("world_size"),
            "threads_per_process": get("threads_per_process")}


def write_train_card(folder, cfg, decisions, cpu: dict) -> Path:
    """model/'s card at save time (train/rank.py): no evaluation yet. `cfg` is the train stage's view."""
    task, name = tasks.for_data(cfg.task), Path(folder).parent.name
    body = text(name, cfg.train.as_dict(), run_facts(decisions), cpu, git_commit())
    return write(folder, make_card(cfg.model, task, name, None, body))
