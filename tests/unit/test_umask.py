"""Outputs follow the user's umask (DESIGN.md: a team shares a results
folder): the atomic writers give what a plain mkdir and open would, though
mkdtemp makes folders 0700 and safetensors' writer makes files 0600."""

from __future__ import annotations

import os
import stat

import pytest
import torch
from safetensors.torch import save_file

from workflow.scripts.common.atomic import atomic_dir, umask, write_json


@pytest.fixture(params=[0o022, 0o027], ids=["umask-0022", "umask-0027"])
def mask(request):
    previous = os.umask(request.param)
    yield request.param
    os.umask(previous)


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_umask_is_read_without_changing_it(mask):
    assert umask() == mask
    assert umask() == mask


def test_atomic_dir_gives_its_folders_and_files_the_umask_modes(tmp_path, mask):
    out = tmp_path / "results" / "model"
    with atomic_dir(out) as tmp:
        save_file({"w": torch.zeros(2)}, str(tmp / "model.safetensors"))  # 0600 as written
        (tmp / "sub").mkdir()
        (tmp / "sub" / "tool").write_text("#!/bin/sh\n")
        (tmp / "sub" / "tool").chmod(0o700)
        write_json(tmp / "deploy.json", {"ok": True})
    assert mode(out) == mode(out / "sub") == 0o777 & ~mask
    assert mode(out / "model.safetensors") == mode(out / "deploy.json") == 0o666 & ~mask
    assert mode(out / "sub" / "tool") == 0o777 & ~mask  # an executable stays one
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "file").write_text("x")
    assert (mode(out), mode(out / "deploy.json")) == (mode(plain), mode(plain / "file"))


def test_write_json_gives_a_plain_file_s_mode(tmp_path, mask):
    write_json(tmp_path / "logs" / "summary.json", {"runs": []})
    assert mode(tmp_path / "logs" / "summary.json") == 0o666 & ~mask
    assert mode(tmp_path / "logs") == 0o777 & ~mask
