"""Typed views of the configuration, built from the schema (settings/schema.py).

One frozen dataclass per schema section (`SECTIONS`) and one per stage: the
keys of the slice it reads (`STAGE_KEYS`; workflow/helpers/stages.py cuts the slices
with the same table). A step turns its slice into its view once, in
`step.read_view`, and passes the view down; nothing below an entry point
turns a mapping back into a view.

Adding a setting: its entry in the schema (type, default, description), the
code that reads it (`view.section.key`), and a test (docs/architecture.md).
"""

from __future__ import annotations

import dataclasses

from workflow.scripts.settings.levers import Levers
from workflow.scripts.settings.schema import SCHEMA, View, derive, section_schema

BestModel = derive("BestModel", section_schema("train", "best_model"), {}, module=__name__)
EarlyStopping = derive("EarlyStopping", section_schema("train", "early_stopping"), {}, module=__name__)
Lora = derive("Lora", section_schema("train", "lora"), {}, module=__name__)
_NESTED = {"speed": Levers,  # train.speed: the levers, typed with their rules (settings/levers.py)
           "best_model": BestModel, "early_stopping": EarlyStopping, "lora": Lora}

DataFiles = derive("DataFiles", section_schema("data"), {}, skip=("generate",), module=__name__)
TrainSettings = derive("TrainSettings", section_schema("train"), _NESTED, module=__name__)
EvaluationSettings = derive("EvaluationSettings", section_schema("evaluation"), {}, module=__name__)
DistributedSettings = derive("DistributedSettings", section_schema("distributed"), {}, module=__name__)
QuantizationSettings = derive("QuantizationSettings", section_schema("quantization"), {}, module=__name__)
PlanSettings = derive("PlanSettings", section_schema("plan"), {}, module=__name__)
DeploySettings = derive("DeploySettings", section_schema("deploy"), {}, module=__name__)
ReportSettings = derive("ReportSettings", section_schema("report"), {}, module=__name__)

SECTIONS = {"data": DataFiles, "train": TrainSettings, "evaluation": EvaluationSettings,
            "distributed": DistributedSettings, "quantization": QuantizationSettings, "plan": PlanSettings,
            "deploy": DeploySettings, "report": ReportSettings}

# The top-level keys each stage reads (its slice: workflow/helpers/stages.py).
STAGE_KEYS = {
    "data": ("task", "data"),
    "tokenize": ("task", "model", "trust_remote_code", "train"),
    "environment": ("distributed", "train"),
    "train": ("task", "model", "trust_remote_code", "train", "distributed", "evaluation", "report"),
    "evaluate": ("task", "data", "evaluation"),  # data: the model card names the files
    "convert": ("task",),
    "quantize": ("task", "quantization"),
    "runtimes": ("task", "evaluation", "quantization"),
    "plan": ("task", "model", "trust_remote_code", "experiment", "published", "sweep", "plan", "train",
             "distributed"),
    "deploy": ("experiment", "task", "data", "model", "train", "deploy"),
}


# The keys a stage reads of a section it does not read whole: its view's
# section has those fields alone, so that code reading another one fails
# at once instead of seeing the schema's default; workflow/helpers/stages.py
# cuts the slices with this table.
STAGE_SUBKEYS = {
    "tokenize": {"train": ("max_seq_length", "doc_stride")},
    "environment": {"train": ("precision", "ipex", "speed")},
}


class _SectionSlice(View):
    @classmethod
    def of(cls, value):
        """As View.of, keeping the stage's keys of a whole section (the
        configuration was validated whole: only the cut is left to do)."""
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if k in {f.name for f in dataclasses.fields(cls)}}
        return super().of(value)


class _DataStage(View):
    @classmethod
    def pick(cls, config):
        """As View.pick; a whole configuration's data.generate (how the demo
        makes its files) is not part of what the data stage reads."""
        if isinstance(config, dict) and isinstance(config.get("data"), dict):
            config = {**config, "data": {k: v for k, v in config["data"].items() if k != "generate"}}
        return super().pick(config)


def _stage_view(stage: str) -> type:
    name = f"{stage.capitalize()}View"
    bases = (_DataStage,) if stage == "data" else (View,)
    partial = {section: derive(f"{stage.capitalize()}{section.capitalize()}", section_schema(section), _NESTED,
                               keys=keys, bases=(_SectionSlice,), module=__name__)
               for section, keys in STAGE_SUBKEYS.get(stage, {}).items()}
    for cls in partial.values():
        globals()[cls.__name__] = cls  # pickle and copy find a class where it is bound (named again below)
    return derive(name, SCHEMA, {**SECTIONS, **partial}, keys=STAGE_KEYS[stage], bases=bases, module=__name__)


STAGE_VIEWS = {stage: _stage_view(stage) for stage in STAGE_KEYS}
"""The stages whose steps read a view; the report reads every run's summary
and the published figures, and stays a plain mapping."""
DataView, TokenizeView, EnvironmentView, TrainView, EvaluateView, ConvertView, QuantizeView, RuntimesView, \
    PlanView, DeployView = STAGE_VIEWS.values()
# The stages' slices of train (the types their code is given).
TokenizeTrain, EnvironmentTrain = ({f.name: f.type for f in dataclasses.fields(view)}["train"]
                                   for view in (TokenizeView, EnvironmentView))

