"""The run decisions every step reads, typed: made once by the environment
check (environment.json) and never recomputed by a step."""

from __future__ import annotations

import json
import dataclasses
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from workflow.scripts.settings.levers import Levers, all_off


@dataclass(frozen=True)
class RunDecisions:
    backend: str
    """Process group backend: gloo, or ccl (oneCCL bindings)."""
    precision: str
    """fp32 or bf16 (bf16 only where the CPU has it natively)."""
    threads_per_process: int
    """Torch and OpenMP threads of every rank."""
    nodes: int
    processes_per_node: int
    """Ranks on each node: the configured number, or the measured layout's (processes_per_node auto)."""
    mpi: dict | None = None
    """The launcher: mpirun path, flavour (intel, mpich, openmpi; slurm) and version."""
    ipex: bool = False
    """Intel Extension for PyTorch optimizes the model."""
    gloo_ifname: str | None = None
    """The interface that reaches the first node on every node (several nodes)."""
    levers: Levers = dataclasses.field(default_factory=all_off)
    """The training step's levers as chosen (settings/levers.py; none is auto);
    a record without them (an older environment.json) runs with all off."""
    levers_reason: dict | None = None
    backend_reason: str = "?"
    precision_reason: str = "?"
    ipex_reason: str = "?"
    layout_reason: str = "?"
    """Why each choice was made, for the logs (the layout's: measured, cached
    or set; environment.json's `layout` holds the measured table)."""
    batch_size_per_rank: int | None = None
    gradient_accumulation_steps: int | None = None
    """A measured layout's split of the global batch (processes_per_node auto,
    settings/layout.split_batch); None: train.batch_size and accumulation as set."""

    def __post_init__(self):
        if self.threads_per_process < 1 or self.nodes < 1 or self.processes_per_node < 1:
            raise ValueError(f"environment.json: {self.nodes} nodes x {self.processes_per_node} ranks x "
                             f"{self.threads_per_process} threads; each must be at least 1 (rerun the check)")

    @property
    def world_size(self) -> int:
        return self.nodes * self.processes_per_node

    def recipe(self, train):
        """`train` (TrainSettings) with this layout's per-rank batch and
        accumulation, when the layout derived them; the global batch is the same."""
        if self.batch_size_per_rank is None:
            return train
        return dataclasses.replace(train, batch_size=self.batch_size_per_rank,
                                   gradient_accumulation_steps=self.gradient_accumulation_steps)

    def as_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def of(cls, info: dict | RunDecisions) -> RunDecisions:
        """From environment.json's content (extra keys are the record, not decisions)."""
        if isinstance(info, cls):
            return info
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in info.items() if k in known}
        values["threads_per_process"] = int(values["threads_per_process"])
        values["ipex"] = bool(values.get("ipex"))
        if "levers" in values:
            values["levers"] = Levers.of(values["levers"])
        values.setdefault("nodes", 1)
        values.setdefault("processes_per_node", info.get("world_size", 1) // values["nodes"])
        return cls(**values)

    @classmethod
    def load(cls, path) -> RunDecisions:
        return cls.of(json.loads(Path(path).read_text()))
