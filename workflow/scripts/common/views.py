"""Typed views of the configuration. One frozen dataclass per schema section,
and per stage the view of the slice it reads (common/stages.py cuts the
slices; a step loads its view once, in `step.read_view`).

The schema (validated while the workflow is parsed, defaults filled in) stays
the source of truth: tests/unit/test_views.py checks every field and default here
against it, so the two cannot drift apart. Defaults exist here only so that a
partial slice (the tokenize stage reads two train keys) is still a full view.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field

from workflow.scripts.common.levers import Levers


class _View:
    """`of` turns a parsed JSON dict (or a view) into the dataclass, sections
    included; an unknown key is a clear error, not a silently ignored one."""

    @classmethod
    def of(cls, value):
        if isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"{cls.__name__}: expected a mapping, got {type(value).__name__}")
        hints = typing.get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(value) - names)
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown configuration key(s) {', '.join(unknown)}")
        return cls(**{k: _section(hints[k], v) for k, v in value.items()})

    @classmethod
    def pick(cls, config: dict):
        """The view's part of a larger mapping (a whole configuration)."""
        if isinstance(config, cls):
            return config
        if not isinstance(config, dict):
            raise ValueError(f"{cls.__name__}: expected a mapping, got {type(config).__name__}")
        return cls.of({f.name: config[f.name] for f in dataclasses.fields(cls) if f.name in config})

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _section(hint, value):
    """A nested section (or None where the schema allows null) becomes its view."""
    for candidate in typing.get_args(hint) or (hint,):
        typed = isinstance(candidate, type) and (issubclass(candidate, _View) or candidate is Levers)
        if typed and isinstance(value, dict):
            return candidate.of(value)
    return value


@dataclass(frozen=True)
class DataFiles(_View):
    format: str
    train: str
    validation: str
    validation_mismatched: str | None = None
    text_columns: list | None = None
    """Own data: one or two text columns, names or 0-based positions."""
    label_column: str | int = "label"
    header: bool = True
    label_names: list | None = None
    dataset: str | None = None
    """format hub: the Hub dataset id whose splits train and validation name."""
    dataset_config: str | None = None
    glue_dir: str | None = None
    """A GLUE archive folder; train and validation are the task's files in it."""


@dataclass(frozen=True)
class TrainSettings(_View):
    epochs: float = 3
    batch_size: int = 32
    """Per rank and micro-batch."""
    gradient_accumulation_steps: int = 1
    learning_rate: float = 2.0e-5
    weight_decay: float = 0.0
    warmup_ratio: float = 0.0
    max_grad_norm: float = 1.0
    """Clip the gradients' total norm before each update (the Trainer's 1.0); 0 = off."""
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1.0e-8
    lr_scheduler_type: str = "linear"
    speed: Levers = field(default_factory=Levers)
    """The step's levers as set (auto or a value): common/levers.py."""
    max_seq_length: int = 128
    doc_stride: int = 128
    seed: int = 42
    precision: str = "auto"
    ipex: str | bool = "auto"
    max_steps: int | None = None
    log_every: int = 10
    checkpoint_every: int = 100
    keep_checkpoints: int = 2


@dataclass(frozen=True)
class EvaluationSettings(_View):
    metric: str | None = None
    """The main metric (reports, the deploy gate); None = the task's first."""
    batch_size: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    null_score_diff_threshold: float = 0.0


@dataclass(frozen=True)
class DistributedSettings(_View):
    backend: str = "auto"
    mpi: str = "auto"
    mpirun: str | None = None
    launcher: str = "mpirun"
    launcher_args: list = field(default_factory=list)
    check_timeout_seconds: float = 120
    hostfile: str | None = None
    nodes: int = 1
    processes_per_node: int = 2
    required_threads_per_process: int | None = None
    """A published recipe's threads per rank, already put into threads_per_process."""
    threads_per_process: int | str = "auto"
    timeout_minutes: float = 10
    bucket_cap_mb: float = 25
    gradient_compression: str = "none"
    retries: int = 2
    min_nodes: int | None = None
    exit_grace_seconds: float = 60
    start_timeout: float = 300
    lease_dir: str | None = None
    """Absolute folder of the host leases (launch/lease.py); None = next to the hostfile."""
    env: dict = field(default_factory=dict)


