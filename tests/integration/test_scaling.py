"""Scaling on a shaped network: four test hosts (ip netns on a bridge,
tests/netns/hosts.py), each link given a bandwidth with tc tbf and, where
the kernel has sch_netem, a latency (tests/netns/shape.py); real gloo DDP
across them through the launcher, with Intel MPI's ssh bootstrap entering
the hosts (tests/netns/enter); the scaling plan checked against it.

Root only, and only with CPUDDP_SCALING=1 (`make test-scaling` sets it and
these; defaults in brackets), since its timings want a quiet machine:
  CPUDDP_SCALING_GBIT        bandwidths in Gbit/s ["0.5 1"]
  CPUDDP_SCALING_LATENCY_US  one-way latency added per message [0: the veth's own]
  CPUDDP_SCALING_HOSTS       host counts [2 3 4]
  CPUDDP_SCALING_TOLERANCE   plan against measured step time [0.15]
  CPUDDP_SCALING_TIMING      "gate": a timing outside its bound fails the
                             test ["gate"]; "report": it prints one line
                             "scaling timing miss: ..." and the test goes
                             on (CI: a VM's neighbours move timings, and a
                             speed target is a benchmark, not a gate). A
                             run that fails or hangs fails either way.

All "hosts" share this machine's cores: host i runs on core i mod cores
(taskset through the map), so 3 or 4 hosts put 2 ranks on a core. The plan
is fed what a node's step costs under that same sharing: as many one-rank
trainings as hosts (the real training loop, no network) run at once, pinned
alike, and the slowest one's step is the node's (DDP waits for the slowest
rank); the step's shape (forward, backward, when each gradient is ready)
comes from plan/profile.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.workflow import BIN, REPO
from workflow.scripts.settings import config as cfg
from workflow.scripts.nodes import describe
from workflow.scripts.settings.views import EnvironmentView
from workflow.scripts.plan.scaling_model import Levers, Network, Profile, allreduce_seconds, fit_network, predict

sys.path.insert(0, str(REPO / "tests" / "netns"))
import hosts as netns
import shape

ENTER = REPO / "tests" / "netns" / "enter"
GBIT = [float(g) for g in os.environ.get("CPUDDP_SCALING_GBIT", "0.5 1").split()]
LATENCY_US = float(os.environ.get("CPUDDP_SCALING_LATENCY_US", "0"))
HOSTS = [int(h) for h in os.environ.get("CPUDDP_SCALING_HOSTS", "2 3 4").split()]
TOLERANCE = float(os.environ.get("CPUDDP_SCALING_TOLERANCE", "0.15"))
TIMING = os.environ.get("CPUDDP_SCALING_TIMING", "gate")
CORES = len(os.sched_getaffinity(0))
BATCH, SEQ_LEN, STEPS = 8, 64, 9  # DDP rebuilds buckets after step 1; steps 3-8 are timed


def timing_holds(ok: bool, miss: str) -> None:
    """A timing's bound: fails the test, or under CPUDDP_SCALING_TIMING=report
    prints the miss in one line (the runs behind it have already succeeded)."""
    if ok:
        return
    if TIMING == "report":
        print(f"\nscaling timing miss: {miss}", flush=True)
        return
    pytest.fail(miss)


pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(os.environ.get("CPUDDP_SCALING") != "1",
                       reason="a timing on a shaped network: runs in `make test-scaling` (CPUDDP_SCALING=1)"),
    pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc")
                       or not shutil.which("taskset"), reason="test hosts need root, iproute2 (ip, tc), taskset"),
    pytest.mark.timeout(900),
]


@pytest.fixture(scope="module", autouse=True)
def venv_first_on_path():
    """Intel MPI's mpirun (the venv's) runs the hydra it finds on PATH."""
    old = os.environ["PATH"]
    os.environ["PATH"] = f"{BIN}{os.pathsep}{old}"
    yield
    os.environ["PATH"] = old


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Four hosts, host i on core i mod cores; removed whatever happens."""
    if LATENCY_US and not shape.netem_available():
        pytest.fail(f"latency {LATENCY_US:g} us needs sch_netem, which this kernel lacks "
                    "(CONFIG_NET_SCH_NETEM); run with LATENCY_US=0 (the links' own latency, measured)")
    netns.sweep()
    work = tmp_path_factory.mktemp("scaling")
    prefix, hosts, mapping = netns.create(max(HOSTS), work)
    mapping.write_text("".join(f"{h.name} {h.namespace} cpus={i % CORES}\n{h.address} {h.namespace} "
                               f"cpus={i % CORES}\n" for i, h in enumerate(hosts)))
    try:
        yield work, prefix, hosts, mapping
    finally:
        netns.remove(prefix)
        assert not [ns for ns in netns.namespaces() if ns.startswith(prefix)]


