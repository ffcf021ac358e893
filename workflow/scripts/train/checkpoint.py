"""Training checkpoints: atomic, marker written last, newest valid one wins.

Rank 0 writes everything (the model and optimizer are identical on every
rank under DDP; the RNG states of all ranks are gathered to it), so nodes
need no shared filesystem. A checkpoint folder is valid only once its
COMPLETE marker exists; it is written last, then the folder is renamed
from its temporary name. Loading uses torch.load(weights_only=True).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch

MARKER = "COMPLETE"
PREFIX = "step-"


def _folder(root: Path, step: int) -> Path:
    return root / f"{PREFIX}{step:08d}"


def rng_state() -> dict:
    """This rank's RNG state (dropout draws); the data order is seeded per epoch."""
    return {"torch": torch.get_rng_state()}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])


def save(root, step: int, state: dict, meta: dict, keep: int) -> Path:
    """Write checkpoint `step` atomically and keep only the newest `keep`.
    `state`: model, optimizer, scheduler and rng (every rank's) state;
    `meta`: the loop's position and the settings' fingerprint."""
    root = Path(root)
    final = _folder(root, step)
    tmp = root / f".{final.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save(state["model"], tmp / "model.pt")
    torch.save({k: v for k, v in state.items() if k != "model"}, tmp / "state.pt")
    (tmp / MARKER).write_text(json.dumps({**meta, "step": step}))
    _fsync_dir(tmp)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    prune(root, keep)
    return final


def _fsync_dir(path: Path) -> None:
    for item in path.iterdir():
        with open(item, "rb") as handle:
            os.fsync(handle.fileno())


def valid(root) -> list[Path]:
    """Valid checkpoints, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.glob(f"{PREFIX}*") if (p / MARKER).is_file())


def prune(root, keep: int) -> None:
    for old in valid(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def newest(root, fingerprint: str) -> Path | None:
    """The newest valid checkpoint written with the same training settings."""
    for folder in reversed(valid(root)):
        if info(folder).get("fingerprint") == fingerprint:
            return folder
    return None


def info(folder) -> dict:
    return json.loads((Path(folder) / MARKER).read_text())


def read(folder) -> dict:
    """model, optimizer, scheduler and rng (every rank's) state, and meta."""
    folder = Path(folder)
    state = torch.load(folder / "state.pt", weights_only=True)
    state["model"] = torch.load(folder / "model.pt", weights_only=True)
    state["meta"] = info(folder)
    return state
