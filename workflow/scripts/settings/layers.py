"""Command-line values typed by the schema: the layer `--config` adds.
(The profile's cluster file and the layering of config files: `profiles`.)"""

from __future__ import annotations

import yaml


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
    if isinstance(parsed, bool) and text.strip().lower() not in ("true", "false"):
        return text  # YAML 1.1's yes/no/on/off: a quoted "yes" stays what it is, and the schema says so
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
