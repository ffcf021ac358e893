"""Across nodes: the per-node check and a real DDP run over a network.

Root only (`make test-multinode`): makes three test hosts with `ip netns` (own address each, one bridge), lists
them in a hostfile and reaches them through Intel MPI's ssh bootstrap with
tests/netns/enter as `ssh`; the namespaces are removed whatever happens.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.hosts_run import ccl_env_tried, check_config, cluster_file, drop_experiment, \
    final_weights, host_env, on_host, run_check, tiny_experiment, xeon_run
from helpers.workflow import REPO
from workflow.scripts.nodes import setup as node_setup

from helpers.netns_cluster import needs_root, netns, netns_cluster
from helpers.background import Background


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three test hosts; removed at the end whatever happened."""
    yield from netns_cluster(tmp_path_factory, 3)


@needs_root
def test_ddp_training_across_hosts_through_profiles_xeon(cluster):
    """Two hosts, one rank each, meeting at the first host's address."""
    work, hosts, mapping = cluster
    experiment = tiny_experiment(work, "tiny", env={"EVIL": "a b;touch pwned"})
    done, elapsed = xeon_run(cluster, experiment)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]

    run = work / "results/tiny/default"
    env = json.loads((run / "environment.json").read_text())
    assert [n["host"] for n in env["node_reports"]] == [hosts[0].name, hosts[1].name]
    assert env["gloo_ifname"] == netns.IFACE and len({n["revision"] for n in env["node_reports"]}) == 1
    metrics = json.loads((run / "train_metrics.json").read_text())
    assert metrics["world_size"] == 2
    assert [r["host"] for r in metrics["ranks"]] == [hosts[0].name, hosts[1].name]  # different hosts
    assert len({r["weights_sha256"] for r in metrics["ranks"]}) == 1  # DDP kept them equal over the network
    launch_line = (work / "logs/train_ddp/tiny/default.log").read_text()
    assert f"-genv MASTER_ADDR {hosts[0].address}" in launch_line  # resolved from the hostfile's name
    assert "-genv GLOO_SOCKET_IFNAME cpd0" in launch_line
    assert not (work / "pwned").exists()
    summary = json.loads((work / "results/tiny/summary.json").read_text())["runs"][0]
    assert summary["nodes"] == 2 and summary["world_size"] == 2 and summary["mpi"].startswith("intel")
    print(f"\nmultinode: workflow {elapsed:.0f} s, training {metrics['train_samples_per_second']:.1f} samples/s "
          f"across 2 namespaces")


needs_ccl = pytest.mark.skipif(importlib.util.find_spec("oneccl_bindings_for_pytorch") is None,
                               reason="oneCCL bindings not installed: runs in `make test-intel` (the Intel env)")


@needs_root
@needs_ccl
@pytest.mark.intel
@pytest.mark.timeout(420)
def test_ccl_training_across_hosts(cluster):
    """`backend: ccl` over the test hosts' network: oneCCL pinned to their
    interface (cpd0), never to this machine's own; both ranks on ProcessGroupCCL."""
    work, hosts, mapping = cluster
    experiment = tiny_experiment(work, "tinyccl", backend="ccl")
    done, elapsed = xeon_run(cluster, experiment, timeout=300)
    logs = work / "logs/train_ddp/tinyccl/default"
    tails = "".join(f"\n--- rank {r}: " + "\n".join((logs / f"rank{r}.log").read_text().splitlines()[-15:])
                    for r in (0, 1) if (logs / f"rank{r}.log").exists())
    assert done.returncode == 0, ("ccl across test hosts failed; tried " + json.dumps(ccl_env_tried(work)) +
                                  "\n" + done.stderr[-4000:] + tails)
    run = work / "results/tinyccl/default"
    env = json.loads((run / "environment.json").read_text())
    assert env["backend"] == "ccl" and env["gloo_ifname"] == netns.IFACE
    tuned = {k: env["ccl_env"].get(k) for k in ("FI_TCP_IFACE", "CCL_KVS_IFACE", "I_MPI_HYDRA_IFACE", "CCL_ATL_SHM")}
    assert tuned == {"FI_TCP_IFACE": netns.IFACE, "CCL_KVS_IFACE": netns.IFACE, "I_MPI_HYDRA_IFACE": netns.IFACE,
                     "CCL_ATL_SHM": None}  # one rank per host: nothing to share
    metrics = json.loads((run / "train_metrics.json").read_text())
    assert [r["host"] for r in metrics["ranks"]] == [hosts[0].name, hosts[1].name]
    assert {r["process_group"]["implementation"] for r in metrics["ranks"]} == {"ProcessGroupCCL"}
    assert len({r["weights_sha256"] for r in metrics["ranks"]}) == 1
    print(f"\nmultinode ccl: workflow {elapsed:.0f} s, training {metrics['train_samples_per_second']:.1f} "
          f"samples/s across 2 namespaces")


