"""Whose model code a run trains (train.model_code), decided once as the
model is built: cpuddp's own encoder of the BERT family (train/encoder/:
packed tokens, its levers chosen as it is built) or the model as
transformers builds it (with the exact levers that replace no forward,
train/speed.py). The run line says which, and why; the checkpoint's
fingerprint keeps it (the two paths' parameter names differ)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from workflow.scripts.common import tasks
from workflow.scripts.common.errors import UserError
from workflow.scripts.common.modeling import fit_tokenizer, head_settings, load_model
from workflow.scripts.train import encoder
from workflow.scripts.train.encoder.weights import WEIGHTS_FILE


@dataclass(frozen=True)
class Choice:
    code: str
    """cpuddp or transformers: the path taken."""
    why: str
    """One line: the setting, or what auto saw."""
    built: str = ""
    """What the build picked (the encoder's weights, its dropout), for the log."""

    def line(self) -> str:
        return f"model code: {self.code} ({self.why})" + (f"; {self.built}" if self.built else "")

    def as_dict(self) -> dict:
        return {"model_code": self.code, "model_code_reason": self.why, "model_built": self.built}


def load(setting: str, name: str, task: tasks.Task, tokenizer, ipex: bool, levers, lora: bool = False,
         trust_remote_code: bool = False) -> tuple[object, Choice]:
    """(the model to train, the choice) for the model folder or Hub id `name`.
    cpuddp's encoder reads a local folder's model.safetensors itself, so the
    rank never imports transformers' model code (about 2 s of a rank's start
    to its first step, measured 2026-11-29); every other case loads through
    transformers and build."""
    kind = "qa" if task.is_qa else "classification"
    if setting != "transformers" and not lora and not ipex and (Path(name) / WEIGHTS_FILE).is_file():
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(name, trust_remote_code=trust_remote_code, **head_settings(task))
        if encoder.why_not(config, kind, trust_remote_code) is None and config.pad_token_id is not None:
            model, _ = encoder.build(name, kind, hash_dropout=_hash_dropout(levers), config=config)
            fit_tokenizer(model, tokenizer, name)
            return _chosen(model, setting, kind, levers)
    loaded = load_model(name, task, trust_remote_code, tokenizer)
    return build(setting, loaded, task.is_qa, ipex, levers, lora, trust_remote_code)


def build(setting: str, hf_model, is_qa: bool, ipex: bool, levers, lora: bool = False,
          trust_remote_code: bool = False) -> tuple[object, Choice]:
    """(the model to train, the choice) from the transformers model `hf_model`
    as load_model gave it; cpuddp asked for where it cannot serve: UserError.
    `lora`: train.lora is set (peft's adapters go on transformers' modules);
    `trust_remote_code`: the model was loaded with its own code (never the encoder's)."""
    kind = "qa" if is_qa else "classification"
    if setting == "transformers":
        return hf_model, Choice("transformers", "set in train.model_code")
    if lora:
        if setting == "cpuddp":
            raise UserError("train.model_code cpuddp cannot train train.lora (peft puts its adapters on "
                            "transformers' modules); set train.model_code auto or transformers")
        return hf_model, Choice("transformers", "auto: train.lora puts peft's adapters on transformers' modules")
    if ipex:  # IPEX replaces transformers' modules and saves through them (probes/intel.py)
        if setting == "cpuddp":
            raise UserError("train.model_code cpuddp cannot train under IPEX (it optimizes transformers' modules); "
                            "set train.ipex false or train.model_code transformers")
        return hf_model, Choice("transformers", "auto: IPEX optimizes transformers' modules")
    if hasattr(hf_model, "peft_config"):  # train.lora: peft's adapters wrap transformers' modules
        if setting == "cpuddp":
            raise UserError("train.model_code cpuddp cannot train LoRA adapters; set train.model_code auto")
        return hf_model, Choice("transformers", "auto: LoRA adapters (peft) wrap transformers' modules")
    why_not = encoder.why_not(hf_model.config, kind, trust_remote_code)
    model, why_not = (None, why_not) if why_not else encoder.build(hf_model, kind, hash_dropout=_hash_dropout(levers))
    if model is None:
        if setting == "cpuddp":
            raise UserError(f"train.model_code cpuddp: {why_not}; set train.model_code auto or transformers")
        return hf_model, Choice("transformers", f"auto: {why_not}")
    return _chosen(model, setting, kind, levers)


def _hash_dropout(levers) -> bool:
    return levers.dropout == "fast" and levers.dropout_mask == "hash"


def _chosen(model, setting: str, kind: str, levers) -> tuple[object, Choice]:
    model.encoder.first_token_only = model.encoder.reads_first_tokens and levers.last_layer == "first_token"
    why = "set in train.model_code" if setting == "cpuddp" else f"auto: the BERT family with a {kind} head"
    built = "; ".join(f"{name} {value}" for name, value in model.choices.items())
    return model, Choice("cpuddp", why, built)
