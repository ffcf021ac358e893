"""The C kernels when they load (issue 73): each checks its own result, the
attention against torch's on a small input, and a build that computes
something else is refused in one line and not used; the ranks of a node
that load at once build once, under the cache folder's lock."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers.tiny_family import tiny_hf
from workflow.scripts.train import dropout_kernel, encoder, kernel_build, speed

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")

ROOT = Path(__file__).resolve().parents[2]


def broken_attention(tmp_path: Path) -> Path:
    """dropout_kernel.c with the attention's scores scaled twice: its dropout untouched."""
    text = dropout_kernel.SOURCE.read_text()
    wrong = text.replace("queries[i] *= scaling;", "queries[i] *= 2.0f * scaling;")
    assert wrong != text
    path = tmp_path / "dropout_kernel.c"
    path.write_text(wrong)
    return path


def test_a_wrong_attention_kernel_is_refused_in_one_line_and_not_used(tmp_path, monkeypatch):
    source = broken_attention(tmp_path)
    kernel, why = dropout_kernel.build("cc", tmp_path / "cache", source)
    assert kernel is None and "\n" not in why
    assert why.endswith("its attention is not torch's on a small input (a miscompiled build?): not used")
    monkeypatch.setattr(dropout_kernel, "load", lambda: (kernel, why))  # as this build would load in a run
    model, _ = encoder.build(tiny_hf("Bert", "classification"), "classification", hash_dropout=True)
    assert model.encoder.kernel is None  # torch's attention and dropout, and the run's levers line says why:
    assert speed.ENCODER["dropout_mask"](model, "hash", None) == f"off: torch: {why}"
    lib, _ = kernel_build.compile_and_load(source, "cc", tmp_path / "cache")  # the same build, unchecked:
    unchecked = dropout_kernel.Kernel(lib)
    assert unchecked.agrees_with_its_definition() and not unchecked.attention_is_torchs()  # the attention's check
    good, where = dropout_kernel.build("cc", tmp_path / "cache")
    assert good is not None and good.attention_is_torchs(), where


LOADER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from workflow.scripts.train import dropout_kernel
    ready, count = Path(sys.argv[1]), int(sys.argv[2])
    (ready / str(os.getpid())).touch()
    while len(list(ready.iterdir())) < count:  # all imported: load at once, as a node's ranks do
        time.sleep(0.01)
    kernel, where = dropout_kernel.load()
    print("working" if kernel is not None and kernel.computes_its_definitions() else f"refused: {where}")
""")


def test_ranks_loading_at_once_build_once_and_all_get_a_working_kernel(tmp_path):
    ranks, ready, cache = 4, tmp_path / "ready", tmp_path / "cache"
    ready.mkdir()
    env = {**os.environ, "CPUDDP_KERNEL_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    processes = [subprocess.Popen([sys.executable, "-c", LOADER, str(ready), str(ranks)], env=env, cwd=ROOT,
                                  stdout=subprocess.PIPE, text=True) for _ in range(ranks)]
    said = [process.communicate(timeout=600)[0].strip() for process in processes]
    assert said == ["working"] * ranks
    logs = list(cache.glob("*/build.log"))
    assert len(logs) == 1 and len(logs[0].read_text().splitlines()) == 1, [log.read_text() for log in logs]
    assert not list(cache.glob("*/.build-*"))  # no temporary left over
