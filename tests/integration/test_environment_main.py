"""Backend, precision and threads decisions, and environment.json."""

import json
import os
import sys
from pathlib import Path

import pytest

from workflow.scripts.settings import config as cfg
from workflow.scripts.nodes import check
from workflow.scripts.common.errors import UserError

BIN = Path(sys.executable).parent


# ---------------------------------------------------------------- backend
# oneccl_bindings_for_pytorch is not installed in this venv.


def test_main_writes_environment_json(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ['PATH']}")
    config = cfg.validate({"experiment": "x", "task": "mrpc", "model": "m", "train": {"precision": "fp32"},
                           "distributed": {"nodes": 1, "processes_per_node": 2, "threads_per_process": 1}})
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(config))
    out = tmp_path / "run" / "environment.json"
    check.main(["--config", str(config_path), "--out", str(out)])
    info = json.loads(out.read_text())
    for key in ("backend", "precision", "threads_per_process", "mpi", "world_size", "versions", "isa_flags"):
        assert key in info, key
    assert info["backend"] == "gloo"
    assert info["precision"] == "fp32"
    assert info["threads_per_process"] == 1
    assert info["world_size"] == 2
    assert info["mpi"]["flavour"] == "intel" and Path(info["mpi"]["mpirun"]).is_file()
    assert info["versions"]["torch"] and info["versions"]["python"]
    assert info["versions"]["oneccl_bind_pt"] is None
    assert isinstance(info["isa_flags"], list)
    assert [p.name for p in out.parent.iterdir()] == ["environment.json"]


def test_main_refuses_ccl(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ['PATH']}")
    config = cfg.validate({"experiment": "x", "task": "mrpc", "model": "m",
                           "distributed": {"backend": "ccl", "processes_per_node": 2}})
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(config))
    out = tmp_path / "environment.json"
    with pytest.raises(UserError, match="oneccl"):
        check.main(["--config", str(config_path), "--out", str(out)])
    assert not out.exists()
