"""train.lora: LoRA adapters through peft, put in place once as the model is
built (train/state.build, right after the model code is chosen), never by
replacing a forward. The model's weights are frozen; the adapters on the
target modules and the task's head (peft's modules_to_save) train, so the
optimizer, bf16_master's masters and DDP's buckets hold only those (DDP
leaves parameters without requires_grad out of its buckets). Checkpoints
hold the wrapped model's whole state_dict, so a resume is exact. The saved
model has the adapters merged (a plain transformers model) or, with
`merge: false`, is peft's adapter folder over the base model."""

from __future__ import annotations

import os

from workflow.scripts.common.errors import UserError

# Names of the attention's query and value projections where peft's table has no entry.
FALLBACK = (("q_proj", "v_proj"), ("query", "value"), ("q_lin", "v_lin"), ("c_attn",), ("Wqkv",))


def _module_names(model) -> set[str]:
    return {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}


def target_modules(setting, model) -> tuple[list[str], str]:
    """(the module names that get adapters, where they come from) for
    lora.target_modules: a list as given, or auto: peft's table for the
    architecture, else the first of FALLBACK the model has."""
    names = _module_names(model)
    if setting != "auto":
        missing = [n for n in setting if n not in names]
        if missing:
            raise UserError(f"train.lora.target_modules {', '.join(missing)} not found in the model "
                            f"({model.config.model_type}); use auto or names of its linear layers")
        return list(setting), "as set"
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as TABLE

    kind = model.config.model_type
    if kind in TABLE and set(TABLE[kind]) <= names:
        return list(TABLE[kind]), f"auto: peft's table for {kind}"
    for pair in FALLBACK:
        if set(pair) <= names:
            return list(pair), f"auto: the attention's projections of {kind}"
    raise UserError(f"train.lora.target_modules auto: no attention projections known for {kind}; "
                    "set train.lora.target_modules to names of its linear layers")


def head_modules(model) -> list[str]:
    """The task's head: every child with parameters outside the encoder (it trains in full)."""
    return [name for name, child in model.named_children()
            if name != model.base_model_prefix and any(True for _ in child.parameters())]


def apply(model, lora) -> tuple[object, str | None]:
    """(the model to train, the log line) for train.lora (None: the model as it was)."""
    if lora is None:
        return model, None
    from peft import LoraConfig, get_peft_model

    targets, why = target_modules(lora.target_modules, model)
    head = head_modules(model)
    config = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout, target_modules=targets,
                        modules_to_save=head or None)
    wrapped = get_peft_model(model, config)
    trainable, total = wrapped.get_nb_trainable_parameters()
    return wrapped, (f"lora: r {lora.r}, alpha {lora.alpha:g}, dropout {lora.dropout:g} on {', '.join(targets)} "
                     f"({why}); head {', '.join(head) or 'none'} trains in full; {trainable:,} of {total:,} "
                     f"parameters train ({100 * trainable / total:.2f}%)")


def is_wrapped(model) -> bool:
    from peft import PeftModel

    return isinstance(model, PeftModel)


def described(model, lora) -> dict | None:
    """train.lora as trained, for the model card: r, alpha, dropout, the modules that got adapters (auto
    resolved), merged or not. Call before `saved` merges them away."""
    if lora is None or not is_wrapped(model):
        return None
    return {"r": lora.r, "alpha": lora.alpha, "dropout": lora.dropout, "merge": lora.merge,
            "target_modules": sorted(model.peft_config["default"].target_modules)}


def saved(model, lora):
    """What save_pretrained writes: the adapters merged into a plain
    transformers model (merge true, in place: call after the last
    checkpoint), or the PeftModel itself (its adapter folder)."""
    if lora is None or not is_wrapped(model):
        return model
    if lora.merge:
        return model.merge_and_unload()
    base = model.peft_config["default"].base_model_name_or_path
    if base and os.path.isdir(base):  # evaluation finds the base from the run's folder too
        model.peft_config["default"].base_model_name_or_path = os.path.abspath(base)
    return model
