"""The configuration reference of docs/configuration.md, generated from the
config schema, and the MkDocs hook that checks it is current.

docs/configuration.md holds the reference between the two markers below,
checked in so that a clone reads it without building the site: one table per
section (key path, type or allowed values, default, description), walked
from workflow/schemas/config.schema.yaml, so no default or description is
ever copied by hand. Nested objects become sections of their own.

    python docs/hooks/config_reference.py     (make config-reference; make docs runs it first)

rewrites the text between the markers. At build time the hook warns when
that text is not what the schema gives, and when a key has no
`description`; `mkdocs build --strict` (make docs) turns either into a
failure. tests/unit/test_docs_pages.py checks the same without MkDocs.
"""

import json
import logging
from pathlib import Path

import yaml

MARKER, END = "<!-- config-reference -->", "<!-- /config-reference -->"
REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "workflow" / "schemas" / "config.schema.yaml"
PAGE = REPO / "docs" / "configuration.md"
log = logging.getLogger("mkdocs.hooks.config_reference")


def on_config(config):
    """Rebuild when the schema changes (`mkdocs serve`)."""
    config.watch.append(str(SCHEMA))
    return config


def on_page_markdown(markdown, page, config, files):
    """Warn (a failure under --strict) when the checked-in reference is not the schema's."""
    if MARKER in markdown and with_reference(markdown) != markdown:
        log.warning("docs/configuration.md: the reference is not the schema's: run make config-reference")
    return markdown


def reference():
    """The generated reference of the current schema."""
    return render_reference(yaml.safe_load(SCHEMA.read_text()))


def with_reference(markdown):
    """`markdown` with the text between the markers replaced by the generated reference."""
    before, rest = markdown.split(MARKER, 1)
    after = rest.split(END, 1)[1] if END in rest else rest
    return f"{before}{MARKER}\n\n{reference()}\n{END}{after}"


def main():
    PAGE.write_text(with_reference(PAGE.read_text()))
    print(f"{PAGE.relative_to(REPO)}: configuration reference written from {SCHEMA.relative_to(REPO)}")


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


if __name__ == "__main__":
    main()
