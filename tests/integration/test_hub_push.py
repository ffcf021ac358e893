"""deploy.push_to_hub's upload (infer/push.py, rule deploy_push) against the
fake Hub on loopback (tests/helpers/fake_hub.py, the network boundary): a
failed upload keeps the folder, and the command its line names uploads it."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest
from huggingface_hub import constants

from helpers import fake_hub
from helpers.messages import one_line
from helpers.workflow import REPO
from workflow.scripts.common.errors import UserError
from workflow.scripts.infer import push


def test_a_failed_upload_keeps_the_folder_and_its_command_uploads_it(tmp_path, monkeypatch):
    folder = tmp_path / "deploy"
    folder.mkdir()
    (folder / "deploy.json").write_text(json.dumps({"candidate": "fp32"}))
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "README.md").write_text("---\nlicense: apache-2.0\n---\n# the model card\n")
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens: the upload fails
    monkeypatch.setenv("HF_TOKEN", fake_hub.WRITE)
    with pytest.raises(UserError) as err:
        push.upload(folder, "me/tiny-mrpc")
    message = one_line(err)
    assert "the model is kept" in message and (folder / "model.safetensors").is_file()
    command = message.split("push it later with `")[1].rstrip("`")
    assert command == push.later(folder, "me/tiny-mrpc") and shlex.quote(str(REPO)) in command
    with fake_hub.running(tmp_path / "hub.log") as endpoint:  # the Hub is back: the printed command uploads
        env = {"PATH": "/usr/bin:/bin", "HF_ENDPOINT": endpoint, "HF_TOKEN": fake_hub.WRITE,
               "HF_HOME": str(tmp_path / "hf")}
        done = subprocess.run(["sh", "-c", command], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    (commit,) = [r for r in fake_hub.requests(tmp_path / "hub.log") if "/commit/" in r["path"]]
    assert commit["path"] == "/api/models/me/tiny-mrpc/commit/main"
    assert commit["files"] == ["README.md", "deploy.json", "model.safetensors"]
