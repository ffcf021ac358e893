"""Model cards read back as a reader (or the Hub) reads them: the metadata with
huggingface_hub's ModelCard, the figures from the markdown tables under each heading."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import ModelCard


def tables(text: str) -> dict[str, list[list[str]]]:
    """heading (## or ###) -> the rows of the table under it, each a list of cells (header and rule left out)."""
    found, heading = {}, None
    for line in text.splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif line.startswith("|") and not ("-" in line and set(line) <= set("|-: ")):  # not the rule line
            found.setdefault(heading, []).append([c.strip() for c in line.strip().strip("|").split("|")])
    return {h: rows[1:] for h, rows in found.items()}  # the first row is the header


def pairs(text: str, heading: str) -> dict[str, str]:
    """A two-column table under `heading` as key -> cell."""
    return {row[0]: row[1] for row in tables(text)[heading]}


def number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def load(folder: Path) -> ModelCard:
    return ModelCard.load(Path(folder) / "README.md")


def check_deploy_card(folder: Path) -> None:
    """deploy/'s card against deploy.json: its figures and metrics are the deployed artifact's; every
    other candidate sits in the labelled table, with its reason."""
    import json

    meta = json.loads((Path(folder) / "deploy.json").read_text())
    card = load(folder)
    shown = pairs(card.text, "Deployment")
    for key in ("runtime", "precision", "samples_per_second", "latency_ms_p50", "latency_ms_p99",
                "speedup_vs_eager", *meta["metrics"]):
        value = meta["metrics"].get(key, meta.get(key))
        if value is None:
            assert key != "speedup_vs_eager" or shown[key].startswith("1 "), (key, shown)
            continue
        assert (number(shown[key]) == value) if isinstance(value, (int, float)) else shown[key] == value, \
            (key, shown[key], value)
    assert {r.metric_type: r.metric_value for r in card.data.eval_results} == meta["metrics"]
    assert f"This folder holds {meta['label']}" in card.text
    others = tables(card.text).get("Candidates not deployed", [])
    assert all(row[-1] for row in others) and meta["label"] not in [row[0] for row in others], others
