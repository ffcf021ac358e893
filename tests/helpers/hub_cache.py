"""A Hugging Face cache (HF_HOME/hub) holding a model as `hf download` leaves
it: refs/main naming a snapshot with its config and safetensors weights.
Only the files the config check looks for (settings/hub.py `cached`)."""

from __future__ import annotations

from pathlib import Path

SHA = "c0ffee" + "0" * 34


def cache_model(hf_home: Path, model: str) -> Path:
    """`model`'s snapshot folder in the cache of `hf_home`."""
    repo = hf_home / "hub" / ("models--" + model.replace("/", "--"))
    snapshot = repo / "snapshots" / SHA
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(SHA)
    (snapshot / "config.json").write_text("{}")
    (snapshot / "model.safetensors").write_bytes(b"")
    return snapshot
