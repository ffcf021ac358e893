"""User-facing errors are one line (the project's standard)."""

from __future__ import annotations


def one_line(err) -> str:
    """The message of a pytest.raises result, asserted to be one line."""
    message = str(err.value)
    assert "\n" not in message
    return message
