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
import torch

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


def test_a_compiler_without_openmp_builds_the_kernels_whose_calls_then_run_on_python_threads(tmp_path):
    """A compiler that refuses -fopenmp (clang without libomp, say; here a wrapper of cc) still builds
    both kernels: the build is retried without it, the *_calls entry points run one call after the
    other, and the kernels take kernel_build.run's Python threads with the same bits."""
    from workflow.scripts.train import master_kernel

    wrapper = tmp_path / "cc-no-openmp"
    wrapper.write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = -fopenmp ] && { echo "error: unsupported option '
                       "'-fopenmp'\" >&2; exit 1; }; done\nexec cc \"$@\"\n")
    wrapper.chmod(0o700)
    dropout, why = dropout_kernel.build(str(wrapper), tmp_path / "cache")
    master, why_master = master_kernel.build(str(wrapper), tmp_path / "cache")
    assert dropout is not None and master is not None, (why, why_master)
    assert not kernel_build.links_openmp(dropout.lib) and not kernel_build.links_openmp(master.lib)
    assert not dropout.openmp and not master.openmp
    with_openmp = dropout_kernel.build("cc", tmp_path / "cache-openmp")[0]
    assert kernel_build.links_openmp(with_openmp.lib)  # cc has OpenMP: the check tells the two builds apart
    x = torch.randn(3 * dropout_kernel.PIECE + 7)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert torch.equal(dropout.dropout(x, 99, dropout_kernel.dropped(0.1), 1.25),
                           with_openmp.dropout(x, 99, dropout_kernel.dropped(0.1), 1.25))
    finally:
        torch.set_num_threads(threads)
