"""The Intel stack for real: torch 2.8 + IPEX 2.8 + oneCCL bindings built
from source, 2 ranks through the workflow.

Runs only inside the Intel env, which `make test-intel` builds and marks
with CPUDDP_INTEL_STACK=1; the main env has neither IPEX, oneCCL nor the
torch they pair with, so there it is skipped. Two runs: the defaults (IPEX
auto, precision auto, backend auto, which picks ccl for 2 ranks on a node),
and `backend: ccl` with IPEX off in fp32.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.workflow import snakemake, write_config
from workflow.scripts.data import demo
from workflow.scripts.probes import hardware, intel, oneccl
from workflow.scripts.launch.supervise import pid_alive
from workflow.scripts.train import ccl_shm

pytestmark = [pytest.mark.intel,
              pytest.mark.skipif(os.environ.get("CPUDDP_INTEL_STACK") != "1",
                                 reason="the Intel env (torch 2.8 + IPEX 2.8): runs in `make test-intel`")]
RUN = "results/tiny/default"


CCL_RUN_SECONDS = 600  # a wrong oneCCL setting hangs both ranks: fail instead


def tiny_run(work: Path, tiny_model_dir: Path, train: dict | None = None, distributed: dict | None = None) -> Path:
    """One 2-rank workflow run (training, evaluation, summary) of a tiny BERT on demo MRPC."""
    data = work / "mrpc"
    demo.write_mrpc_demo(data, n_train=96, n_dev=40, seed=1)
    configfile = write_config(work / "tiny.yaml", {
        "experiment": "tiny",
        "task": "mrpc",
        "model": str(tiny_model_dir),
        "data": {"format": "glue_tsv", "train": str(data / "train.tsv"), "validation": str(data / "dev.tsv")},
        "train": {"epochs": 2, "batch_size": 8, "learning_rate": 1e-3, "max_seq_length": 64, "log_every": 2,
                  **(train or {})},
        "distributed": {"processes_per_node": 2, "threads_per_process": 1, **(distributed or {})},
    })
    snakemake(work, configfile, timeout=CCL_RUN_SECONDS)
    return work


@pytest.fixture(scope="module")
def ipex_run(tmp_path_factory, tiny_model_dir):
    """One workflow run with the defaults: ipex auto, precision auto, backend auto."""
    versions = intel.installed_versions()
    assert versions[intel.IPEX_MODULE], "CPUDDP_INTEL_STACK=1 but IPEX is not installed; run `make intel-venv`"
    return tiny_run(tmp_path_factory.mktemp("intel"), tiny_model_dir)


@pytest.fixture(scope="module")
def ccl_run(tmp_path_factory, tiny_model_dir):
    """`backend: ccl`, IPEX off, fp32: the bindings alone."""
    assert intel.installed_versions()[intel.CCL_PACKAGE], \
        "CPUDDP_INTEL_STACK=1 but oneccl_bind_pt is not installed; run `make intel-venv`"
    before = shm_regions()
    run = tiny_run(tmp_path_factory.mktemp("ccl"), tiny_model_dir, {"ipex": False, "precision": "fp32"},
                   {"backend": "ccl"})
    # Regions of live processes are another test's ranks, still running (the lane's parallel workers).
    LEFT_BEHIND[:] = sorted(r for r in shm_regions() - before if not pid_alive(int(r.split(":")[0])))
    return run


LEFT_BEHIND: list[str] = []  # what ccl_run's ranks left in /dev/shm


def shm_regions() -> set[str]:
    return {p.name for p in ccl_shm.SHM.glob("*:*:*") if ccl_shm.REGION.fullmatch(p.name)}


def read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def test_environment_picks_ipex_and_records_why(ipex_run):
    env = read_json(ipex_run / RUN / "environment.json")
    assert env["versions"]["torch"].startswith("2.8.")
    assert env["versions"][intel.IPEX_MODULE].startswith("2.8.")
    assert env["ipex"] is True and env["ipex_reason"].startswith("auto: intel_extension_for_pytorch 2.8")
    # auto: the compiled bindings import, and 2 ranks share the node's memory, where ccl pays
    assert env["backend"] == "ccl", env["backend_reason"]
    assert env["backend_reason"].startswith("auto: oneccl_bindings_for_pytorch imports; ranks of a node share")
    native = hardware.has_native_bf16(hardware.cpu_summary()["isa_flags"])
    # beside IPEX auto takes bf16 autocast, not bf16_master (probes/precision.beside_ipex)
    assert env["precision"] == ("bf16" if native else "fp32") or "measured" in env["precision_reason"]


def test_every_rank_trained_with_ipex(ipex_run):
    env = read_json(ipex_run / RUN / "environment.json")
    for rank in (0, 1):
        log = (ipex_run / f"logs/train_ddp/tiny/default/rank{rank}.log").read_text()
        assert "; ipex on (auto: intel_extension_for_pytorch 2.8" in log
        replaced = re.search(rf"IPEX optimized the model for training \({env['precision']}\): (\d+) modules", log)
        assert replaced, log
        if env["precision"] == "bf16":  # fp32 AdamW training: IPEX has no kernel to swap in
            assert int(replaced.group(1)) > 0, log


def test_ipex_training_stays_in_sync_and_learns(ipex_run):
    metrics = read_json(ipex_run / RUN / "train_metrics.json")
    assert metrics["ipex"] is True
    assert metrics["steps"] == 12  # 96 pairs / (8 x 2 ranks) x 2 epochs
    assert math.isfinite(metrics["final_loss"]) and metrics["train_samples_per_second"] > 0
    first, second = metrics["ranks"]
    assert first["weights_sha256"] == second["weights_sha256"]


def test_evaluation_used_ipex_inference(ipex_run):
    log = (ipex_run / "logs/evaluate_fp32/tiny/default.log").read_text()
    assert re.search(r"IPEX optimized the model for inference \(\w+\): [1-9]\d* modules replaced", log), log
    result = read_json(ipex_run / RUN / "eval_fp32.json")
    assert result["samples"] == 40 and 0.0 <= result["accuracy"] <= 1.0


def test_summary_and_saved_model(ipex_run):
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    (run,) = read_json(ipex_run / "results/tiny/summary.json")["runs"]
    assert run["world_size"] == 2 and run["eval"]["fp32"]["samples"] == 40
    model_dir = ipex_run / RUN / "model"
    model = AutoModelForSequenceClassification.from_pretrained(model_dir)
    assert next(model.parameters()).dtype == torch.float32  # plain fp32 weights, not IPEX's packed ones
    logits = model(**AutoTokenizer.from_pretrained(model_dir)("a", "b", return_tensors="pt")).logits
    assert logits.shape == (1, 2)


# ---------------------------------------------------------------- oneCCL, compiled here

def build_record() -> dict:
    """What `make intel-venv` recorded next to this env when it built the bindings."""
    path = Path(sys.prefix) / "ccl-build.json"
    assert path.is_file(), f"{path} missing: the bindings were not built by `make intel-venv`"
    return json.loads(path.read_text())


def sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_the_bindings_are_the_source_build():
    record = build_record()
    assert record["commit"].startswith("1fc0c38") and record["versions"]["oneccl_bind_pt"] == "2.8.0+cpu"
    assert record["versions"]["torch"] == intel.installed_versions()["torch"]
    assert record["versions"]["oneccl"] == "2022.1.2" and record["build_seconds"] > 0
    package = oneccl.ccl_package_dir()
    assert oneccl.build_record(package) == record and Path(record["package_dir"]) == package
    assert oneccl.oneccl_root(package) == Path(sys.prefix)  # oneCCL from PyPI, in this venv


def test_a_second_make_does_not_rebuild():
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(["make", "-q", "intel-venv", f"INTEL_VENV={sys.prefix}"], cwd=repo, capture_output=True,
                          timeout=60)
    assert done.returncode == 0, "make intel-venv would rebuild this env (stamps out of date)"


def test_ccl_run_records_ccl_and_what_was_set(ccl_run):
    env = read_json(ccl_run / RUN / "environment.json")
    assert (env["backend"], env["backend_reason"]) == ("ccl", "requested")
    assert env["ccl_build"] == build_record()
    assert env["versions"][intel.CCL_PACKAGE] == "2.8.0+cpu"
    want = {"CCL_ATL_TRANSPORT": "ofi", "CCL_ATL_SHM": "1", "CCL_WORKER_OFFLOAD": "0", "CCL_WORKER_COUNT": "1",
            "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "lo", "CCL_KVS_IFACE": "lo", "I_MPI_HYDRA_IFACE": "lo",
            "CCL_ROOT": sys.prefix}
    assert {k: env["ccl_env"].get(k) for k in want} == want and env["ccl_env_overridden"] == []


def test_a_ccl_run_leaves_no_shared_memory_behind(ccl_run):
    """libfabric's shm provider leaves each rank's 64 MiB region in /dev/shm
    (train/ccl_shm.py): the ranks unlink their own as they leave."""
    assert LEFT_BEHIND == []


def test_every_rank_ran_on_the_compiled_oneccl(ccl_run):
    metrics = read_json(ccl_run / RUN / "train_metrics.json")
    assert metrics["backend"] == metrics["process_group_backend"] == "ccl"
    built = build_record()["libraries_sha256"]
    for rank, record in enumerate(metrics["ranks"]):
        group = record["process_group"]
        assert (group["backend"], group["implementation"]) == ("ccl", "ProcessGroupCCL")  # not gloo inside
        libraries = group["libraries"]
        assert sha256(libraries["liboneccl_bindings_for_pytorch"]) == built["liboneccl_bindings_for_pytorch.so"]
        assert Path(libraries["libccl.so"]).parent == Path(sys.prefix) / "lib"
        assert group["env"]["CCL_LOCAL_RANK"] == str(rank) and group["env"]["CCL_LOCAL_SIZE"] == "2"
        assert group["env"]["CCL_ATL_SHM"] == "1" and group["env"]["CCL_KVS_IFACE"] == "lo"


def test_ccl_training_learns_and_stays_in_sync(ccl_run):
    metrics = read_json(ccl_run / RUN / "train_metrics.json")
    assert metrics["steps"] == 12 and metrics["ipex"] is False and metrics["precision"] == "fp32"
    losses = [loss for _, loss in metrics["loss_history"]]
    assert all(map(math.isfinite, losses))
    assert sum(losses[-2:]) / 2 < sum(losses[:2]) / 2, losses  # the loss falls
    assert len({r["weights_sha256"] for r in metrics["ranks"]}) == 1  # all-reduced gradients: equal weights
    result = read_json(ccl_run / RUN / "eval_fp32.json")
    assert result["samples"] == 40 and 0.0 <= result["accuracy"] <= 1.0
    for rank in (0, 1):
        log = (ccl_run / f"logs/train_ddp/tiny/default/rank{rank}.log").read_text()
        assert "backend ccl (requested)" in log and "'implementation': 'ProcessGroupCCL'" in log


def test_auto_run_trained_on_ccl_with_ipex(ipex_run):
    metrics = read_json(ipex_run / RUN / "train_metrics.json")
    assert metrics["process_group_backend"] == "ccl" and metrics["ipex"] is True
    assert {r["process_group"]["implementation"] for r in metrics["ranks"]} == {"ProcessGroupCCL"}
