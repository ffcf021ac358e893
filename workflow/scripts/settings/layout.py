"""`distributed.processes_per_node: auto`: the ranks x threads layout of a
node, measured, not assumed (issue 44).

A run whose layout is auto (and whose threads_per_process is not a number)
takes the layout that short training bursts at its own shape measured on
this CPU model (train/tune.py). The table is cached per CPU model, core
count and run shape (`cache_file`), so a shape is measured once per CPU
model. A number wins with no burst: processes_per_node as given, or with
`auto` ranks and a threads_per_process number, cores / threads.

The measured layout never changes the recipe: the global batch of a
measured run is train.batch_size x nodes x gradient_accumulation_steps, as
at the reference layout of one rank per node, whatever split is picked;
`split_batch` derives each layout's per-rank batch and accumulation from it,
and a split that cannot keep it is no candidate (`candidates`).

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
SHAPE_TRAIN_KEYS = ("batch_size", "gradient_accumulation_steps", "max_seq_length", "precision", "model_code",
                    "speed", "lora")
# The distributed keys that move a step: the all-reduce's transport, buckets and bytes.
SHAPE_DISTRIBUTED_KEYS = ("backend", "bucket_cap_mb", "gradient_compression")
# The ranks per node whose per-rank batch train.batch_size is, under processes_per_node auto.
REFERENCE_RANKS = 1
# How the bursts time a layout (train/tune.py): updates sampled across the
# epoch's lengths. A cache entry timed another way (the epoch's first
# batches, read 15-25% high on SST-2's lengths) is measured again.
TIMING = "sampled-lengths"


def normalize(dist: dict) -> None:
    """`threads_per_process: tuned` (older configurations) is the measured layout: ranks and threads auto."""
    if dist.get("threads_per_process") == "tuned":
        dist.update(processes_per_node=AUTO, threads_per_process=AUTO)


def measured(dist: dict) -> bool:
    """Whether this run's layout comes from bursts: ranks auto, threads not a number."""
    threads = dist["threads_per_process"]
    return threads == "tuned" or dist["processes_per_node"] == AUTO and not isinstance(threads, int)


def shape(run: dict, lengths: dict | None = None) -> dict:
    """What the burst's speed depends on besides the CPU: the model, the task's
    head, the train keys of a step (the reference batch and accumulation),
    the all-reduce's keys and the training data's token lengths (`lengths`,
    length_profile's)."""
    train, dist = run["train"], run.get("distributed", {})
    return {"model": model_identity(run["model"]), "task": run["task"],
            **{key: train.get(key) for key in SHAPE_TRAIN_KEYS},
            **{key: dist.get(key) for key in SHAPE_DISTRIBUTED_KEYS}, "lengths": lengths}


def length_profile(lengths: list[int]) -> dict:
    """The token lengths of the training set as a step sees them: mean and
    percentiles (a padded batch costs its longest row, a packed one its sum)."""
    ordered = sorted(lengths) or [0]

    def at(share: float) -> int:
        return ordered[min(len(ordered) - 1, int(share * len(ordered)))]

    return {"mean": round(sum(ordered) / len(ordered), 1), "p10": at(0.1), "p50": at(0.5), "p90": at(0.9),
            "max": ordered[-1]}


