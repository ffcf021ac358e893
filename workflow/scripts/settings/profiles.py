"""A profile's cluster file and the configuration layered as Snakemake
layers it: config.yaml, then the profile's cluster file, then experiment
files and the command line.

Two readers share it. The Snakefile finds the profile of its own command
line (`--profile`, else $SNAKEMAKE_PROFILE): Snakemake replaces a profile's
`config:` list with a `--config` given on the command line, so the cluster
file is read from the profile itself, and jobs get it in $CPUDDP_CLUSTER.
The make targets that read results without Snakemake (`make report`, `make
plan`, `make compare` with PROFILE=...) layer an experiment file under a
profile with `experiment_config`, so that PROFILE=profiles/slurm gives them
Slurm's layout and no hostfile is needed on a login node.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import yaml

from workflow.scripts.settings import config as cfg
from workflow.scripts.common.errors import UserError

ROOT = Path(__file__).resolve().parents[3]
# Set by the main Snakemake process for its jobs (a Slurm job's Snakemake
# is started without --profile): the cluster file the run was planned with.
CLUSTER_ENV = "CPUDDP_CLUSTER"


def profile_arg(argv: list[str], environ) -> str | None:
    """The last --profile of a Snakemake command line, else $SNAKEMAKE_PROFILE."""
    found = environ.get("SNAKEMAKE_PROFILE")
    for i, word in enumerate(argv):
        if word == "--profile" and i + 1 < len(argv):
            found = argv[i + 1]
        elif word.startswith("--profile="):
            found = word.split("=", 1)[1]
    return found


def profile_file(profile: str | Path, root: Path = Path(".")) -> Path | None:
    """A profile's YAML, where Snakemake looks: the path given (from `root`),
    else a folder of that name in the user's or the system's snakemake folder."""
    homes = [Path(root) / profile] + [Path(d).expanduser() / profile
                                      for d in ("~/.config/snakemake", "/etc/xdg/snakemake")]
    for home in homes:
        if home.is_file():
            return home
        found = [home / name for name in ("profile.yaml", "config.yaml") if (home / name).is_file()]
        if found:
            return found[0]
    return None


def cluster_entry(path: Path) -> str | None:
    """The `cluster=` entry of a profile YAML's `config:` list (None without one)."""
    for item in (yaml.safe_load(path.read_text()) or {}).get("config") or []:
        key, _, value = str(item).partition("=")
        if key.strip() == "cluster":
            return value.strip()
    return None


def existing(cluster: str | Path, root: str | Path) -> Path:
    """A cluster file (relative to the workflow) that must exist: Snakemake
    would skip a missing one silently when --configfile is given."""
    full = Path(root) / cluster
    if not full.is_file():
        raise UserError(f"cluster file not found: {full}; fix config key `cluster` (set by the profile)")
    return full


def cluster_file(profile: str | Path, root: Path = ROOT) -> Path | None:
    """The cluster file a profile names, checked, or None (profiles/local)."""
    path = profile_file(profile, root)
    if path is None:
        raise UserError(f"profile not found: {Path(root) / profile}; "
                        "set PROFILE to a folder of profiles/ (local, xeon, slurm)")
    entry = cluster_entry(path)
    return existing(entry, root) if entry else None


def cluster_of(config: dict, argv: list[str], environ=os.environ) -> str | None:
    """The Snakefile's cluster file: an explicit `cluster` key, else the
    profile's, else the one the main process handed its jobs."""
    path = profile_file(profile) if (profile := profile_arg(argv, environ)) else None
    return config.get("cluster") or (cluster_entry(path) if path else None) or environ.get(CLUSTER_ENV)


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
