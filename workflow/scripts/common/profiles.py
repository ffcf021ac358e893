"""An experiment file read as Snakemake reads it under a profile:
config.yaml, then the profile's cluster file, then the experiment. The make
targets that read results without Snakemake (`make plan`, `make compare`)
use it, so that PROFILE=profiles/slurm gives them Slurm's layout and no
hostfile is needed on a login node.
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from workflow.scripts.common import config as cfg
from workflow.scripts.common.errors import UserError

ROOT = Path(__file__).resolve().parents[3]


def cluster_file(profile: str | Path, root: Path = ROOT) -> Path | None:
    """The cluster file a profile names (`config: [cluster=...]`), or None (profiles/local)."""
    settings = Path(root) / profile / "config.yaml"
    if not settings.is_file():
        raise UserError(f"profile not found: {settings}; set PROFILE to a folder of profiles/ (local, xeon, slurm)")
    entries = (yaml.safe_load(settings.read_text()) or {}).get("config") or []
    named = [e.split("=", 1)[1] for e in entries if str(e).startswith("cluster=")]
    return Path(root) / named[0] if named else None


def merge(base: dict, over: dict) -> dict:
    """Nested keys of `over` replace those of `base`, as Snakemake merges config files."""
    merged = copy.deepcopy(base)
    for key, value in over.items():
        both_maps = isinstance(value, dict) and isinstance(merged.get(key), dict)
        merged[key] = merge(merged[key], value) if both_maps else copy.deepcopy(value)
    return merged


def experiment_config(path: str | Path, profile: str | Path | None = None, root: Path = ROOT) -> dict:
    """The validated configuration of an experiment file; with a profile, layered as Snakemake layers it."""
    layers = [Path(path)]
    if profile is not None:
        cluster = cluster_file(profile, root)
        layers = [Path(root) / "config.yaml", *([cluster] if cluster else []), Path(path)]
    config: dict = {}
    for layer in layers:
        config = merge(config, yaml.safe_load(layer.read_text()) or {})
    return cfg.validate(config)
