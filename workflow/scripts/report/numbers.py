"""How figures read in every report output: the HTML tables, the chart
labels and the compare table. One place, so that a speedup or a metric is
written the same way wherever it appears."""

from __future__ import annotations


def is_number(value) -> bool:
    """An int or float; JSON's true/false are not figures."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def figure(value, missing: str = "—", thousands: bool = True) -> str:
    """A cell: `missing` for None, 4 significant digits for floats, ints
    grouped by thousands (if asked), anything else as its text."""
    if value is None:
        return missing
    if not is_number(value):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}" if thousands else str(value)
    return f"{value:.4g}"


def percent(value) -> str:
    """A share (0.8) as a whole percentage (80%)."""
    return "—" if value is None else f"{100 * value:.0f}%"


def ratio(a, b, missing: str = "") -> str:
    """b / a as a speedup (2.50x) when both are numbers and a is not 0."""
    return f"{b / a:.2f}x" if is_number(a) and is_number(b) and a else missing
