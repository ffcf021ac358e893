"""`distributed.processes_per_node: auto`: the ranks x threads layout of a
node, measured, not assumed (issue 44).

A run whose layout is auto (and whose threads_per_process is not a number)
takes the layout that short training bursts at its own shape measured on
this CPU model (train/tune.py). The table is cached per CPU model, core
count and run shape (`cache_file`), so a shape is measured once per CPU
model. A number wins with no burst: processes_per_node as given, or with
`auto` ranks and a threads_per_process number, cores / threads.

Here: which runs need the measurement, the cache's key and folder, the pick
and the one-line reason the environment check records (no torch, no
processes)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from workflow.scripts.common.errors import UserError

if TYPE_CHECKING:  # views import nothing of this module; the type only
    from workflow.scripts.settings.views import DistributedSettings

AUTO = "auto"
CACHE_ENV = "CPUDDP_LAYOUT_CACHE"
# The train keys that set a step's cost: a layout measured for one of them is another's guess.
SHAPE_TRAIN_KEYS = ("batch_size", "max_seq_length", "precision", "model_code", "speed", "lora")


def normalize(dist: dict) -> None:
    """`threads_per_process: tuned` (older configurations) is the measured layout: ranks and threads auto."""
    if dist.get("threads_per_process") == "tuned":
        dist.update(processes_per_node=AUTO, threads_per_process=AUTO)


def measured(dist: dict) -> bool:
    """Whether this run's layout comes from bursts: ranks auto, threads not a number."""
    threads = dist["threads_per_process"]
    return threads == "tuned" or dist["processes_per_node"] == AUTO and not isinstance(threads, int)


def shape(run: dict) -> dict:
    """What the burst's speed depends on besides the CPU: the model, the task's
    head and the train keys of a step (the per-rank batch as the run uses it)."""
    train = run["train"]
    return {"model": model_identity(run["model"]), "task": run["task"],
            **{key: train.get(key) for key in SHAPE_TRAIN_KEYS}}


def model_identity(model) -> str:
    """A model folder by its architecture (config.json without names and
    versions), so that one model fetched by two experiments is one entry;
    anything else by its name."""
    try:
        config = json.loads((Path(str(model)) / "config.json").read_text())
    except (OSError, ValueError):
        return str(model)
    config = {k: v for k, v in config.items() if k not in ("_name_or_path", "transformers_version")}
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
    return f"{config.get('model_type', 'model')}:{digest}"


def cache_key(cpu_model: str, cores: int, run_shape: dict) -> str:
    """A file name: the CPU model readable, then a digest of model, cores and shape."""
    text = json.dumps({"cpu_model": cpu_model, "cores": cores, "shape": run_shape}, sort_keys=True)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", cpu_model).strip("-")[:48] or "cpu"
    return f"{slug}-{cores}c-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


def cache_dir(environ=os.environ) -> Path:
    """$CPUDDP_LAYOUT_CACHE, else $XDG_CACHE_HOME/cpuddp/layouts, else ~/.cache/cpuddp/layouts."""
    if environ.get(CACHE_ENV):
        return Path(environ[CACHE_ENV])
    base = Path(environ["XDG_CACHE_HOME"]) if environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "cpuddp" / "layouts"


def cache_file(folder: Path, cpu_model: str, cores: int, run_shape: dict) -> Path:
    return Path(folder) / f"{cache_key(cpu_model, cores, run_shape)}.json"


def read_cached(path: Path, cpu_model: str, cores: int, run_shape: dict) -> dict | None:
    """The cached measurement of exactly this CPU, cores and shape; None when
    missing, unreadable or of another key (a damaged file is measured again)."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    same = (record.get("cpu_model"), record.get("cores"), record.get("shape")) == (cpu_model, cores, run_shape)
    return record if same and record.get("table") and record.get("best") else None


def pick(table: list[dict]) -> dict:
    """The fastest row's layout; a tie goes to fewer ranks (less memory, fewer all-reduces)."""
    best = max(table, key=lambda r: (r["train_samples_per_second"], -r["processes_per_node"]))
    return {k: best[k] for k in ("processes_per_node", "threads_per_process")}


def split(row: dict) -> str:
    return f"{row['processes_per_node']} x {row['threads_per_process']}"


def reason(record: dict) -> str:
    """One line: the pick, its figure against every other layout's, how and where measured."""
    best = next(r for r in record["table"] if split(r) == split(record["best"]))
    others = ", ".join(f"{split(r)} {r['train_samples_per_second']:.1f}" for r in record["table"] if r is not best)
    how = (f"cached ({record.get('cache_file')}, measured {record.get('measured_at', '?')})" if record.get("cached")
           else f"measured now, cached in {record.get('cache_file')}")
    return (f"auto: {split(best)} (ranks x threads) at {best['train_samples_per_second']:.1f} samples/s"
            f"{', against ' + others if others else ''}; {record['steps']}-step bursts at batch "
            f"{record['shape']['batch_size']} per rank on {record['cpu_model']} ({record['cores']} cores); {how}")


@dataclass(frozen=True)
class Layout:
    """The ranks and threads a run uses on each node, and why."""
    processes_per_node: int
    threads_per_process: int | str
    source: str
    """set (a number given), threads (auto ranks from a threads number), measured or cached."""
    reason: str


def decide(dist: DistributedSettings, record: dict | None, cores: int) -> Layout:
    """The layout of a run (its distributed section, validated: `tuned` is
    normalized already): numbers win; else the measurement `record` (train/tune.py's)."""
    ranks, threads = dist.processes_per_node, dist.threads_per_process
    if ranks != AUTO:
        return Layout(ranks, threads, "set", f"processes_per_node {ranks} as set (no burst)")
    if isinstance(threads, int):
        ranks = max(1, cores // threads)
        return Layout(ranks, threads, "threads", f"processes_per_node auto with threads_per_process {threads} "
                                                 f"as set: {cores} cores / {threads} = {ranks} rank(s) (no burst)")
    if record is None:
        raise UserError("distributed.processes_per_node is auto but no measured layout was given: run the "
                        "workflow (rule measure_layout), or give the environment check --layout, or set a number")
    best = record["best"]
    return Layout(best["processes_per_node"], best["threads_per_process"],
                  "cached" if record.get("cached") else "measured", reason(record))


def nodes_note(record: dict | None, node_models: dict[str, str]) -> str:
    """On several nodes the layout measured on the launch node is every node's:
    name the nodes whose CPU model differs from the measured one."""
    if not record:
        return ""
    other = sorted(n for n, model in node_models.items() if model and model != record["cpu_model"])
    if not other:
        return ""
    return f"; measured on {record['cpu_model']} but node(s) {', '.join(other)} have another CPU model"


def ranks_guess(dist, cores: int) -> int:
    """The ranks per node before any measurement (the scaling plan's profile
    without an environment.json): the number, cores / threads, else 1."""
    ranks, threads = dist.processes_per_node, dist.threads_per_process
    if ranks != AUTO:
        return ranks
    return max(1, cores // threads) if isinstance(threads, int) else 1
