"""Installed package versions, from metadata (nothing is imported)."""

from __future__ import annotations

import importlib.metadata as md
import platform


def installed(*packages: str, python: bool = False) -> dict:
    """Version of each package (None = not installed); `python` adds Python's."""
    found = {"python": platform.python_version()} if python else {}
    for name in packages:
        try:
            found[name] = md.version(name)
        except md.PackageNotFoundError:
            found[name] = None
    return found