def split_batch(batch_size: int, accumulation: int, ranks: int) -> tuple[int, int] | None:
    """(per-rank batch, accumulation) of `ranks` ranks per node that keep the
    node's samples per update (batch_size x accumulation at REFERENCE_RANKS):
    the largest per-rank batch dividing a rank's share that is at most
    batch_size / ranks (the activations of the reference's micro-step, or
    one row), the rest accumulated. None when the share is not whole."""
    per_node = batch_size * REFERENCE_RANKS * accumulation
    if per_node % ranks:
        return None
    share = per_node // ranks
    cap = max(1, batch_size * REFERENCE_RANKS // ranks)
    batch = max(b for b in range(1, min(cap, share) + 1) if share % b == 0)
    return batch, share // batch


def layouts(cores: int) -> list[tuple[int, int]]:
    """(ranks, threads per rank) for every rank count that divides the cores."""
    return [(ranks, cores // ranks) for ranks in range(1, cores + 1) if cores % ranks == 0]


def candidates(cores: int, batch_size: int, accumulation: int) -> tuple[list[dict], list[str]]:
    """Every ranks x threads split of the cores that can keep the global
    batch, with its per-rank batch and accumulation; and a line per split
    that cannot."""
    rows, dropped = [], []
    for ranks, threads in layouts(cores):
        split_ = split_batch(batch_size, accumulation, ranks)
        if split_ is None:
            dropped.append(f"{ranks} x {threads}: batch {batch_size} x accumulation {accumulation} "
                           f"does not split into {ranks} equal shares; not measured")
            continue
        rows.append({"processes_per_node": ranks, "threads_per_process": threads,
                     "batch_size": split_[0], "gradient_accumulation_steps": split_[1]})
    return rows, dropped


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
    """The cached measurement of exactly this CPU, cores and shape, timed as
    bursts time now (TIMING); None when missing, unreadable or of another
    key (a damaged file is measured again)."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    same = (record.get("cpu_model"), record.get("cores"), record.get("shape"), record.get("timing")) == \
        (cpu_model, cores, run_shape, TIMING)
    return record if same and record.get("table") and record.get("best") else None


PICKED = ("processes_per_node", "threads_per_process", "batch_size", "gradient_accumulation_steps")


def pick(table: list[dict]) -> dict:
    """The fastest row's layout; a tie goes to fewer ranks (less memory, fewer all-reduces)."""
    best = max(table, key=lambda r: (r["train_samples_per_second"], -r["processes_per_node"]))
    return {k: best[k] for k in PICKED}


def fallback(cores: int, batch_size: int, accumulation: int) -> dict:
    """The layout when no burst measured one: the reference layout, one rank
    of every core, whose batch and accumulation are the configured ones."""
    return {"processes_per_node": REFERENCE_RANKS, "threads_per_process": cores // REFERENCE_RANKS,
            "batch_size": batch_size, "gradient_accumulation_steps": accumulation}


def split(row: dict) -> str:
    return f"{row['processes_per_node']} x {row['threads_per_process']}"


def reason(record: dict) -> str:
    """One line: the pick, its figure against every other layout's, how and where measured."""
    best, how = record["best"], (
        f"cached ({record.get('cache_file')}, measured {record.get('measured_at', '?')})" if record.get("cached")
        else f"measured now, cached in {record.get('cache_file')}")
    batch = (f"global batch {best['batch_size'] * best['processes_per_node'] * best['gradient_accumulation_steps']}"
             f" per node ({best['batch_size']} per rank x {best['gradient_accumulation_steps']} accumulation at "
             f"the pick)")
    where = f"on {record['cpu_model']} ({record['cores']} cores)"
    if record.get("fallback"):
        return (f"auto: {split(best)} (ranks x threads), the fallback: no layout could be measured "
                f"({'; '.join(record.get('dropped', [])) or 'no candidate'}); {batch} {where}")
    row = next(r for r in record["table"] if split(r) == split(best))
    others = ", ".join(f"{split(r)} {r['train_samples_per_second']:.1f}" for r in record["table"] if r is not row)
    return (f"auto: {split(best)} (ranks x threads) at {row['train_samples_per_second']:.1f} samples/s"
            f"{', against ' + others if others else ''}; bursts of {record.get('warmup_steps', 0)} warm-up + "
            f"{record['steps']} timed updates sampled across the epoch's lengths at {batch} {where}"
            f"{'; dropped: ' + '; '.join(record['dropped']) if record.get('dropped') else ''}; {how}")


@dataclass(frozen=True)
class Layout:
    """The ranks and threads a run uses on each node, and why."""
    processes_per_node: int
    threads_per_process: int | str
    source: str
    """set (a number given), threads (auto ranks from a threads number), measured, cached or fallback."""
    reason: str
    batch_size: int | None = None
    gradient_accumulation_steps: int | None = None
    """Per rank, of a measured layout (split_batch's); None: train's as set."""


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
    source = "fallback" if record.get("fallback") else "cached" if record.get("cached") else "measured"
    return Layout(best["processes_per_node"], best["threads_per_process"], source, reason(record),
                  best["batch_size"], best["gradient_accumulation_steps"])


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
