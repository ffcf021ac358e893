"""MkDocs hook: the configuration reference, generated from the config schema.

docs/configuration.md holds the marker below; at build time it becomes one
table per section (key path, type or allowed values, default, description),
walked from workflow/schemas/config.schema.yaml, so no default or description
is ever copied by hand. Nested objects become sections of their own. A key
without a `description` is a warning, which `mkdocs build --strict` (make
docs) turns into a failure naming the key.
"""

import json
import logging
from pathlib import Path

import yaml

MARKER = "<!-- config-reference -->"
SCHEMA = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"
log = logging.getLogger("mkdocs.hooks.config_reference")


def on_config(config):
    """Rebuild when the schema changes (`mkdocs serve`)."""
    config.watch.append(str(SCHEMA))
    return config


def on_page_markdown(markdown, page, config, files):
    """Replace the marker of docs/configuration.md with the generated tables."""
    if MARKER not in markdown:
        return markdown
    schema = yaml.safe_load(SCHEMA.read_text())
    return markdown.replace(MARKER, render_reference(schema))


def render_reference(schema):
    """Markdown for the whole schema: top-level keys first, then one section per object."""
    sections = [("Top-level keys", "", schema)]
    sections += list(object_sections(schema, ""))
    return "\n\n".join(render_section(title, prefix, node) for title, prefix, node in sections) + "\n"


def object_sections(node, prefix):
    """Every nested object with its own properties, depth first: (title, key path, schema)."""
    for name, sub in node.get("properties", {}).items():
        if "properties" in sub:
            path = f"{prefix}{name}"
            yield f"`{path}` {{#{anchor(path)}}}", f"{path}.", sub
            yield from object_sections(sub, f"{path}.")


def render_section(title, prefix, node):
    """A heading, the object's own description, and a table of its keys."""
    level = "#" * (2 + prefix.count("."))
    lines = [f"{level} {title}", ""]
    if prefix and node.get("description"):
        lines += [cell(node["description"]), ""]
    lines += ["| key | type / values | default | description |", "|---|---|---|---|"]
    required = set(node.get("required", []))
    for name, sub in node.get("properties", {}).items():
        path = f"{prefix}{name}"
        if "description" not in sub:
            log.warning("config schema: %s has no description (workflow/schemas/config.schema.yaml)", path)
        key = f"`{path}`" + (" (required)" if name in required else "")
        see = f" See [`{path}`](#{anchor(path)})." if "properties" in sub else ""
        lines.append(f"| {key} | {type_of(sub)} | {default_of(sub)} | {cell(sub.get('description', ''))}{see} |")
    return "\n".join(lines)


def anchor(path):
    """The id of a section's heading: config-distributed, config-data-generate."""
    return "config-" + path.replace(".", "-").replace("_", "-")


def type_of(sub):
    """`enum` values, the JSON type(s), or the alternatives of `oneOf`, with bounds."""
    if "enum" in sub:
        return " \\| ".join(f"`{literal(v)}`" for v in sub["enum"])
    if "oneOf" in sub:
        return " or ".join(type_of(alt) for alt in sub["oneOf"])
    types = sub.get("type", "any")
    types = types if isinstance(types, list) else [types]
    words = []
    for kind in types:
        if kind == "array":
            words.append(f"list of {type_of(sub.get('items', {}))}")
        elif kind == "object" and isinstance(sub.get("additionalProperties"), dict):
            words.append(f"mapping of name to {type_of(sub['additionalProperties'])}")
        else:
            words.append(kind)
    return " or ".join(words) + bounds_of(sub)


def bounds_of(sub):
    """The numeric and length bounds, e.g. ` (>= 1)`, `(> 0, <= 1)`."""
    signs = {
        "minimum": ">=",
        "exclusiveMinimum": ">",
        "maximum": "<=",
        "exclusiveMaximum": "<",
        "minLength": "length >=",
    }
    found = [f"{sign} {literal(sub[name])}" for name, sign in signs.items() if name in sub]
    return f" ({', '.join(found)})" if found else ""


def default_of(sub):
    """The schema's default as YAML would write it; a dash when there is none."""
    if "default" not in sub:
        return "–"
    return f"`{literal(sub['default'])}`"


def literal(value):
    """A value as it is written in config.yaml: null, true, 2e-05, [10, 25], {}."""
    if isinstance(value, str):
        return value
    return json.dumps(value)


def one_line(text):
    """Folded YAML text as one line."""
    return " ".join(str(text).split())


def cell(text):
    """A description that is safe inside a Markdown table cell: `|` escaped, and
    `<experiment>` shown as text, not taken for HTML (code spans left alone)."""
    parts = one_line(text).replace("|", "\\|").split("`")
    parts[::2] = [part.replace("<", "&lt;").replace(">", "&gt;") for part in parts[::2]]
    return "`".join(parts)
