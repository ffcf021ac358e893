"""Whether a tuning burst's ranks fit in this node's memory, before it
starts (train/tune.py): a layout of many one-thread ranks holds the model,
its gradients and AdamW's moments once per rank, and a large model at 1
thread x N ranks can exhaust a node that a fixed layout trains on.

An estimate, on the safe side, from the model folder alone (no torch):
per rank the parameters (counted from the weight files) at
BYTES_PER_PARAMETER, the activations of one micro-batch at
max_seq_length (Korthikanti et al. 2022, "Reducing Activation
Recomputation", per layer s*b*h*(34 + 5*a*s/h) bytes at 16 bits, doubled
for fp32), and RANK_OVERHEAD."""

from __future__ import annotations

import json
from pathlib import Path

# fp32 weights, gradients and DDP's bucket copy of them (4 bytes each), AdamW's two moments (8).
BYTES_PER_PARAMETER = 20
# A rank's process without its model: torch, the libraries, the data loader.
RANK_OVERHEAD = 512 * 2**20
WEIGHT_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def model_config(model_dir: Path) -> dict | None:
    try:
        return json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None


def parameters(model_dir: Path, config: dict) -> int:
    """The parameter count the weight files hold at the dtype they were saved in."""
    stored = sum(p.stat().st_size for pattern in WEIGHT_FILES for p in Path(model_dir).glob(pattern))
    return stored // DTYPE_BYTES.get(str(config.get("torch_dtype") or config.get("dtype")), 4)


def activation_bytes(config: dict, batch: int, length: int) -> int:
    """One micro-batch's saved activations for backward (0 when the config names no encoder shape)."""
    hidden, layers = config.get("hidden_size"), config.get("num_hidden_layers")
    heads = config.get("num_attention_heads") or 1
    if not (hidden and layers):
        return 0
    return int(2 * layers * length * batch * hidden * (34 + 5 * heads * length / hidden))


def need(model_dir: Path, batch: int, length: int, ranks: int) -> int | None:
    """Bytes `ranks` ranks of `batch` rows of `length` tokens take; None for a model not in a folder."""
    config = model_config(model_dir)
    if config is None:
        return None
    per_rank = parameters(model_dir, config) * BYTES_PER_PARAMETER + activation_bytes(config, batch, length)
    return ranks * (per_rank + RANK_OVERHEAD)


def too_big(model_dir: Path, row: dict, length: int, available: int) -> str | None:
    """Why the layout `row` (layout.candidates') is not measured: its
    estimate exceeds the `available` bytes; None when it fits or is unknown."""
    needed = need(model_dir, row["batch_size"], length, row["processes_per_node"])
    if needed is None or needed <= available:
        return None
    return (f"{row['processes_per_node']} x {row['threads_per_process']}: an estimated {needed / 2**30:.1f} GiB "
            f"({row['processes_per_node']} rank(s) of the model, its gradients, AdamW's state and a batch of "
            f"{row['batch_size']}) exceeds the {available / 2**30:.1f} GiB available; not measured")
