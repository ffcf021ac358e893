"""matplotlib for the report's and the plan's charts, imported on first use
with the Agg backend: those steps run on machines without a display, and
their tables need no matplotlib."""

from __future__ import annotations

from pathlib import Path


def pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: Path) -> None:
    """Write a PNG without a Software tag, so that reruns give the same bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight", metadata={"Software": None})
    pyplot().close(fig)
