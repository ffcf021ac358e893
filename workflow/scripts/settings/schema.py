"""The configuration schema, and typed views built from it.

workflow/schemas/config.schema.yaml is the one definition of every setting:
its type, default and description. `derive` builds a frozen dataclass from
one of its objects when a module is imported (settings/views.py, the levers
in settings/levers.py), so a setting added to the schema is a typed field with
nothing more written, and the two cannot drift apart.
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from pathlib import Path

import yaml

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "schemas" / "config.schema.yaml"


def read_yaml(text: str):
    """Safe YAML through libyaml's C parser where PyYAML has it: a tenth of the
    pure-Python parser's 0.1 s for the schema, which every Snakemake process,
    step and rank reads at import."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


SCHEMA = read_yaml(SCHEMA_PATH.read_text())


def section_schema(*path: str) -> dict:
    """The schema object at `path` (e.g. "train", "speed")."""
    spec = SCHEMA
    for key in path:
        spec = spec["properties"][key]
    return spec


class View:
    """`of` turns a parsed JSON dict (or a view) into the dataclass, sections
    included; an unknown key is a clear error, not a silently ignored one."""

    @classmethod
    def of(cls, value):
        if isinstance(value, cls):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"{cls.__name__}: expected a mapping, got {type(value).__name__}")
        hints = typing.get_type_hints(cls)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(value) - names)
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown configuration key(s) {', '.join(unknown)}")
        return cls(**{k: _section(hints[k], v) for k, v in value.items()})

    @classmethod
    def pick(cls, config: dict):
        """The view's part of a larger mapping (a whole configuration)."""
        if isinstance(config, cls):
            return config
        if not isinstance(config, dict):
            raise ValueError(f"{cls.__name__}: expected a mapping, got {type(config).__name__}")
        return cls.of({f.name: config[f.name] for f in dataclasses.fields(cls) if f.name in config})

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def describe(cls, name: str) -> str:
        """The schema's description of field `name`."""
        return next(f.metadata.get("doc", "") for f in dataclasses.fields(cls) if f.name == name)


def _section(hint, value):
    """A nested section (or None where the schema allows null) becomes its view."""
    for candidate in typing.get_args(hint) or (hint,):
        if isinstance(candidate, type) and issubclass(candidate, View) and isinstance(value, dict):
            return candidate.of(value)
    return value


# ------------------------------------------------------------ from the schema

_JSON_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict,
               "null": type(None)}


def _python_type(name: str, spec: dict, sections: dict):
    """The annotation of a schema property: its section's view, or the union
    of its JSON types (an enum's: the types of its values)."""
    if name in sections:
        base = sections[name]
        return base | None if _nullable(spec) else base
    options = spec.get("oneOf") or spec.get("anyOf")
    if options and "type" not in spec and "enum" not in spec:
        types = {t for option in options for t in _json_types(option)}
    else:
        types = _json_types(spec)
    union = None
    for kind in sorted(types, key=lambda t: t.__name__):
        union = kind if union is None else union | kind
    return union


def _json_types(spec: dict) -> set:
    """The Python types of a schema's `type` (an enum's: its values' types)."""
    kinds = spec.get("type")
    if kinds is None and "enum" in spec:
        return {type(v) for v in spec["enum"]}
    return {_JSON_TYPES[k] for k in ([kinds] if isinstance(kinds, str) else kinds or ["object"])}


def _nullable(spec: dict) -> bool:
    kinds = spec.get("type", [])
    return "null" in ([kinds] if isinstance(kinds, str) else kinds) or None in spec.get("enum", [])


def _field(name: str, spec: dict, required: bool, sections: dict):
    doc = {"doc": " ".join(str(spec.get("description", "")).split())}
    hint = _python_type(name, spec, sections)
    if required and "default" not in spec:
        return name, hint, dataclasses.field(metadata=doc)
    if name in sections and spec.get("default") is not None:
        view, value = sections[name], spec["default"]
        return name, hint, dataclasses.field(default_factory=lambda: view.of(copy.deepcopy(value)), metadata=doc)
    default = spec.get("default")
    if isinstance(default, (list, dict)):
        return name, hint, dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=doc)
    return name, hint, dataclasses.field(default=default, metadata=doc)


def _has_default(entry) -> bool:
    spec = entry[2]
    return spec.default is not dataclasses.MISSING or spec.default_factory is not dataclasses.MISSING


def derive(name: str, spec: dict, sections: dict, keys=None, bases=(View,), skip=(), module: str | None = None) -> type:
    """A frozen dataclass of the schema object `spec` (its `keys`, all by
    default): a field per property, with the schema's type, default and
    description; required properties without a default come first."""
    properties = spec["properties"]
    keys = [k for k in (keys or properties) if k not in skip]
    required = set(spec.get("required", ()))
    fields = [_field(k, properties[k], k in required, sections) for k in keys]
    fields.sort(key=_has_default)
    module = module or bases[0].__module__  # pickle finds the class where it is bound
    namespace = {"__doc__": spec.get("description"), "__module__": module}
    return dataclasses.make_dataclass(name, fields, bases=bases, frozen=True, namespace=namespace)
