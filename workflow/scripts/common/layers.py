"""Where the configuration's layers come from: the profile's cluster file,
whatever the command line adds, and command-line values typed by the schema.

Snakemake replaces a profile's `config:` list with a `--config` given on the
command line, so the cluster file is also read from the profile itself."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

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


def profile_file(profile: str) -> Path | None:
    """A profile's YAML, where Snakemake looks: the path given, else a
    folder of that name in the user's or the system's snakemake folder."""
    homes = [Path(profile)] + [Path(d).expanduser() / profile for d in ("~/.config/snakemake", "/etc/xdg/snakemake")]
    for home in homes:
        if home.is_file():
            return home
        found = [home / name for name in ("profile.yaml", "config.yaml") if (home / name).is_file()]
        if found:
            return found[0]
    return None


def profile_cluster(profile: str | None) -> str | None:
    """The `cluster=` entry of a profile's `config:` list (None without one)."""
    path = profile_file(profile) if profile else None
    if path is None:
        return None
    settings = yaml.safe_load(path.read_text()) or {}
    for item in settings.get("config") or []:
        key, _, value = str(item).partition("=")
        if key.strip() == "cluster":
            return value.strip()
    return None


def cluster_of(config: dict, argv: list[str], environ=os.environ) -> str | None:
    """The cluster file: an explicit `cluster` key, else the profile's, else
    the one the main process handed its jobs."""
    return config.get("cluster") or profile_cluster(profile_arg(argv, environ)) or environ.get(CLUSTER_ENV)


def _scalar(schema: dict, text: str):
    """A command-line string as the schema's type, when the schema refuses strings."""
    types = schema.get("type", [])
    types = [types] if isinstance(types, str) else list(types)
    types += [type(v).__name__ for v in schema.get("enum", []) if not isinstance(v, str)]
    for option in schema.get("oneOf", []):
        types += [option.get("type")] + [type(v).__name__ for v in option.get("enum", []) if not isinstance(v, str)]
    if "string" in types or (schema.get("enum") and text in schema["enum"]):
        return text
    parsed = yaml.safe_load(text)
    kinds = {"integer": int, "number": (int, float), "boolean": bool, "bool": bool, "null": type(None)}
    ok = any(isinstance(parsed, kinds[t]) and not (t in ("integer", "number") and isinstance(parsed, bool))
             for t in types if t in kinds)
    return parsed if ok else text


def coerce(schema: dict, value):
    """`--config 'train={epochs: 1}'` reaches the workflow as {'epochs': '1'}
    (Snakemake reads nested values as strings): type them by the schema."""
    if isinstance(value, dict):
        props = schema.get("properties", {})
        return {k: coerce(props[k], v) if k in props else v for k, v in value.items()}
    if isinstance(value, list):
        return [coerce(schema.get("items", {}), v) for v in value]
    if isinstance(value, str):
        return _scalar(schema, value)
    return value