@pytest.fixture(scope="module")
def experiment(cluster, tiny_model_dir):
    """A 4-layer, 128-wide BERT (19 MB of gradients, 80% in the word
    embeddings) and inputs that all fill SEQ_LEN tokens."""
    from transformers import AutoConfig, AutoTokenizer, BertModel
    import torch

    from workflow.scripts.data import load, tokenize

    work = cluster[0]
    model = work / "bert-128"
    config = AutoConfig.from_pretrained(tiny_model_dir)
    config.update({"hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 512})
    torch.manual_seed(0)
    BertModel(config).save_pretrained(model)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(model)
    long = " ".join(["the river market teacher garden engine letter window doctor city song"] * 8)
    rows = [f"{i % 2}\t{i}\t{1000 + i}\t{long} {i}\t{long} {i}\n" for i in range(64)]
    header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
    (work / "train.tsv").write_text(header + "".join(rows))
    (work / "dev.tsv").write_text(header + "".join(rows[:8]))
    base = cfg.validate({
        "experiment": "scaling", "task": "mrpc", "model": str(model),
        "data": {"format": "glue_tsv", "train": str(work / "train.tsv"), "validation": str(work / "dev.tsv")},
        "train": {"epochs": 100, "max_steps": STEPS, "batch_size": BATCH, "max_seq_length": SEQ_LEN,
                  "precision": "fp32", "checkpoint_every": 0, "log_every": 100},
        "distributed": {"backend": "gloo", "processes_per_node": 1, "threads_per_process": 1, "mpi": "intel",
                        "timeout_minutes": 3, "exit_grace_seconds": 20, "retries": 0,
                        "bucket_cap_mb": 2}})
    (work / "data.json").write_text(json.dumps(base))
    load.main(["--config", str(work / "data.json"), "--out", str(work / "raw")])
    tokenize.main(["--config", str(work / "data.json"), "--data", str(work / "raw"), "--out", str(work / "tok")])
    return base


def host_env(mapping: Path) -> dict:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(REPO),
            "HF_HUB_OFFLINE": "1", "CPUDDP_NETNS_MAP": str(mapping)}


def run_config(cluster, base: dict, nodes: int) -> tuple[Path, Path]:
    """train.json and environment.json of a run on the first `nodes` hosts."""
    work, _, hosts, _ = cluster
    folder = work / f"run-{nodes}-{time.monotonic_ns()}"
    folder.mkdir()
    (folder / "hostfile").write_text("".join(f"{h.name}\n" for h in hosts[:nodes]))
    config = json.loads(json.dumps(base))
    config["distributed"].update(hostfile=str(folder / "hostfile"), nodes=nodes, launcher_args=[
        "-bootstrap", "ssh", "-bootstrap-exec", str(ENTER), "-iface", netns.IFACE])
    view = EnvironmentView.pick(config)
    info = describe.environment_record(view.distributed, view.train)
    info.update(gloo_ifname=netns.IFACE, nodes=nodes, world_size=nodes)
    (folder / "train.json").write_text(json.dumps(config))
    (folder / "environment.json").write_text(json.dumps(info))
    return folder, folder / "train.json"


def on_first_host(cluster, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
    _, _, hosts, mapping = cluster
    command = ["ip", "netns", "exec", hosts[0].namespace, "unshare", "--uts", "sh", "-c",
               'hostname "$0" && exec "$@"', hosts[0].name, *argv]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          env=host_env(mapping))
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def measure_network(cluster, base: dict) -> Network:
    """All-reduce times on 2..4 hosts (one launch), fitted."""
    folder, train_json = run_config(cluster, base, max(HOSTS))
    on_first_host(cluster, [sys.executable, "-m", "workflow.scripts.plan.network", "--config", str(train_json),
                            "--environment", str(folder / "environment.json"), "--out", str(folder / "net.json"),
                            "--log-dir", str(folder / "logs"), "--repeats", "3"], timeout=300)
    points = json.loads((folder / "net.json").read_text())["points"]
    return points, fit_network(points)


def train(cluster, base: dict, nodes: int) -> dict:
    folder, train_json = run_config(cluster, base, nodes)
    env_json, logs = folder / "environment.json", folder / "logs"
    work = cluster[0]
    on_first_host(cluster, [
        sys.executable, "-m", "workflow.scripts.launch", "--config", str(train_json), "--environment", str(env_json),
        "--log-dir", str(logs), "--", sys.executable, "-m", "workflow.scripts.train.rank", "--config",
        str(train_json), "--environment", str(env_json), "--data", str(work / "tok"), "--out", str(folder),
        "--log-dir", str(logs)], timeout=300)
    return json.loads((folder / "train_metrics.json").read_text())


@pytest.fixture(scope="module")
def step_shape(cluster, experiment) -> Profile:
    """One rank's step alone: forward, backward, update and when each
    gradient is ready (plan/profile.py), for the shape of the step."""
    folder, train_json = run_config(cluster, experiment, 1)
    done = subprocess.run(["taskset", "-c", "0", sys.executable, "-m", "workflow.scripts.plan.profile", "--config",
                           str(train_json), "--environment", str(folder / "environment.json"), "--out",
                           str(folder / "profile.json"), "--steps", "5", "--warmup", "2"],
                          cwd=REPO, env=host_env(cluster[3]), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return Profile.from_dict(json.loads((folder / "profile.json").read_text()))


def contended_step(cluster, base: dict, nodes: int) -> float:
    """One node's step while `nodes` ranks share the cores as on the test
    hosts: as many one-rank trainings at once (the real loop, no network),
    pinned alike; the slowest one's mean update counts."""
    work = cluster[0]
    folders = []
    procs = []
    for i in range(nodes):
        folder, train_json = run_config(cluster, base, 1)
        env = {**host_env(cluster[3]), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(29700 + i)}
        procs.append(subprocess.Popen(
            ["taskset", "-c", str(i % CORES), sys.executable, "-m", "workflow.scripts.train.rank", "--config",
             str(train_json), "--environment", str(folder / "environment.json"), "--data", str(work / "tok"),
             "--out", str(folder), "--log-dir", str(folder / "logs")],
            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        folders.append(folder)
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    splits = [json.loads((f / "train_metrics.json").read_text())["ranks"][0]["step_split"] for f in folders]
    return max(split["update_seconds"] for split in splits)


def measured_split(metrics: dict) -> dict:
    """The slowest rank's timed updates (the others wait for it, which
    their own split counts as communication)."""
    return max((r["step_split"] for r in metrics["ranks"]), key=lambda split: split["compute_seconds"])


@pytest.fixture(scope="module")
def network_at(cluster, experiment):
    """Shape every link to `gbit` and measure it (once per bandwidth)."""
    measured = {}

    def at(gbit: float):
        shape.shape(cluster[1], cluster[2], gbit, LATENCY_US)
        if gbit not in measured:
            measured[gbit] = measure_network(cluster, experiment)
        return measured[gbit]
    return at


def test_allreduce_time_follows_bytes_hosts_and_bandwidth(network_at):
    """Plain all-reduces between the hosts: time grows with bytes and hosts
    as the ring says, and the fitted bandwidth is the shaped one."""
    lines = []
    for gbit in GBIT:
        points, net = network_at(gbit)
        for p in points:
            model = allreduce_seconds(p["bytes"], p["ranks"], net)
            lines.append(f"{gbit:6g} {p['ranks']:5d} {p['bytes'] / 1e6:9.3f} {1e3 * p['seconds']:10.2f} "
                         f"{1e3 * model:10.2f}")
        largest = [p for p in points if p["bytes"] == max(q["bytes"] for q in points)]
        timing_holds([p["seconds"] for p in sorted(largest, key=lambda p: p["ranks"])] ==
                     sorted(p["seconds"] for p in largest), f"at {gbit:g} Gbit/s more hosts all-reduced faster")
        lines.append(f"  shaped {gbit:g} Gbit/s, {LATENCY_US:g} us -> fitted {net.name}")
        timing_holds(0.75 * gbit <= net.gbit <= 1.1 * gbit, f"shaped {gbit:g} Gbit/s but the all-reduce saw {net.name}")
    print("\nGbit/s hosts        MB   measured ms   model ms\n" + "\n".join(lines))


def test_plan_predicts_step_time_on_2_3_4_hosts(cluster, experiment, network_at, step_shape):
    """Real DDP runs against the plan fed by the single-node step measured
    under the same contention (its shape from the profile) and the measured
    network: step time within TOLERANCE each.
    (The network's own CPU work, the gloo threads' sums and the kernel's
    forwarding, shares the cores with compute; at these bandwidths it is
    small, at several Gbit/s it is not, and the test says so by failing.)"""
    levers = Levers(bucket_mb=experiment["distributed"]["bucket_cap_mb"])
    rows, errors, profiles = [], {}, {}
    for nodes in HOSTS:
        step = contended_step(cluster, experiment, nodes)  # just before its runs: the same load
        profiles[nodes] = step_shape.scaled_to(step, f"{nodes} one-rank runs at once")
        for gbit in GBIT:
            _, net = network_at(gbit)
            measured = measured_split(train(cluster, experiment, nodes))
            step = predict(profiles[nodes], net, nodes, levers)
            errors[gbit, nodes] = step.seconds / measured["update_seconds"] - 1
            largest = max(measured["buckets"], key=lambda b: b["bytes"])
            model_ms = 1e3 * allreduce_seconds(largest["bytes"], nodes, net)
            rows.append(f"{gbit:6g} {nodes:5d} | {measured['update_seconds']:7.3f} {measured['compute_seconds']:7.3f} "
                        f"{measured['exposed_seconds']:7.3f} {measured['overlap_seconds']:7.3f} | "
                        f"{step.seconds:7.3f} {step.compute:7.3f} {step.exposed:7.3f} {step.overlap:7.3f} | "
                        f"{100 * errors[gbit, nodes]:+6.1f}% | {largest['bytes'] / 1e6:5.1f} MB "
                        f"{1e3 * largest['seconds']:7.1f} ms vs {model_ms:7.1f}")
    print("\nsingle-node step under contention: " + ", ".join(
        f"{n} hosts {p.step:.3f} s" for n, p in profiles.items()))
    print("Gbit/s hosts | measured: step  compute exposed overlap | plan: step  compute exposed overlap | "
          "error | largest bucket: measured vs model\n" + "\n".join(rows))
    misses = {f"{g:g} Gbit/s x {n} hosts": f"{100 * e:+.1f}%" for (g, n), e in errors.items() if abs(e) > TOLERANCE}
    timing_holds(not misses, f"plan against measured step outside {100 * TOLERANCE:.0f}%: {misses}")
