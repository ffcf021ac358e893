"""Parameter names between transformers' checkpoints of the BERT family
and cpuddp's encoder, both ways, from one table; and the checkpoint files
read and written directly (safetensors and config.json), so that a rank
never imports transformers' model code (about 2 s of a rank's start to
its first step, measured 2026-11-29)."""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from workflow.scripts.train.encoder.spec import Spec

# Our name (after encoder.) -> transformers' name (after the base model prefix), BERT-style and DistilBERT.
EMBEDDINGS = {"word": "embeddings.word_embeddings", "position": "embeddings.position_embeddings",
              "token_type": "embeddings.token_type_embeddings", "norm": "embeddings.LayerNorm",
              "project": "embeddings_project"}
LAYER = {"query": "attention.self.query", "key": "attention.self.key", "value": "attention.self.value",
         "attention_output": "attention.output.dense", "attention_norm": "attention.output.LayerNorm",
         "ffn_in": "intermediate.dense", "ffn_out": "output.dense", "ffn_norm": "output.LayerNorm"}
DISTILBERT_LAYER = {"query": "attention.q_lin", "key": "attention.k_lin", "value": "attention.v_lin",
                    "attention_output": "attention.out_lin", "attention_norm": "sa_layer_norm",
                    "ffn_in": "ffn.lin1", "ffn_out": "ffn.lin2", "ffn_norm": "output_layer_norm"}
# model_type -> the name its transformers classes start with.
CLASS = {"bert": "Bert", "roberta": "Roberta", "xlm-roberta": "XLMRoberta", "camembert": "Camembert",
         "electra": "Electra", "distilbert": "DistilBert"}
HEAD_CLASS = {"classification": "ForSequenceClassification", "qa": "ForQuestionAnswering"}
WEIGHTS_FILE = "model.safetensors"
# Our head's modules -> transformers' names (from the model's root), per family and task.
HEAD = {("bert", "classification"): {"dense": "{prefix}.pooler.dense", "out": "classifier"},
        ("roberta", "classification"): {"dense": "classifier.dense", "out": "classifier.out_proj"},
        ("electra", "classification"): {"dense": "classifier.dense", "out": "classifier.out_proj"},
        ("distilbert", "classification"): {"dense": "pre_classifier", "out": "classifier"}}


def transformers_name(ours: str, spec: Spec, prefix: str) -> str:
    """transformers' name of our parameter `ours` (encoder.layers.3.query.weight, head.out.bias ...)."""
    part, rest = ours.split(".", 1)
    if part == "head":
        module, leaf = rest.split(".", 1)
        table = HEAD.get((spec.kind, spec.task), {"out": "qa_outputs"})
        return f"{table[module].format(prefix=prefix)}.{leaf}"
    group, rest = rest.split(".", 1)
    if group == "embeddings":
        module, leaf = rest.split(".", 1)
        return f"{prefix}.{EMBEDDINGS[module]}.{leaf}"
    index, module, leaf = rest.split(".", 2)
    layer = DISTILBERT_LAYER if spec.kind == "distilbert" else LAYER
    stack = "transformer.layer" if spec.kind == "distilbert" else "encoder.layer"
    return f"{prefix}.{stack}.{index}.{layer[module]}.{leaf}"


def names(model, prefix: str) -> dict[str, str]:
    """Our parameter names -> transformers'."""
    return {ours: transformers_name(ours, model.spec, prefix) for ours in model.state_dict()}


def load_transformers_state(model, hf_model) -> None:
    """Our parameters from a transformers model of the same config (values and requires_grad);
    every transformers parameter must find its place."""
    mapping = names(model, hf_model.base_model_prefix)
    theirs = hf_model.state_dict()
    unused = set(theirs) - set(mapping.values())
    missing = [hf for hf in mapping.values() if hf not in theirs]
    if unused or missing:
        raise ValueError(f"{type(hf_model).__name__}: no place for {sorted(unused)[:5]}, none of {missing[:5]}")
    model.load_state_dict({ours: theirs[hf] for ours, hf in mapping.items()})
    frozen = {n for n, p in hf_model.named_parameters() if not p.requires_grad}
    for ours, parameter in model.named_parameters():
        parameter.requires_grad_(mapping[ours] not in frozen)


def class_name(config, task: str) -> str:
    """transformers' class of this config with the task's head (BertForSequenceClassification ...)."""
    return CLASS[config.model_type] + HEAD_CLASS[task]


def read_folder(model, folder) -> bool:
    """Our parameters from `folder`'s model.safetensors as transformers'
    from_pretrained sets them: checkpoint names with or without the base
    model prefix (a base model's folder), each tensor's value as saved, a
    head the checkpoint lacks (a new classifier, BERT's pooler) started
    as transformers starts a new Linear, from the current torch seed.
    False, with nothing changed, where the folder is not of that layout
    (an encoder weight missing, a shape that differs): the caller loads
    through transformers, which says what is wrong."""
    from safetensors import safe_open

    path = Path(folder) / WEIGHTS_FILE
    if not path.is_file():  # none, or sharded: transformers reads those
        return False
    prefix, shapes = model.spec.kind, {name: value.shape for name, value in model.state_dict().items()}
    with safe_open(path, "pt") as weights:
        keys = set(weights.keys())
        found, missing = {}, []
        for ours, hf in names(model, prefix).items():
            bare = hf.removeprefix(prefix + ".")
            if hf in keys:
                found[ours] = hf
            elif bare != hf and bare in keys:
                found[ours] = bare
            else:
                missing.append(ours)
        if any(not name.startswith("head.") for name in missing):
            return False
        values = {ours: weights.get_tensor(key) for ours, key in found.items()}
    if any(values[ours].shape != shapes[ours] for ours in values):
        return False
    with torch.no_grad():
        model.load_state_dict(values, strict=False)
        for module in dict.fromkeys(name.rsplit(".", 1)[0] for name in missing):  # in the head's order
            layer = model.get_submodule(module)  # transformers' _init_weights for a Linear
            layer.weight.normal_(mean=0.0, std=model.config.initializer_range)
            layer.bias.zero_()
    return True


def write_folder(model, folder) -> None:
    """config.json and model.safetensors (fp32) as transformers' save_pretrained
    writes them for this model with its head: AutoModelFor*.from_pretrained loads
    the folder unchanged."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = copy.deepcopy(model.config)
    if model.spec.task == "classification" and model.head.problem_type and not config.problem_type:
        config.problem_type = model.head.problem_type
    config.architectures = [class_name(config, model.spec.task)]
    config.dtype = "float32"
    config.save_pretrained(folder)
    mapping = names(model, model.spec.kind)
    tensors = {mapping[ours]: value.detach().float().contiguous() for ours, value in model.state_dict().items()}
    save_file(tensors, str(folder / WEIGHTS_FILE), metadata={"format": "pt"})


def transformers_class(config, task: str):
    import transformers

    auto = transformers.AutoModelForQuestionAnswering if task == "qa" else \
        transformers.AutoModelForSequenceClassification
    return auto


@torch.no_grad()
def to_transformers(model):
    """A transformers model (fp32) holding our parameters' values."""
    config = model.config
    if model.spec.task == "classification" and model.head.problem_type and not config.problem_type:
        config.problem_type = model.head.problem_type
    hf = transformers_class(config, model.spec.task).from_config(config, dtype=torch.float32)
    mapping = names(model, hf.base_model_prefix)
    hf.load_state_dict({mapping[ours]: value.float() for ours, value in model.state_dict().items()}, strict=True)
    return hf
