"""train.speed.allocator keep: the blocks a step frees are reused as they
are by the next step, not handed back to the kernel and faulted in again
as fresh pages. Each case runs in a fresh Python process, as a rank starts
(the kernel counts its minor page faults). glibc's own defaults adapt
their threshold to the blocks freed, and where the heap lands decides how
well: in fresh processes on the AMX Xeon they faulted 11,000-17,000 of
this step's 20,400 pages in again every step in four runs of six, and
146 then none in two. Their fixed form (release: 128 KB) faults them every
step; keep, none."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers.workflow import REPO

# A step's activations, held together and freed at its end (bytes): MiniLM's
# feed-forward rows at a batch of 16 (2.6 MB), larger and smaller blocks.
STEP = [2_600_000] * 12 + [16 << 20, 8 << 20, 600_000] * 2
PROGRAM = """
import json, resource, sys
import torch
from workflow.scripts.train import allocator
assert {"keep": allocator.keep_freed, "release": allocator.release_freed}[sys.argv[1]]() is None
def step():
    held = [torch.empty(size, dtype=torch.uint8).fill_(1) for size in json.loads(sys.argv[2])]
    del held
def faults():
    step(), step(), step()  # warm: the first rounds also grow Python's own arenas (146 pages seen)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    step()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(json.dumps([faults() for _ in range(3)]))
"""


def faults_per_step(mode: str) -> list[int]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, "-c", PROGRAM, mode, json.dumps(STEP)], capture_output=True, text=True,
                          env=env, timeout=120, check=True)
    return json.loads(done.stdout)


def glibc() -> bool:
    try:
        return bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (ValueError, OSError):
        return False


@pytest.mark.skipif(not glibc(), reason="mallopt is glibc's")
def test_keep_reuses_a_steps_memory_where_glibcs_defaults_fault_it_in_again():
    pages = sum(STEP) // 4096
    assert min(faults_per_step("release")) > pages // 2
    assert max(faults_per_step("keep")) < 100