@needs_root
def test_unreachable_nodes_are_named_in_bounded_time(cluster):
    work, hosts, mapping = cluster
    with mapping.open("a") as handle:
        handle.write("ghost blackhole\n")  # ssh that never connects; "nowhere" is not in the map at all
    done, _, elapsed = run_check(cluster, [hosts[0].name, "ghost", "nowhere"], check_timeout_seconds=8)
    assert done.returncode == 1
    error = done.stderr.strip().splitlines()[-1]
    assert "node ghost did not answer within 8 s" in error
    assert "node nowhere did not answer" in error and "Could not resolve hostname nowhere" in error
    assert f"node {hosts[0].name} " not in error
    print(f"\n{error}\n(after {elapsed:.1f} s)")
    assert elapsed < 60


@needs_root
def test_mismatched_versions_and_revision_name_the_node(cluster, tmp_path):
    """Host 3 gets its own torch metadata and Snakefile (bind mounts): a node
    with another torch and another copy of the workflow."""
    work, hosts, mapping = cluster
    import torch

    meta = next(Path(torch.__file__).parents[1].glob("torch-*.dist-info")) / "METADATA"
    fake_meta = tmp_path / "METADATA"
    fake_meta.write_text(meta.read_text().replace(f"Version: {torch.__version__}", "Version: 2.12.0", 1))
    fake_snakefile = tmp_path / "Snakefile"
    fake_snakefile.write_text((REPO / "Snakefile").read_text() + "\n# edited on this node\n")
    with mapping.open("a") as handle:
        handle.write(f"odd {hosts[2].namespace} {fake_meta}:{meta} {fake_snakefile}:{REPO / 'Snakefile'}\n")
    done, _, _ = run_check(cluster, [hosts[0].name, "odd"])
    assert done.returncode == 1
    error = done.stderr.strip().splitlines()[-1]
    assert f"node odd has torch 2.12.0 but node {hosts[0].name} has torch {torch.__version__}" in error
    assert "node odd has workflow revision" in error and "setup_nodes" in error


@needs_root
def test_setup_nodes_gives_a_node_without_the_workflow_a_copy(cluster, tmp_path):
    """Host 2 sees its own empty folder where the launch node has the workflow:
    the check names it; setup copies the workflow there; the check passes."""
    work, hosts, mapping = cluster
    src = tmp_path / "src"
    src.mkdir()
    for name in node_setup.SETUP_PATHS:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif (REPO / name).is_file():
            shutil.copy2(REPO / name, src / name)
    # no network here: the copy's `make venv` only says where it would build
    (src / "Makefile").write_text("venv:\n\t@echo would build .venv in $(CURDIR)\n")
    disk = tmp_path / "node-disk"
    disk.mkdir()
    with mapping.open("a") as handle:
        handle.write(f"bare {hosts[1].namespace} {disk}:{src}\n")
    names = [hosts[0].name, "bare"]

    before, _, _ = run_check(cluster, names, cwd=src)
    assert before.returncode == 1 and "node bare did not answer" in before.stderr
    assert "No module named 'workflow'" in before.stderr

    # the experiment's data (rule data_fetch_model's model, the tokenized data)
    data = src / "results/x/data"
    for name, content in {"model/config.json": b"{}", "model/model.safetensors": bytes(range(256)) * 64,
                          "tokenized/train/data-00000.arrow": b"arrow"}.items():
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        (data / name).write_bytes(content)
    config = check_config(work, cluster_file(work, names))
    setup = subprocess.run(on_host(hosts[0], [sys.executable, "-m", "workflow.scripts.nodes.setup",
                                              "--config", str(config), "--timeout", "120", "--data", str(data)]),
                           capture_output=True, text=True, cwd=src, timeout=180,
                           env=host_env(mapping, PYTHONPATH=str(src)))
    assert setup.returncode == 0, setup.stderr[-3000:]
    assert f"node {hosts[0].name}: workflow copy in {src} (0 files written)" in setup.stderr  # already there
    assert "node bare: workflow copy" in setup.stderr and (disk / "workflow/scripts/nodes/check.py").is_file()
    # the launch node sees the same files (a shared filesystem): not copied; the bare node gets them
    assert f"node {hosts[0].name}: workflow copy in {src} (0 files written), .venv ready; data in {data}: the " \
        "same files already there, not copied" in setup.stderr
    copied = disk / "results/x/data"
    assert (copied / "model/model.safetensors").read_bytes() == (data / "model/model.safetensors").read_bytes()
    assert (copied / "tokenized/train/data-00000.arrow").read_bytes() == b"arrow"

    after, out, _ = run_check(cluster, names, cwd=src)
    assert after.returncode == 0, after.stderr[-3000:]
    assert [n["host"] for n in json.loads(out.read_text())["node_reports"]] == names


