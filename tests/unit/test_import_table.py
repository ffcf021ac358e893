"""common/import_table.py: transformers' models table read from a cache that
follows the models folder's files, equal to the table transformers builds."""

from __future__ import annotations

import os
from pathlib import Path

import transformers
from transformers.utils import import_utils

from workflow.scripts.common import import_table


def models_folder(root: Path) -> Path:
    (root / "bert").mkdir(parents=True)
    (root / "bert" / "modeling_bert.py").write_text("__all__ = ['BertModel']\n")
    (root / "bert" / "__pycache__").mkdir()
    return root


def counting(table: dict):
    calls = []

    def original(module_path, prefix=None):
        calls.append((str(module_path), prefix))
        return {frozenset(): {k: set(v) for k, v in table.items()}}
    return original, calls


def test_the_table_is_built_once_then_read(tmp_path):
    models = models_folder(tmp_path / "models")
    original, calls = counting({"models.bert.modeling_bert": {"BertModel"}})
    define = import_table.cached(original, tmp_path / "cache")
    first = define(models, prefix="models")
    first[frozenset()]["configuration_utils"] = {"PreTrainedConfig"}  # transformers adds its own names
    second = define(models, prefix="models")
    assert len(calls) == 1 and second == {frozenset(): {"models.bert.modeling_bert": {"BertModel"}}}
    assert [p.suffix for p in (tmp_path / "cache").iterdir()] == [".pickle"]  # no partial file left


def test_a_changed_or_added_file_builds_it_again(tmp_path):
    models = models_folder(tmp_path / "models")
    original, calls = counting({"models.bert.modeling_bert": {"BertModel"}})
    define = import_table.cached(original, tmp_path / "cache")
    define(models, prefix="models")
    (models / "bert" / "modeling_bert.py").write_text("__all__ = ['BertModel', 'BertForMaskedLM']\n")
    define(models, prefix="models")
    (models / "gpt2").mkdir()
    (models / "gpt2" / "modeling_gpt2.py").write_text("__all__ = []\n")
    define(models, prefix="models")
    (models / "bert" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"")  # not a source: same table
    define(models, prefix="models")
    assert len(calls) == 3


def test_a_model_packages_own_table_and_an_unwritable_cache_are_transformers_own_way(tmp_path):
    models = models_folder(tmp_path / "models")
    original, calls = counting({"models.bert.modeling_bert": {"BertModel"}})
    blocked = tmp_path / "file"
    blocked.write_text("")
    define = import_table.cached(original, blocked / "cache")  # cannot be made: a file is in the way
    assert define(models, prefix="models") == define(models, prefix="models")
    define(models / "bert")
    assert calls == [(str(models), "models")] * 2 + [(str(models / "bert"), None)]


def test_the_cached_table_of_the_installed_transformers_is_its_own(tmp_path):
    models = Path(transformers.__file__).parent / "models"
    # transformers' own, unwrapped from its lru_cache, whose table this process's
    # transformers has already added its own names to
    original = import_utils.define_import_structure.__wrapped__
    built = import_table.cached(original, tmp_path)(models, prefix="models")  # built and stored
    read = import_table.cached(original, tmp_path)(models, prefix="models")  # read back
    assert read == built == original(models, prefix="models")
    assert sum(len(names) for names in read.values()) > 1000  # every model's modules
    assert os.listdir(tmp_path) == [f"{import_table.fingerprint(str(models))}.pickle"]


def test_a_table_or_folder_another_user_could_write_is_never_read(tmp_path):
    """Unpickling runs what the file's writer put in it: the cache is read only
    from a folder and file of this user alone (common/private.py)."""
    models = models_folder(tmp_path / "models")
    original, calls = counting({"models.bert.modeling_bert": {"BertModel"}})
    define = import_table.cached(original, tmp_path / "cache")
    define(models, prefix="models")
    (table,) = (tmp_path / "cache").iterdir()
    assert (tmp_path / "cache").stat().st_mode & 0o777 == 0o700
    table.chmod(0o666)  # as if someone else could have written it
    define(models, prefix="models")
    assert len(calls) == 2 and table.stat().st_mode & 0o022 == 0  # built again, stored anew, owner-only
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    open_folder = import_table.cached(original, shared)
    open_folder(models, prefix="models")
    open_folder(models, prefix="models")
    assert len(calls) == 4 and not list(shared.iterdir())  # neither read nor written
