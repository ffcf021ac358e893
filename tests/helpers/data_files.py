"""Small local data files for the loaders' tests."""

from __future__ import annotations

import json

import datasets


def write(path, text, encoding="utf-8"):
    path.write_text(text, encoding=encoding)
    return str(path)


def save(tmp_path, fmt, rows):
    path = tmp_path / f"data.{fmt}"
    if fmt == "jsonl":
        write(path, "".join(json.dumps(r) + "\n" for r in rows))
    else:  # datasets writes csv with a header and standard quoting
        table = {k: [str(r[k]) if k == "label" else r[k] for r in rows]
                 for k in rows[0]}
        getattr(datasets.Dataset.from_dict(table), f"to_{fmt}")(str(path))
    return str(path)