@needs_root
def test_a_lost_node_is_dropped_at_retry_and_the_run_finishes_on_the_rest(cluster, tmp_path):
    """Two hosts; once checkpoint 10 is written, the second host leaves the
    network for good. The try fails (the collective times out), the retry
    finds it unreachable and goes on alone with accumulation 2 (same global
    batch, same updates); the weights match the uninterrupted run's up to
    the sum order of the all-reduce."""
    work, hosts, mapping = cluster
    settings = {"min_nodes": 1, "retries": 1, "timeout_minutes": 0.25, "exit_grace_seconds": 5,
                "check_timeout_seconds": 8}
    reference_work, broken = tmp_path / "reference", tmp_path / "broken"
    for folder in (reference_work, broken):
        folder.mkdir()
    pair = [hosts[0].name, hosts[1].name]
    reference = drop_experiment(reference_work, cluster_file(work, pair, **settings),
                                "results/drop/default/train_metrics.json")  # the weights only
    done = subprocess.run(on_host(hosts[0], reference),
                          capture_output=True, text=True, timeout=400, env=host_env(mapping))
    assert done.returncode == 0, done.stderr[-4000:]
    original_map = mapping.read_text()
    job = Background(on_host(hosts[0], drop_experiment(broken, cluster_file(work, pair, **settings),
                                                       "results/drop/default/train_metrics.json")),
                     env=host_env(mapping))
    switch = hosts[0].namespace.rsplit("-", 1)[0] + "-sw"
    try:
        marker = broken / "results/drop/default/checkpoints/step-00000010/COMPLETE"
        deadline = time.time() + 300
        while not marker.is_file():
            assert job.poll() is None and time.time() < deadline, "checkpoint 10 never appeared"
            time.sleep(0.05)
        subprocess.run(["ip", "-n", switch, "link", "set", "p1", "down"], check=True)  # off the network
        mapping.write_text(original_map.replace(f"{hosts[1].name} {hosts[1].namespace}",
                                                f"{hosts[1].name} blackhole"))  # and ssh never answers
        out, _ = job.communicate(timeout=600)
    finally:
        job.kill()
        mapping.write_text(original_map)
        subprocess.run(["ip", "-n", switch, "link", "set", "p1", "up"], check=False)
    assert job.returncode == 0, out[-5000:]
    tries = json.loads((broken / "results/drop/default/tries.json").read_text())
    assert [t["outcome"] for t in tries] == ["failed", "ok"]
    assert tries[1]["dropped"] == [hosts[1].name] and tries[1]["hosts"] == [hosts[0].name]
    assert tries[1]["resumed_from_step"] >= 10
    metrics = json.loads((broken / "results/drop/default/train_metrics.json").read_text())
    assert metrics["world_size"] == 1 and metrics["gradient_accumulation_steps"] == 2
    assert metrics["global_batch"] == 16 and metrics["steps"] == 40
    reference, continued = final_weights(reference_work), final_weights(broken)
    difference = max(float((reference[k] - continued[k]).abs().max()) for k in reference)
    print(f"\nnode {hosts[1].name} dropped at step {tries[1]['resumed_from_step']}; largest weight difference to "
          f"the uninterrupted 2-host run: {difference:.2e}")
    assert difference <= 1e-6  # as tests/integration/test_accumulation.py: sum order only (measured there: 6e-8)