@dataclass(frozen=True)
class QuantizationSettings(_View):
    enabled: str | bool = False
    calibration_samples: int = 200
    stack: str = "openvino"
    max_accuracy_drop: float = 1.0
    min_speedup: float = 1.0


@dataclass(frozen=True)
class PlanSettings(_View):
    bandwidth_gbit: list = field(default_factory=lambda: [10, 25])
    latency_us: float = 50
    measure_network: str | bool = "auto"
    step_seconds: float | None = None
    seq_len: int | None = None
    max_nodes: int = 64
    target_efficiency: float = 0.9
    report: bool = False


# One view per stage: exactly the keys of its slice in common/stages.py.

@dataclass(frozen=True)
class DataView(_View):
    task: str
    data: DataFiles | None = None

    @classmethod
    def pick(cls, config):
        """As _View.pick; a whole configuration's data.generate (how the demo
        makes its files) is not part of what the data stage reads."""
        if isinstance(config, dict) and isinstance(config.get("data"), dict):
            config = {**config, "data": {k: v for k, v in config["data"].items() if k != "generate"}}
        return super().pick(config)


@dataclass(frozen=True)
class TokenizeView(_View):
    task: str
    model: str
    trust_remote_code: bool = False
    train: TrainSettings = field(default_factory=TrainSettings)


@dataclass(frozen=True)
class EnvironmentView(_View):
    distributed: DistributedSettings = field(default_factory=DistributedSettings)
    train: TrainSettings = field(default_factory=TrainSettings)


@dataclass(frozen=True)
class TrainView(_View):
    task: str
    model: str
    trust_remote_code: bool = False
    train: TrainSettings = field(default_factory=TrainSettings)
    distributed: DistributedSettings = field(default_factory=DistributedSettings)


@dataclass(frozen=True)
class EvaluateView(_View):
    task: str
    evaluation: EvaluationSettings = field(default_factory=EvaluationSettings)


@dataclass(frozen=True)
class ConvertView(_View):
    task: str


@dataclass(frozen=True)
class QuantizeView(_View):
    task: str
    quantization: QuantizationSettings = field(default_factory=QuantizationSettings)


@dataclass(frozen=True)
class RuntimesView(_View):
    task: str
    evaluation: EvaluationSettings = field(default_factory=EvaluationSettings)
    quantization: QuantizationSettings = field(default_factory=QuantizationSettings)


@dataclass(frozen=True)
class PlanView(_View):
    task: str
    model: str
    trust_remote_code: bool = False
    experiment: str | None = None
    published: dict | None = None
    sweep: dict | None = None
    plan: PlanSettings = field(default_factory=PlanSettings)
    train: TrainSettings = field(default_factory=TrainSettings)
    distributed: DistributedSettings = field(default_factory=DistributedSettings)


STAGE_VIEWS = {"data": DataView, "tokenize": TokenizeView, "environment": EnvironmentView,
               "train": TrainView, "evaluate": EvaluateView, "convert": ConvertView,
               "quantize": QuantizeView, "runtimes": RuntimesView, "plan": PlanView}
"""The stages whose steps read a view; the report reads every run's summary
and the published figures, and stays a plain mapping."""

SECTIONS = {"data": DataFiles, "train": TrainSettings, "evaluation": EvaluationSettings,
            "distributed": DistributedSettings, "quantization": QuantizationSettings, "plan": PlanSettings}


def distributed_of(config) -> DistributedSettings:
    """The distributed section of a configuration mapping, of a stage view
    that has one, or the section itself (the launcher serves all three)."""
    if isinstance(config, dict):
        config = config.get("distributed", config)
    return DistributedSettings.of(getattr(config, "distributed", config))


def train_of(config) -> TrainSettings:
    """The train section of a configuration mapping or of a stage view."""
    section = config.get("train", {}) if isinstance(config, dict) else config.train
    return TrainSettings.of(section)
