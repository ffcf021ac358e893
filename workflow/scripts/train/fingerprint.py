"""What a checkpoint was trained on, part by part, so that a resume
continues only the same work and a mismatch says which part changed.

    settings  the task, the training settings that change an update (not
              the split of the global batch into ranks x accumulation, nor
              logging and checkpoint cadence), the global batch, gradient
              compression
    data      sha256 of the tokenized training split's files
    model     sha256 of the model folder's config and weight files
    step      the environment check's decisions that change the step:
              precision, IPEX, the levers; the model code taken
              (train/model_code.py: its parameter names differ); the
              planned world size only under gradient compression (which
              compresses per rank)

A retry on fewer ranks (a node dropped, distributed.min_nodes) keeps the
global batch, the decisions and the planned world size: it resumes. Rank 0
alone computes it (it alone reads and writes checkpoints); the digests read
each file once, about a second per GB.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from workflow.scripts.settings.decisions import RunDecisions
from workflow.scripts.settings.views import TrainView

UNCHANGING = ("batch_size", "gradient_accumulation_steps",  # the split: the global batch is compared
              "log_every", "checkpoint_every", "keep_checkpoints",  # cadence, not arithmetic
              "precision", "ipex", "speed", "model_code")  # as set (auto); the step part holds what was decided
WEIGHTS = ("*.safetensors", "*.bin", "*.pt", "*.pth")
WHAT = {
    "settings": "with other training settings",
    "data": "on other data",
    "model": "from another model",
    "step": "with another step",
}


def files_digest(paths: list[Path], root: Path) -> str:
    """sha256 over the files' names (relative to `root`) and contents, in name order."""
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def data_digest(data_dir) -> str:
    """The training split's Arrow files (save_to_disk's train/), else every file of the folder."""
    root = Path(data_dir)
    files = sorted((root / "train").glob("*.arrow")) or [p for p in root.rglob("*") if p.is_file()]
    return files_digest(files, root)


def model_digest(model) -> str:
    """The model folder's config.json and weight files (a name that is no folder: the name)."""
    root = Path(model)
    if not root.is_dir():
        return hashlib.sha256(str(model).encode()).hexdigest()
    files = [root / "config.json"] if (root / "config.json").is_file() else []
    files += [p for pattern in WEIGHTS for p in root.glob(pattern)]
    return files_digest(files, root)


def of(cfg: TrainView, decisions: RunDecisions, data_dir, global_batch: int, model_code: str) -> dict:
    """The parts, JSON-able; the checkpoint's marker keeps them. model_code:
    the path the build took (cpuddp or transformers)."""
    compression = cfg.distributed.gradient_compression
    step = {"precision": decisions.precision, "ipex": decisions.ipex, "levers": decisions.levers.as_dict(),
            "model_code": model_code}
    if compression != "none":
        step["planned_world_size"] = decisions.world_size
    return {
        "settings": {"task": cfg.task, "global_batch": global_batch, "gradient_compression": compression,
                     "train": {k: v for k, v in cfg.train.as_dict().items() if k not in UNCHANGING}},
        "data": {"train tokens digest": data_digest(data_dir)},
        "model": {"model config and weights digest": model_digest(cfg.model)},
        "step": step,
    }


def first_difference(saved, current, where: str = "") -> str | None:
    """The first key whose value differs, as `key was A, now B` (a digest: `key differs`)."""
    if isinstance(saved, dict) and isinstance(current, dict):
        for key in sorted(set(saved) | set(current)):
            found = first_difference(saved.get(key), current.get(key), f"{where}.{key}" if where else key)
            if found:
                return found
        return None
    if saved == current:
        return None
    if "digest" in where:
        return f"{where} differs"
    return f"{where} was {saved!r}, now {current!r}"


def changed_part(saved, current: dict) -> str | None:
    """Which part differs (settings, data, model, step; `settings` for a
    fingerprint of other parts), the first in that order; None if the same work."""
    if not isinstance(saved, dict) or not isinstance(current, dict) or set(saved) != set(current):
        return None if saved == current else "settings"
    return next((part for part in current if first_difference(saved[part], current[part])), None)


def change(saved, current: dict) -> str | None:
    """How a checkpoint's fingerprint differs from `current`, for the sentence
    `checkpoint X was trained <change>`; None if it is the same work."""
    part = changed_part(saved, current)
    if part is None:
        return None
    if not isinstance(saved, dict) or set(saved) != set(current):
        return "with other training settings or by an older cpuddp (its fingerprint has other parts)"
    return f"{WHAT[part]} ({first_difference(saved[part], current[part])})"
