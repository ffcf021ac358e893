"""The model fetched once (data/fetch_model.py) at its Hub boundary: the Hub's
snapshot_download is the only thing replaced; the copy, the file filter and
the one-line offline error are real."""

from __future__ import annotations

from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub.errors import LocalEntryNotFoundError

from workflow.helpers import stages
from workflow.scripts.data import model_copy
from workflow.scripts.common.errors import UserError
from workflow.scripts.data import fetch_model


def fake_snapshot(folder: Path) -> Path:
    """A snapshot as the Hugging Face cache holds it: files behind symlinks."""
    blobs, snapshot = folder / "blobs", folder / "snapshots" / ("a" * 40)
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for name, text in {"config.json": "{}", "model.safetensors": "w", "vocab.txt": "[PAD]"}.items():
        (blobs / name).write_text(text)
        (snapshot / name).symlink_to(blobs / name)
    return snapshot


def test_fetch_copies_the_snapshot_once_as_real_files(tmp_path, monkeypatch):
    snapshot, calls = fake_snapshot(tmp_path / "hub"), []

    def snapshot_download(repo_id, allow_patterns):
        calls.append((repo_id, allow_patterns))
        return str(snapshot)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    out = fetch_model.fetch("org/tiny-bert", tmp_path / "data" / "model")
    assert calls == [("org/tiny-bert", fetch_model.FILES)]
    assert "*.bin" not in fetch_model.FILES and "*.safetensors" in fetch_model.FILES  # never pickle
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "vocab.txt"]
    assert not any(p.is_symlink() for p in out.iterdir())  # a copy the nodes can receive as is
    assert not (tmp_path / "data" / "model.cpuddp-tmp").exists()


def test_offline_hub_is_one_line_naming_the_cache_and_the_docs(tmp_path, monkeypatch):
    def snapshot_download(repo_id, allow_patterns):
        raise LocalEntryNotFoundError("Cannot find an appropriate cached snapshot folder.\nsecond line")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    with pytest.raises(UserError) as err:
        fetch_model.fetch("org/tiny-bert", tmp_path / "model")
    message = str(err.value)
    assert "\n" not in message and "org/tiny-bert" in message
    assert "HF_HOME" in message and "hf download org/tiny-bert" in message
    assert "docs/clusters.md, Nodes without internet" in message
    assert not (tmp_path / "model").exists()


def test_a_snapshot_without_safetensors_is_refused(tmp_path, monkeypatch):
    snapshot = fake_snapshot(tmp_path / "hub")
    (snapshot / "model.safetensors").unlink()
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id, allow_patterns: str(snapshot))
    with pytest.raises(UserError, match="no safetensors"):
        fetch_model.fetch("org/tiny-bert", tmp_path / "model")


def test_ranks_and_tokenizer_read_the_copy_and_local_models_stay_in_place(minilm_dir):
    hub = {"experiment": "e", "task": "mrpc", "model": "org/tiny-bert", "train": {}, "distributed": {}}
    assert model_copy.local_model(hub) == "results/e/data/models/org--tiny-bert"
    assert stages.stage_config("train", hub)["model"] == "results/e/data/models/org--tiny-bert"
    assert stages.stage_config("tokenize", hub)["model"] == "results/e/data/models/org--tiny-bert"
    assert stages.stage_config("report", hub)["model"] == "org/tiny-bert"  # the report names the Hub id
    local = {**hub, "model": str(minilm_dir)}
    assert stages.stage_config("train", local)["model"] == str(minilm_dir)  # not copied
